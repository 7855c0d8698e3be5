"""Which backend nodes to talk to: primaries then handoffs, minus nodes that keep failing.

Error limiting: a node that fails `error_limit` times within `error_interval` seconds is
skipped until the interval passes, so one dead disk does not cost every request a timeout.

Only faults of the node count, never answers the request itself provoked: otherwise one
client sending requests that every replica fails (a header that crashes a parser, a slow
query) would take every node out for every tenant. So:

- Counted at once: nothing could be sent (connection refused or not accepted in time) and
  507 (the device is gone or full). A client cannot cause these for one request. A connect
  this process could not even try (out of file descriptors: `local_fault`) is never
  counted; `max_clients` keeps clients from using them up.
- Judged per request (`Verdicts`): a 5xx, or a connection that broke or timed out after the
  request was sent, is only a suspicion. It counts when another replica answered the same
  request (same method and account/container/object path, in the same client request)
  with a 2xx/3xx: the request was servable, so the failing node is at fault. When every
  replica fails alike, the request is the likely cause and nothing is counted. A 404 or
  other 4xx vindicates nothing (a handoff that never held the object says 404).
- A suspicion that counts is fingerprinted by method and path: the same request failing
  on a node again within the interval counts once, so repeating one request cannot limit a
  node; a broken node fails many different requests and is limited quickly.

`Verdicts` lives in a context variable set in the client request's task before any fan-out,
so concurrent sub-requests to replicas share it and requests never see each other's.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

from swiftlite.common.clients.fastclient import ConnectError
from swiftlite.common.log_throttle import LogThrottle
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.proxy")


_local_log = LogThrottle(60.0)


def local_fault(what: str) -> None:
    """A backend request this process could not even try (out of file descriptors, say):
    never counted against the node, whatever caused it (a client holding connections by the
    thousand must not take nodes out for every tenant). Logged at most once a minute."""
    if _local_log.due():
        log.error("this process could not reach a backend (not counted against it): %s", what)


def node_key(node: dict[str, Any]) -> str:
    return f"{node['ip']}:{node['port']}/{node['device']}"


def server_key(node: dict[str, Any]) -> str:
    return f"{node['ip']}:{node['port']}"


class ErrorLimiter:
    """Faults are counted against a device (a 5xx, a 507: its disk) or, for network faults
    (refused, timed out, cut), against the whole server: a hung host is skipped for all of
    its devices once, not after `limit` faults on each of its 12 disks."""

    def __init__(self, limit: int = 10, interval: float = 60.0) -> None:
        self.limit = limit
        self.interval = interval
        # device or server key -> (count, last error time, fingerprints counted in window)
        self._errors: dict[str, tuple[int, float, set[Any]]] = {}

    def _limited(self, key: str) -> bool:
        entry = self._errors.get(key)
        if entry is None:
            return False
        count, last, _ = entry
        if time.monotonic() - last > self.interval:
            del self._errors[key]
            return False
        return count >= self.limit

    def limited(self, node: dict[str, Any]) -> bool:
        if not self._errors:
            return False
        return self._limited(server_key(node)) or self._limited(node_key(node))

    def error(self, node: dict[str, Any], why: str, fingerprint: Any = None,
              server: bool = False) -> None:
        """Count one fault of `node` (of its whole server when `server`); a `fingerprint`
        already counted in this window is not counted again (one request repeated is one
        fault, not many)."""
        key = server_key(node) if server else node_key(node)
        count, last, seen = self._errors.get(key, (0, 0.0, set()))
        now = time.monotonic()
        if now - last > self.interval:
            count, seen = 0, set()
        if fingerprint is not None:
            if fingerprint in seen:
                return
            if len(seen) < self.limit:  # enough to reach the limit; bounded memory
                seen.add(fingerprint)
        count += 1
        self._errors[key] = (count, now, seen)
        if count == self.limit:
            log.error("node %s error limited after %d errors (last: %s)", key, count, why)
        else:
            log.warning("node %s error: %s", key, why)

    def snapshot(self) -> list[dict[str, Any]]:
        """The faults counted in the current window, this process's view: `node` (ip:port
        for a whole server, ip:port/device for one device), `errors`, `limited`, and
        `until` (wall clock; None when not limited): when the limit lapses unless another
        fault comes. Read only: lapsed entries are skipped, not dropped."""
        now, wall = time.monotonic(), time.time()
        out = []
        for key, (count, last, _) in list(self._errors.items()):
            if now - last > self.interval:
                continue
            limited = count >= self.limit
            out.append({"node": key, "errors": count, "limited": limited,
                        "until": round(wall + last + self.interval - now, 3)
                        if limited else None})
        return sorted(out, key=lambda e: e["node"])

    def fatal(self, node: dict[str, Any], why: str, server: bool = False) -> None:
        """A node that cannot serve at all (refused connection: its server; 507: its
        device): limit at once."""
        key = server_key(node) if server else node_key(node)
        self._errors[key] = (self.limit, time.monotonic(), set())
        log.error("node %s error limited: %s", key, why)


class Verdicts:
    """One client request's replica answers, per backend request (method, logical path):
    suspicions held until another replica proves the request servable (see module doc)."""

    __slots__ = ("limiter", "_state")

    def __init__(self, limiter: ErrorLimiter) -> None:
        self.limiter = limiter
        # (method, path) -> None once a replica answered it well, else the suspects so far
        self._state: dict[tuple[str, str],
                          list[tuple[dict[str, Any], str, bool]] | None] = {}

    def suspect(self, node: dict[str, Any], method: str, path: str, why: str,
                server: bool = False) -> None:
        """`server`: a network fault (held against the node's whole server)."""
        key = (method, path)
        pending = self._state.get(key, [])
        if pending is None:
            self.limiter.error(node, why, key, server)
            return
        pending.append((node, why, server))
        self._state[key] = pending
        log.info("node %s: %s (held against it only if another replica serves it)",
                 node_key(node), why)

    def served(self, method: str, path: str) -> None:
        key = (method, path)
        pending = self._state.get(key, [])
        self._state[key] = None
        if pending:
            for node, why, server in pending:
                self.limiter.error(node, why, key, server)

    # The one place where what a backend request came to is judged: every fan-out, read and
    # grouped write calls these two.

    def answered(self, node: dict[str, Any], method: str, path: str, status: int) -> None:
        """What an answer of `status` to `method path` (a node path) says about `node`."""
        if status < 400:
            self.served(method, logical_path(path))
        elif status == 507:
            self.limiter.fatal(node, "507 Insufficient Storage")
        elif status >= 500:
            self.suspect(node, method, logical_path(path), f"{method} {path}: {status}")

    def unreachable(self, node: dict[str, Any], method: str, path: str,
                    exc: BaseException) -> None:
        """What a request that got no answer (`exc`) says about `node`."""
        if isinstance(exc, ConnectError):
            # Nothing was sent, so the request cannot be the cause.
            if exc.local:  # this process is out of descriptors: no node's fault
                local_fault(f"{method} {path}: {exc}")
            elif exc.refused:
                self.limiter.fatal(node, f"{method} {path}: {exc}", server=True)
            else:
                self.limiter.error(node, f"{method} {path}: {exc!r}", server=True)
        else:  # sent, then cut or timed out: maybe the request's fault (see module doc)
            self.suspect(node, method, logical_path(path), f"{method} {path}: {exc!r}",
                         server=True)


_VERDICTS: contextvars.ContextVar[Verdicts | None] = contextvars.ContextVar(
    "swiftlite_verdicts", default=None)


def verdicts(limiter: ErrorLimiter) -> Verdicts:
    """This request's Verdicts, created on first use. Call it in the request's own task
    before starting concurrent sub-requests, so they all share one."""
    v = _VERDICTS.get()
    if v is None or v.limiter is not limiter:
        v = Verdicts(limiter)
        _VERDICTS.set(v)
    return v


def logical_path(node_path: str) -> str:
    """`/dev/part/a/c/o` -> `/a/c/o`: the same request on every replica."""
    parts = node_path.split("/", 3)
    return "/" + parts[3] if len(parts) == 4 else node_path


class ReadOrder:
    """Where a read looks: the primaries in random order (so every replica serves reads),
    then as many handoffs (where writes went while a primary was down), those found only
    when a read gets that far."""

    __slots__ = ("primaries", "_ring", "_part")

    def __init__(self, ring: Ring, part: int) -> None:
        self.primaries = ring.get_part_nodes(part)
        random.shuffle(self.primaries)
        self._ring, self._part = ring, part

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.primaries
        yield from itertools.islice(self._ring.get_more_nodes(self._part), len(self.primaries))


read_order = ReadOrder


def write_handoffs(ring: Ring, part: int, limiter: ErrorLimiter) -> Iterator[dict[str, Any]]:
    """Handoffs that may stand in for a primary a write cannot reach (limited ones skipped)."""
    return (n for n in ring.get_more_nodes(part) if not limiter.limited(n))
