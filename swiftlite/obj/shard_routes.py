"""Where an object server sends a container update once the container is sharded.

A root's container server answers an update for a name it no longer holds with the shard
that holds it (common.shard_redirect). The object server then sends the update to that
shard's replica in the same position of the container ring's primaries as the root replica
it was meant for (so three root replicas map to three shard replicas, not nine sends), and
remembers the shard's range for `ttl` seconds so later updates go straight to the shard.
If sending to a cached shard fails (it moved, or is gone), the route is forgotten and the
update goes to the root; if anything about that fails, the update is saved for the root
as any failure is, and the updater follows the redirect in its turn: an update is never
dropped.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from swiftlite.common.config import Section
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.object.updates")


class ShardRoutes:
    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.ttl = conf.get_float("shard_route_cache_ttl", 10.0)
        self._ring: Ring | None = None
        # (root account, root container) -> [(expires, lower, upper, shard a, shard c)]
        self._cache: dict[tuple[str, str], list[tuple[float, str, str, str, str]]] = {}

    @property
    def ring(self) -> Ring | None:
        if self._ring is None:
            try:
                self._ring = Ring.from_conf(self.conf, "container")
            except (OSError, ValueError) as exc:
                log.warning("no container ring to follow shard redirects with: %r", exc)
                return None
        return self._ring

    def learn(self, account: str, container: str, shard_account: str, shard_container: str,
              lower: str, upper: str) -> None:
        if self.ttl <= 0:
            return
        now = time.monotonic()
        entries = [e for e in self._cache.get((account, container), [])
                   if e[0] > now and (e[1], e[2]) != (lower, upper)]
        entries.append((now + self.ttl, lower, upper, shard_account, shard_container))
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[(account, container)] = entries

    def forget(self, account: str, container: str) -> None:
        self._cache.pop((account, container), None)

    def lookup(self, account: str, container: str, obj: str) -> tuple[str, str] | None:
        entries = self._cache.get((account, container))
        if not entries:
            return None
        now = time.monotonic()
        for expires, lower, upper, sa, sc in entries:
            if expires > now and (not lower or obj > lower) and (not upper or obj <= upper):
                return sa, sc
        return None

    def targets(self, account: str, container: str, shard_account: str, shard_container: str,
                target: dict[str, Any]) -> list[dict[str, Any]]:
        """The shard replica(s) standing in for root replica `target` ([] without a ring):
        the one at the same primary index, or every primary when `target` is a handoff."""
        ring = self.ring
        if ring is None:
            return []
        _, roots = ring.get_nodes(account, container)
        part, shards = ring.get_nodes(shard_account, shard_container)
        chosen = shards
        for i, n in enumerate(roots):
            if (n["ip"], n["port"], n["device"]) == (target["ip"], target["port"],
                                                     target["device"]) and i < len(shards):
                chosen = [shards[i]]
                break
        return [{"ip": n["ip"], "port": n["port"], "device": n["device"], "partition": part}
                for n in chosen]
