"""Cached account/container facts the proxy needs on every request (existence, ACLs).

Only positive answers are cached, and a change answered by the storage servers is seen by the
very next request on every worker of the host, and on every host sharing a memcached:

- Workers of one host share a stamp table (anonymous shared memory created before the workers
  fork, see `prepare_shared`): per slot (a hash of the key) the CLOCK_MONOTONIC ns of the
  latest change. A writer stamps the slot after the storage servers answered (whatever the
  answer: a timeout may still have changed something). A worker keeps an entry only while
  its slot is older than the moment the worker *started* fetching that entry, so a fetch that
  raced a write is never kept. Hash collisions only cost a refetch. The monotonic clock is
  one clock for the whole host and never steps back, unlike the wall clock.
- With `memcache_servers`, entries live in memcached for `recheck_*_existence` seconds. A
  writer overwrites the key with a tombstone (not a delete) after its write; a reader that
  missed stores its fetch with `add` (key absent) or `cas` against the tombstone it saw, so a
  fetch older than a write can never be stored over that write's tombstone. Workers then keep
  entries locally only for `memcache_local_ttl` seconds (default 0: every lookup asks
  memcached), the bound on how late a change made through another host is seen here.
  memcached down or slow means a miss: the storage servers are asked, nothing fails.

Use: `value, fill = await cache.lookup(key)`; on a miss fetch, then
`await cache.put(key, value, fill)`; after any write of the resource `await cache.drop(key)`.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import xxhash

from swiftlite.common.clients.memcache import MemcacheClient, parse_servers
from swiftlite.common.config import Section
from swiftlite.common.runtime.server import before_fork

_T = TypeVar("_T")

TOMBSTONE = b"-"
MAX_LOCAL_ENTRIES = 50000
MAX_DECODED = 1024


@dataclass
class ContainerInfo:
    status: int
    read_acl: str = ""
    write_acl: str = ""
    object_count: int = 0
    bytes_used: int = 0
    meta: dict[str, str] = field(default_factory=dict)
    policy_index: int = 0

    def derived(self, make: Callable[[ContainerInfo], _T]) -> _T:
        """`make(self)`, made once per info object: what a feature reads out of the
        metadata (its settings for this container) on every request, while the cache hands
        out one object per container until it changes. Kept beside the fields, never
        stored in memcached, compared or shown."""
        memo = self.__dict__.get("_derived")
        if memo is None:
            memo = self.__dict__["_derived"] = {}
        try:
            return memo[make]
        except KeyError:
            value = memo[make] = make(self)
            return value


@dataclass
class AccountInfo:
    status: int
    container_count: int = 0
    object_count: int = 0
    bytes_used: int = 0
    meta: dict[str, str] = field(default_factory=dict)  # X-Account-Meta-* and -Sysmeta-*


def digest(account: str, container: str, obj: str) -> int:
    """The stable 64-bit name of an object (or a container: obj ""), the same on every
    host and worker: its key in the stamp table and in the write log."""
    return xxhash.xxh3_64_intdigest("\0".join((account, container, obj)).encode("utf-8",
                                                                              "surrogateescape"))


class StampTable:
    """Monotonic ns of the latest change per slot, in memory shared with forked children."""

    def __init__(self, slots: int = 1 << 16) -> None:
        slots = 1 << max(4, (slots - 1).bit_length())  # a power of two: index by mask
        self.mask = slots - 1
        self._mm = mmap.mmap(-1, slots * 8)  # anonymous MAP_SHARED: children share it
        # Aligned 8-byte loads and stores are single instructions: no torn reads.
        self.slots = memoryview(self._mm).cast("q")
        # Writers keep each slot at the max of their stamps; readers take no lock.
        self._lock = multiprocessing.Lock()

    def stamp(self, h: int) -> None:
        i = h & self.mask
        # A worker killed inside this tiny section must not stall the others' writes.
        locked = self._lock.acquire(timeout=0.05)
        try:
            now = time.monotonic_ns()
            if self.slots[i] < now:
                self.slots[i] = now
        finally:
            if locked:
                self._lock.release()


_shared: StampTable | None = None


def prepare_shared(conf: Section) -> None:
    """Pre-fork hook: one stamp table for every worker `serve` is about to fork."""
    global _shared
    _shared = StampTable(conf.get_int("info_stamp_slots", 1 << 16))


before_fork(prepare_shared)


def shared_table() -> StampTable:
    """The table inherited from the parent; a process that did not go through `serve` (one
    process, tests) gets its own, which is all the sharing it needs."""
    global _shared
    if _shared is None:
        _shared = StampTable()
    return _shared


@dataclass(slots=True)
class Fill:
    """What a lookup saw on a miss: when the fetch started, and the memcached tombstone's
    cas unique (None: the key was absent, or memcached did not answer)."""

    since: int
    unique: int | None = None


_CODEC: dict[str, type] = {"container": ContainerInfo, "account": AccountInfo}


def _encode(value: Any) -> bytes:
    for name, cls in _CODEC.items():
        if isinstance(value, cls):
            return json.dumps({name: asdict(value)}).encode()
    return json.dumps({"value": value}).encode()


def _decode(data: bytes) -> Any:
    doc = json.loads(data)
    for name, cls in _CODEC.items():
        if name in doc:
            return cls(**doc[name])
    return doc["value"]


class InfoCache:
    def __init__(self, ttl: float, kind: str = "info", memcache: MemcacheClient | None = None,
                 local_ttl: float | None = None, table: StampTable | None = None) -> None:
        self.ttl = ttl
        self.kind = kind
        self.memcache = memcache
        if local_ttl is None:
            local_ttl = 0.0 if memcache is not None else ttl
        self.local_ttl_ns = int(min(local_ttl, ttl) * 1e9)
        # Long enough to outlive any fetch that started before the write it marks.
        self.tombstone_ttl = max(ttl, 120.0)
        self.table = table or shared_table()
        self._entries: dict[tuple, tuple[Any, int, int]] = {}  # key -> value, since, expiry
        # memcached's bytes -> their decoded value: with memcached, every request looks up
        # its container, and decoding the same JSON each time was ~3% of a cached GET.
        # Values are shared, as local entries are: nothing changes one after it is made.
        self._decoded: dict[bytes, Any] = {}
        self.changes = 0  # drops by this worker so far: what a request's memo is valid for

    def _slot_hash(self, key: tuple) -> int:
        # str hashes are salted per interpreter, but forked workers share the parent's salt.
        return hash((self.kind, key))

    def _mc_key(self, key: tuple) -> str:
        digest = hashlib.md5("/".join(key).encode(), usedforsecurity=False).hexdigest()
        return f"swiftlite/{self.kind}/{digest}"

    async def lookup(self, key: tuple) -> tuple[Any | None, Fill | None]:
        """(value, None) on a hit; (None, fill) on a miss: fetch, then `put(key, v, fill)`."""
        entry = self._entries.get(key)
        if entry is not None:
            value, since, expiry = entry
            if time.monotonic_ns() < expiry and \
                    self.table.slots[self._slot_hash(key) & self.table.mask] < since:
                return value, None
            del self._entries[key]
        fill = Fill(time.monotonic_ns())
        if self.memcache is None:
            return None, fill
        hit = await self.memcache.gets(self._mc_key(key))
        if hit is None:
            return None, fill
        data, unique = hit
        if data == TOMBSTONE:
            fill.unique = unique
            return None, fill
        value = self._decoded.get(data)
        if value is None:
            try:
                value = _decode(data)
            except (ValueError, TypeError, KeyError):
                return None, fill  # not ours, or an older format: fetch; `add` will not fit
            if len(self._decoded) >= MAX_DECODED:
                self._decoded.clear()
            self._decoded[data] = value
        self._keep(key, value, fill.since)
        return value, None

    async def put(self, key: tuple, value: Any, fill: Fill | None) -> None:
        """Cache what a fetch that began at `lookup` returned; without a fill, nothing."""
        if fill is None:
            return
        self._keep(key, value, fill.since)
        if self.memcache is not None:
            mkey, data = self._mc_key(key), _encode(value)
            if fill.unique is not None:
                await self.memcache.cas(mkey, data, fill.unique, self.ttl)
            else:
                await self.memcache.add(mkey, data, self.ttl)

    async def drop(self, key: tuple) -> None:
        """After a write of the resource (any outcome): no worker or host keeps older info.
        memcached first, then the stamp: a worker that read memcached before the tombstone
        started before the stamp, so it drops what it read."""
        self._entries.pop(key, None)
        self.changes += 1
        if self.memcache is not None:
            await self.memcache.set(self._mc_key(key), TOMBSTONE, self.tombstone_ttl)
        self.table.stamp(self._slot_hash(key))

    def keep_local(self, key: tuple, value: Any, fill: Fill | None) -> None:
        """`put` in this worker only (memcached is not told): for a cache that never
        shares, such as the link cache, without an await."""
        if fill is not None:
            self._keep(key, value, fill.since)

    def _keep(self, key: tuple, value: Any, since: int) -> None:
        if self.local_ttl_ns <= 0:
            return
        if len(self._entries) > MAX_LOCAL_ENTRIES:
            self._entries.clear()
        self._entries[key] = (value, since, since + self.local_ttl_ns)


def info_caches(conf: Section) -> tuple[InfoCache, InfoCache]:
    """The proxy's (container, account) caches per its config."""
    servers = parse_servers(conf.get_str("memcache_servers", ""))
    memcache = None
    if servers:
        memcache = MemcacheClient(
            servers, conf.get_float("memcache_connect_timeout", 0.3),
            conf.get_float("memcache_io_timeout", 0.5),
            conf.get_int("memcache_max_connections", 32),
            conf.get_float("memcache_retry_interval", 1.0))
    local = conf.get_float("memcache_local_ttl", 0.0) if memcache else None
    return (InfoCache(conf.get_float("recheck_container_existence", 10.0), "container",
                      memcache, local),
            InfoCache(conf.get_float("recheck_account_existence", 10.0), "account",
                      memcache, local))


class SyncedInfo:
    """Container facts kept in this worker for as long as the write log vouches that no
    proxy host has written the container since they were read, for decisions that are not
    about access (whether a plain read is object versioning's to answer).

    Every container write through any proxy stamps the container's digest (the stamp table
    here, the write log for other hosts), so a fact is void at once on this host and within
    the write log's bound on the others: the bound the hot-object cache already states for
    an object's own overwrite. A fact is never older than `ttl` (the info cache's lifetime),
    and none is used while the worker is out of sync with the write log. ACLs are never
    judged from here: they are read from memcached on every request, as before.
    """

    def __init__(self, ttl: float, write_log: Any, table: StampTable | None = None) -> None:
        self.ttl_ns = int(ttl * 1e9)
        self.write_log = write_log
        self.table = table or shared_table()
        self._entries: dict[tuple[str, str], tuple[Any, int, int]] = {}  # value, since, digest

    def get(self, acct: str, cont: str) -> Any | None:
        entry = self._entries.get((acct, cont))
        if entry is None:
            return None
        value, since, h = entry
        if time.monotonic_ns() - since < self.ttl_ns and self._valid(since, h):
            return value
        del self._entries[(acct, cont)]
        return None

    def keep(self, acct: str, cont: str, value: Any, since: int) -> None:
        """What a read that began at `since` (monotonic ns) found."""
        h = container_digest(acct, cont)
        if not self._valid(since, h):
            return
        if len(self._entries) > MAX_LOCAL_ENTRIES:
            self._entries.clear()
        self._entries[(acct, cont)] = (value, since, h)

    def _valid(self, since: int, h: int) -> bool:
        log = self.write_log
        return self.table.slots[h & self.table.mask] < since and log.in_sync() and \
            since > log.valid_after


def container_digest(acct: str, cont: str) -> int:
    """The name a container's writes are stamped and published under: an object's digest
    with an empty object name, which no object has."""
    return digest(acct, cont, "")
