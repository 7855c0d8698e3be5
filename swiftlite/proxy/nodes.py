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


def read_order(ring: Ring, part: int) -> list[dict[str, Any]]:
    """Where a read looks: the primaries in random order (so every replica serves reads),
    then as many handoffs (where writes went while a primary was down)."""
    nodes = ring.get_part_nodes(part)
    random.shuffle(nodes)
    nodes += [n for _, n in zip(range(len(nodes)), ring.get_more_nodes(part), strict=False)]
    return nodes


def write_handoffs(ring: Ring, part: int, limiter: ErrorLimiter) -> Iterator[dict[str, Any]]:
    """Handoffs that may stand in for a primary a write cannot reach (limited ones skipped)."""
    return (n for n in ring.get_more_nodes(part) if not limiter.limited(n))
