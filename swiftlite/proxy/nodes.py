"""Which backend nodes to talk to: primaries then handoffs, minus nodes that keep failing.

Error limiting: a node that fails `error_limit` times within `error_interval` seconds is
skipped until the interval passes, so one dead disk does not cost every request a timeout.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from typing import Any

from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.proxy")


def node_key(node: dict[str, Any]) -> str:
    return f"{node['ip']}:{node['port']}/{node['device']}"


class ErrorLimiter:
    def __init__(self, limit: int = 10, interval: float = 60.0) -> None:
        self.limit = limit
        self.interval = interval
        self._errors: dict[str, tuple[int, float]] = {}

    def limited(self, node: dict[str, Any]) -> bool:
        entry = self._errors.get(node_key(node))
        if entry is None:
            return False
        count, last = entry
        if time.monotonic() - last > self.interval:
            del self._errors[node_key(node)]
            return False
        return count >= self.limit

    def error(self, node: dict[str, Any], why: str) -> None:
        key = node_key(node)
        count, last = self._errors.get(key, (0, 0.0))
        now = time.monotonic()
        if now - last > self.interval:
            count = 0
        count += 1
        self._errors[key] = (count, now)
        if count == self.limit:
            log.error("node %s error limited after %d errors (last: %s)", key, count, why)
        else:
            log.warning("node %s error: %s", key, why)

    def fatal(self, node: dict[str, Any], why: str) -> None:
        """A node that cannot serve at all (refused connection, 507): limit at once."""
        self._errors[node_key(node)] = (self.limit, time.monotonic())
        log.error("node %s error limited: %s", node_key(node), why)

    def ok(self, node: dict[str, Any]) -> None:
        if self._errors:
            self._errors.pop(node_key(node), None)


def iter_nodes(ring: Ring, part: int, limiter: ErrorLimiter, shuffle: bool = False,
               handoffs: int | None = None) -> Iterator[dict[str, Any]]:
    """Primaries (shuffled for reads, so every replica serves) then up to `handoffs` handoffs.

    Error-limited nodes are skipped; if every primary is limited, they are tried anyway at
    the end rather than failing outright.
    """
    primaries = ring.get_part_nodes(part)
    if shuffle:
        random.shuffle(primaries)
    skipped = []
    for node in primaries:
        if limiter.limited(node):
            skipped.append(node)
        else:
            yield node
    budget = len(primaries) * 2 if handoffs is None else handoffs
    for node in ring.get_more_nodes(part):
        if budget <= 0:
            break
        if limiter.limited(node):
            continue
        budget -= 1
        yield node
    yield from skipped
