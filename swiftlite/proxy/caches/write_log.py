"""Object writes shared between proxy hosts through memcached, so that every host's object
cache drops an overwritten or deleted object within about a second.

A host's own workers already agree at once (the stamp table, swiftlite/proxy/caches/info.py). Other
hosts used to learn nothing, so `object_cache_ttl` had to be short, and a short lifetime
caps the hit ratio of a skewed read mix. With memcached configured, every proxy worker:

- **publishes** each object write it makes (PUT, POST, DELETE, COPY; any outcome), and each
  container write (under the digest of the container with an empty object name, which
  voids what `info.SyncedInfo` kept about it): the
  8-byte digest of the object's path is appended to the memcached item of the current second
  (`swiftlite/writes/<second>`, kept `RETAIN` seconds). Writes are batched per worker: one
  append per `interval` at most, sent after the client's answer, so a write costs no round
  trip of its own;
- **polls** the items of the last seconds every `interval`, and stamps each digest it has not
  seen yet in the host's stamp table, which invalidates the object on every worker of the host
  and refuses any fetch begun before it (as a local write does);
- **serves from its cache only while it is in sync**: a worker whose last complete poll began
  more than `max_lag` seconds ago (memcached down, slow, evicting) treats every lookup as a
  miss until a poll succeeds again.

The bound, then: an object written through any proxy host is not served from any cache once
`interval + max_lag` seconds have passed after its write was answered, as long as the writing
proxy could reach memcached. If it could not, its write is logged as unpublished (and
counted), and other hosts may serve the old object for up to `object_cache_ttl`, which stays
the hard limit on any entry's life. Clocks: items are named by wall-clock second, and polls
read one second either side, so hosts agree within NTP's usual milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from swiftlite.common.observe import metrics
from swiftlite.proxy.caches.info import digest

if TYPE_CHECKING:
    from swiftlite.common.clients.memcache import MemcacheClient
    from swiftlite.proxy.caches.info import StampTable

log = logging.getLogger("swiftlite.proxy.caches.write_log")

PREFIX = "swiftlite/writes/"
RETAIN = 120  # seconds an item of writes lives in memcached
DIGEST = 8


class WriteLog:
    def __init__(self, memcache: MemcacheClient, table: StampTable, interval: float = 0.25,
                 max_lag: float = 1.0) -> None:
        self.memcache = memcache
        self.table = table
        self.interval = interval
        self.max_lag = max_lag
        self._pending: list[int] = []
        self._wake = asyncio.Event()
        self._seen: dict[int, int] = {}  # second -> bytes of its item already applied
        self._synced_at = -1e18  # monotonic start of the last poll that read every item
        # Monotonic ns: cache entries fetched before it are void (set when a poll succeeds
        # after polls failed for longer than max_lag, since writes may have been missed).
        self.valid_after = 0
        self._tasks: list[asyncio.Task] = []
        self._stopping = False

    # ---- both loops run in every worker ------------------------------------------------------

    def start(self, poll: bool = True) -> None:
        """Publish this worker's writes; and `poll` others' (a worker with an object cache)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._publish_loop())]
        if poll:
            self._tasks.append(loop.create_task(self._poll_loop()))

    async def stop(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        # Bounded: Python 3.11's wait_for can lose a cancel that lands as its inner call
        # fails (a refused connect to a dead memcached), and the loop then goes round once
        # more before it sees _stopping. A stop must never hang on that.
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2 * self.interval + 1.0)
        if self._pending:  # a last try, so a clean stop publishes what it wrote
            await self._publish(self._pending)

    def in_sync(self) -> bool:
        """Whether this worker has seen every other host's writes up to `max_lag` ago."""
        return time.monotonic() - self._synced_at <= self.max_lag

    # ---- publishing ---------------------------------------------------------------------------

    def written(self, account: str, container: str, obj: str) -> None:
        self._pending.append(digest(account, container, obj))
        self._wake.set()

    async def _publish_loop(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            await self._publish(batch)
            await asyncio.sleep(self.interval / 4)  # gather the next writes into one append

    async def _publish(self, batch: list[int]) -> None:
        data = b"".join(d.to_bytes(DIGEST, "big") for d in batch)
        key = PREFIX + str(int(time.time()))
        try:
            ok = await self.memcache.append(key, data, RETAIN)
        except Exception:  # noqa: BLE001 - a bug here must not stop publishing
            log.exception("publishing %d object writes", len(batch))
            ok = False
        if not ok:
            metrics.writes_unpublished(len(batch))
            log.error("could not publish %d object writes to memcached: other proxy hosts "
                      "may serve the old objects for up to object_cache_ttl", len(batch))

    # ---- polling ------------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        while not self._stopping:
            try:
                await self.poll()
            except Exception:  # noqa: BLE001 - keep polling; in_sync() goes false meanwhile
                log.exception("polling object writes")
            await asyncio.sleep(self.interval)

    async def poll(self) -> bool:
        """Apply every write published in the last seconds; True if every item was read."""
        began_ns = time.monotonic_ns()
        began = began_ns / 1e9
        now = int(time.time())
        complete = True
        # The last three seconds' items (a write is published well within a second of its
        # answer) and the next one, for a publisher whose clock is a little ahead.
        for second in range(now - 3, now + 2):
            answered, value = await self.memcache.lookup(PREFIX + str(second))
            if not answered:
                complete = False
                continue
            value = value or b""
            start = self._seen.get(second, 0)
            if len(value) < start:  # evicted and begun again: apply it all again
                start = 0
            for i in range(start - start % DIGEST, len(value) - DIGEST + 1, DIGEST):
                self.table.stamp(int.from_bytes(value[i:i + DIGEST], "big"))
            self._seen[second] = len(value)
        for second in list(self._seen):  # done with seconds well past any late publisher
            if second < now - 3:
                del self._seen[second]
        if complete:
            if began - self._synced_at > self.max_lag:  # writes may have gone unseen
                self.valid_after = began_ns
            self._synced_at = began
        return complete
