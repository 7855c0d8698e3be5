"""Rate limits on the requests that write container and account DBs, as Swift's ratelimit.

A burst of object writes into one container, or of container creations in one account,
loads the container or account server holding that DB, and so every tenant whose DBs share
the server. An operator caps them per second in `[filter:ratelimit]`; every limit is off
unless set:

- `account_ratelimit = R`: container PUT and DELETE, per account.
- `container_ratelimit_<N> = R`: object PUT, POST and DELETE, per container, for a
  container holding N objects or more (a COPY counts as the PUT the copy feature makes of
  it, in the destination container). Between two sizes the rate is interpolated linearly;
  past the largest it stays; below the smallest there is no limit.
- `container_listing_ratelimit_<N> = R`: container GETs (listings), likewise.
- `account_whitelist` / `account_blacklist`: accounts (comma-separated, e.g. AUTH_test)
  never limited / refused every write and listing (497).

It sits after tempauth and copy (Swift puts it before auth): only a request the core will
allow takes a turn, so nobody without the right to write (no token, another tenant's) can
use up a tenant's turns and hold its writes back. Refused requests cost the core little
anyway.

Each key (an account, a container) has a next free turn. A request takes it and moves it on
by 1/rate, then waits until its turn (the worker serves others meanwhile). One whose turn is
more than `max_sleep_time_seconds` away is answered 498 at once and takes no turn, so a
client that keeps hammering does not push the turns of the container's other users further
out. A key idle for a while may go faster at first: its turns never start more than
`rate_buffer_seconds` in the past. Waits over `log_sleep_time_seconds` (0: none) are logged.

The next free turns live in memcached (`memcache_servers`), shared by every proxy and
worker, moved on by compare-and-swap (so a burst arriving at an idle key is not served
whole, as it would be if each request restarted the key). Without memcached (or while it
cannot be used) each worker counts alone, so the limits hold per worker process. Turns are
kept in 1/`clock_accuracy` seconds; the proxies' clocks must agree to about that.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any

from aiohttp import web

from swiftlite.common.http import HTTPError
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import api_path

log = logging.getLogger("swiftlite.proxy.ratelimit")

WRITES = ("PUT", "POST", "DELETE")
_LOCAL_KEYS = 10000  # keys a worker counts alone (without memcached), least recent dropped
_UNSHARED: Any = object()


def _sizes(conf: Any, prefix: str) -> list[tuple[int, float]]:
    """[(container size, rate)] from `<prefix><size> = rate` options, by size."""
    out = []
    for key, value in conf.items():
        if key.startswith(prefix) and key[len(prefix):].isdigit():
            rate = float(value)
            if rate > 0:
                out.append((int(key[len(prefix):]), rate))
    return sorted(out)


def rate_for(table: list[tuple[int, float]], size: int) -> float:
    """The rate for a container of `size` objects: 0 (no limit) below the smallest size,
    linear between two sizes, the last rate past the largest."""
    if not table or size < table[0][0]:
        return 0.0
    for (s0, r0), (s1, r1) in zip(table, table[1:], strict=False):
        if s0 <= size < s1:
            return r0 + (r1 - r0) * (size - s0) / (s1 - s0)
    return table[-1][1]


def _answer(status: int, reason: str, body: str) -> web.Response:
    """Swift's own statuses for these (clients such as python-swiftclient know 498)."""
    return web.Response(status=status, reason=reason, text=body)


def _names(value: str) -> frozenset[str]:
    return frozenset(n.strip() for n in value.split(",") if n.strip())


class RateLimit(Middleware):
    name = "ratelimit"
    plain_reads = PASS  # object reads are never limited

    def __init__(self, app: Any, proxy: Any, conf: Any) -> None:
        super().__init__(app, proxy, conf)
        self.accuracy = max(1, conf.get_int("clock_accuracy", 1000))
        self.max_sleep = conf.get_float("max_sleep_time_seconds", 60.0)
        self.log_sleep = conf.get_float("log_sleep_time_seconds", 0.0)
        self.buffer = conf.get_float("rate_buffer_seconds", 5.0)
        self.account_rate = conf.get_float("account_ratelimit", 0.0)
        self.container_rates = _sizes(conf, "container_ratelimit_")
        self.listing_rates = _sizes(conf, "container_listing_ratelimit_")
        self.whitelist = _names(conf.get_str("account_whitelist", ""))
        self.blacklist = _names(conf.get_str("account_blacklist", ""))
        self.active = bool(self.account_rate > 0 or self.container_rates
                           or self.listing_rates or self.blacklist)
        self._local: OrderedDict[str, int] = OrderedDict()
        self._queues: dict[str, list[Any]] = {}  # key -> [lock, requests using it]

    def info(self) -> dict[str, Any]:
        return {"account_ratelimit": self.account_rate,
                "max_sleep_time_seconds": self.max_sleep,
                "container_ratelimits": [list(r) for r in self.container_rates],
                "container_listing_ratelimits": [list(r) for r in self.listing_rates]}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if self.active:
            path = api_path(request)
            if path is not None and path.container is not None:
                refusal = await self._limit(request, path)
                if refusal is not None:
                    return refusal
        return await self.app(request)

    async def _limit(self, request: web.Request, path: Any) -> web.Response | None:
        """Wait for this request's turn; an answer instead when it is refused."""
        method = request.method
        if path.obj is None:
            kind = "account" if method in ("PUT", "DELETE") else \
                "listing" if method == "GET" else None
        else:
            kind = "container" if method in WRITES else None
        if kind is None or path.account in self.whitelist:
            return None
        if path.account in self.blacklist:
            return _answer(497, "Blacklisted", "Your account has been blacklisted")
        # Only a request the core will let through takes a turn: otherwise anyone (no token,
        # or another account's) could use up a tenant's turns and hold its own writes back.
        # The same checks as the core's, on the same cached info: nothing is read twice.
        target = self.proxy.target(request, path.account, path.container, None)
        try:
            if kind == "account":
                if self.account_rate <= 0:
                    return None
                self.proxy.authorize_account_write(request, target)
                rate, key = self.account_rate, path.account
            else:
                table = self.container_rates if kind == "container" else self.listing_rates
                if not table:
                    return None
                info = await self.proxy.authorize_container(
                    request, target, write=kind == "container", listing=kind == "listing")
                if info.status // 100 != 2:
                    return None  # the core answers (404, 503)
                rate = rate_for(table, info.object_count)
                key = f"{kind}/{path.account}/{path.container}"
        except HTTPError:
            return None  # refused by the core: no turn of anyone's is taken
        if rate <= 0:
            return None
        wait = await self._turn(key, rate)
        if wait is None:
            return _answer(498, "Rate Limited", "Slow down")
        if wait > 0:
            if self.log_sleep and wait > self.log_sleep:
                log.info("ratelimit: %s %s waits %.2fs", method, request.path, wait)
            await asyncio.sleep(wait)
        return None

    async def _turn(self, name: str, rate: float) -> float | None:
        """Seconds until this request's turn under `rate` per second for `name`, or None
        when that is past max_sleep_time_seconds (no turn is taken then)."""
        key = "ratelimit/" + hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()
        step = max(1, round(self.accuracy / rate))
        memcache = self.proxy.container_cache.memcache
        if memcache is not None:
            # One request of this worker at a time per key: a compare-and-swap then meets
            # other workers' and proxies' only, and seldom has to go round again.
            entry = self._queues.setdefault(key, [asyncio.Lock(), 0])
            entry[1] += 1
            try:
                async with entry[0]:
                    wait = await self._shared_turn(memcache, key, step)
            finally:
                entry[1] -= 1
                if not entry[1]:
                    del self._queues[key]
            if wait is not _UNSHARED:
                return wait
        return self._local_turn(key, step)

    async def _shared_turn(self, memcache: Any, key: str, step: int) -> Any:
        """_turn through memcached, which holds the key's next free turn (a compare-and-swap
        moves it on); _UNSHARED when memcached cannot be used."""
        ttl = self.max_sleep + self.buffer + 60  # an idle key is let go
        for _ in range(8):
            hit = await memcache.gets(key)
            if hit is None:  # absent (or memcached is down: then add fails too)
                now = int(time.time() * self.accuracy)
                if await memcache.add(key, b"%d" % (now + step), ttl):
                    return 0.0
                continue
            slot = self._slot(int(hit[0]))
            if slot is None:
                return None
            turn, wait = slot
            if await memcache.cas(key, b"%d" % (turn + step), hit[1], ttl):
                return wait
        return _UNSHARED

    def _local_turn(self, key: str, step: int) -> float | None:
        """_turn counted in this worker alone (no memcached, or it cannot be used)."""
        slot = self._slot(self._local.get(key, 0))
        if slot is None:
            return None
        turn, wait = slot
        self._local[key] = turn + step
        self._local.move_to_end(key)
        if len(self._local) > _LOCAL_KEYS:
            self._local.popitem(last=False)
        return wait

    def _slot(self, next_free: int) -> tuple[int, float] | None:
        """(this request's turn, seconds until it) given its key's next free turn, which is
        never taken as more than rate_buffer_seconds past; None when the wait would be past
        max_sleep_time_seconds."""
        now = int(time.time() * self.accuracy)
        turn = max(next_free, now - int(self.buffer * self.accuracy))
        wait = (turn - now) / self.accuracy
        return None if wait > self.max_sleep else (turn, max(0.0, wait))
