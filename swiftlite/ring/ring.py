"""The ring: (account, container, object) -> (partition, devices), in O(1) table reads.

The ring file is gzip'd msgpack written by the builder (ringbuilder/) with `write_ring`:

    {"version": 1, "part_power": P, "replicas": R,
     "devs": [dev dict or None, ...],                # index == dev id
     "replica2part2dev": [bytes, ...]}               # R arrays of uint16 (little endian)

Every server loads it with `Ring.load` and picks up a new file on disk by itself: a lookup
that finds the check due starts it in the thread pool (stat, and when the file changed, read,
gunzip and unpack) and goes on with the ring it has; the new ring is swapped in whole when it
is loaded, so no request waits for a reload or sees half of one. Daemons call `refresh` before
a pass. Without an event loop in the calling thread (tools, tests), the check runs inline.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import itertools
import logging
import os
import sys
import time
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack
import xxhash

from swiftlite.common.fsutil import atomic_write
from swiftlite.common.hashing import hash_path, partition_of
from swiftlite.common.threadpool import run_blocking

log = logging.getLogger("swiftlite.ring")

DEV_KEYS = ("id", "region", "zone", "ip", "port", "device", "weight")
NONE_DEV = 0xFFFF  # a hole in the table (replica count not yet filled)
WILDCARD_IPS = ("0.0.0.0", "::", "")


@dataclass
class RingData:
    part_power: int
    replicas: int
    devs: list[dict[str, Any] | None]
    replica2part2dev: list[array] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        tables = []
        for row in self.replica2part2dev:
            a = array("H", row)
            if sys.byteorder != "little":
                a.byteswap()
            tables.append(a.tobytes())
        devs = [None if d is None else {k: d.get(k) for k in (*DEV_KEYS, "meta") if k in d}
                for d in self.devs]
        payload = {"version": 1, "part_power": self.part_power, "replicas": self.replicas,
                   "devs": devs, "replica2part2dev": tables}
        return gzip.compress(msgpack.packb(payload), compresslevel=6, mtime=0)

    @classmethod
    def from_bytes(cls, data: bytes) -> RingData:
        raw = msgpack.unpackb(gzip.decompress(data))
        tables = []
        for blob in raw["replica2part2dev"]:
            a = array("H")
            a.frombytes(blob)
            if sys.byteorder != "little":
                a.byteswap()
            tables.append(a)
        return cls(raw["part_power"], raw["replicas"], raw["devs"], tables)


def write_ring(path: str, data: RingData) -> None:
    """Atomically replace the ring file (readers never see half a ring)."""
    # 0644: servers may run as another user than the ring tool
    atomic_write(path, data.to_bytes(), mode=0o644, prefix=".ring-")


Identity = tuple[int, int, int]


class _Loaded:
    """One ring file as loaded: replaced whole on a reload, never changed in place (apart from
    its handoff cache), so a lookup that took it sees one ring from start to end."""

    __slots__ = ("ident", "part_power", "replicas", "devs", "tables", "handoffs", "counts")

    def __init__(self, ident: Identity, data: RingData) -> None:
        self.ident = ident
        self.part_power = data.part_power
        self.replicas = data.replicas
        self.devs = data.devs
        self.tables = data.replica2part2dev
        self.handoffs: dict[int, list[dict[str, Any]]] = {}
        self.counts: dict[int, int] | None = None  # assignments(), once asked


class Ring:
    """A loaded ring file; re-read when its identity (mtime, inode, size) changes, checked
    at most every `reload_interval` seconds, off the event loop."""

    def __init__(self, path: str, reload_interval: float = 15.0) -> None:
        self.path = path
        self.reload_interval = reload_interval
        self._bad: Identity | None = None  # a file that failed to load (logged)
        # Checks are numbered as they start; a slow one never replaces what a later one put.
        self._checks = itertools.count(1)
        self._installed = 0
        self._checking: asyncio.Task[bool] | None = None
        self._ring = self._read()  # blocking, but at startup, before anything is served
        self._next_check = time.monotonic() + reload_interval

    @classmethod
    def load(cls, path: str, reload_interval: float = 15.0) -> Ring:
        return cls(path, reload_interval)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], kind: str) -> Ring:
        """`<swift_dir>/<kind>.ring.gz`, checked every `ring_reload_interval` seconds."""
        swift_dir = str(conf.get("swift_dir") or "/etc/swiftlite")
        return cls(os.path.join(swift_dir, f"{kind}.ring.gz"),
                   float(conf.get("ring_reload_interval", 15.0)))

    # ---- what is loaded ----------------------------------------------------------------

    @property
    def part_power(self) -> int:
        return self._ring.part_power

    @property
    def partition_count(self) -> int:
        return 1 << self._ring.part_power

    @property
    def replica_count(self) -> int:
        return self._ring.replicas

    @property
    def devs(self) -> list[dict[str, Any] | None]:
        return self._ring.devs

    @property
    def _tables(self) -> list[array]:
        return self._ring.tables

    # ---- loading (blocking parts run in the thread pool, or where no loop runs) ---------

    def _read(self) -> _Loaded:
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())  # of the file we read, even if replaced meanwhile
            data = RingData.from_bytes(f.read())
        return _Loaded(self._identity(st), data)

    @staticmethod
    def _identity(st: os.stat_result) -> Identity:
        # mtime alone misses a rewrite within one timestamp tick (coarse on Linux); write_ring
        # renames a new file into place, so the inode changes on every write.
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def _check(self) -> _Loaded | None:
        """Blocking: the ring file, loaded, if it changed since the ring we serve; None if it
        did not, or if it cannot be loaded (logged once per bad file)."""
        try:
            ident = self._identity(os.stat(self.path))
            if ident in (self._ring.ident, self._bad):
                return None
            loaded = self._read()
        except FileNotFoundError as exc:
            ident = (-1, -1, -1)  # gone: said once, until it is back
            error: Exception = exc
        except Exception as exc:  # noqa: BLE001 - any bad file: gzip, zlib, msgpack, shape
            error = exc
        else:
            self._bad = None
            return loaded
        # Keep serving the ring we have (a half-copied file is retried when it changes),
        # and say so once per bad file, not once per check.
        if ident != self._bad:
            log.error("ring %s could not be reloaded (%r); still serving the ring loaded "
                      "from it before (part power %d, %d replicas)", self.path, error,
                      self.part_power, self.replica_count)
        self._bad = ident
        return None

    def _install(self, check: int, loaded: _Loaded | None) -> bool:
        if loaded is None or check < self._installed:
            return False
        self._ring = loaded  # one reference swap: lookups see the old ring or the new one
        self._installed = check
        return True

    async def refresh(self) -> bool:
        """Check the file now, in the thread pool; True if a new ring was swapped in."""
        check = next(self._checks)
        self._next_check = time.monotonic() + self.reload_interval
        return self._install(check, await run_blocking(self._check))

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + self.reload_interval
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop in this thread: blocking here stalls nobody
            self._install(next(self._checks), self._check())
            return
        task = self._checking
        if task is None or task.done() or task.get_loop() is not loop:
            self._checking = loop.create_task(self.refresh())  # kept: tasks are weak refs

    def reload(self) -> None:
        """Force a re-read now, blocking (tests, tools)."""
        self._install(next(self._checks), self._read())

    # ---- lookups ------------------------------------------------------------------------

    def get_part(self, account: str, container: str | None = None, obj: str | None = None) -> int:
        return partition_of(hash_path(account, container, obj), self._ring.part_power)

    def get_part_nodes(self, part: int) -> list[dict[str, Any]]:
        """The primaries of `part`, each a copy carrying its replica `index`."""
        self._maybe_reload()
        return self._primaries(self._ring, part)

    @staticmethod
    def _primaries(ring: _Loaded, part: int) -> list[dict[str, Any]]:
        out = []
        seen = set()
        devs = ring.devs
        for index, table in enumerate(ring.tables):
            dev_id = table[part]
            if dev_id == NONE_DEV or dev_id in seen:
                continue
            seen.add(dev_id)
            dev = devs[dev_id]
            if dev is not None:
                out.append({**dev, "index": index})
        return out

    def get_nodes(self, account: str, container: str | None = None,
                  obj: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        self._maybe_reload()
        ring = self._ring  # one ring for the partition and its nodes
        part = partition_of(hash_path(account, container, obj), ring.part_power)
        return part, self._primaries(ring, part)

    def get_more_nodes(self, part: int) -> Iterator[dict[str, Any]]:
        """Handoffs for `part` in a stable order: new zones first, then new hosts, then the rest."""
        self._maybe_reload()
        ring = self._ring
        cached = ring.handoffs.get(part)
        if cached is None:
            cached = self._handoffs(ring, part)
            if len(ring.handoffs) < 65536:
                ring.handoffs[part] = cached
        for dev in cached:
            yield dict(dev)

    def _handoffs(self, ring: _Loaded, part: int) -> list[dict[str, Any]]:
        primaries = self._primaries(ring, part)
        used_ids = {d["id"] for d in primaries}
        zones = {(d["region"], d["zone"]) for d in primaries}
        hosts = {(d["region"], d["zone"], d["ip"]) for d in primaries}
        key = part.to_bytes(4, "big")
        candidates = sorted(
            (d for d in ring.devs if d is not None and d["id"] not in used_ids and d["weight"] > 0),
            key=lambda d: xxhash.xxh64_intdigest(key + d["id"].to_bytes(4, "big")),
        )
        out: list[dict[str, Any]] = []
        for tier in ("zone", "host", "dev"):
            for d in candidates:
                if d["id"] in used_ids:
                    continue
                z = (d["region"], d["zone"])
                h = (d["region"], d["zone"], d["ip"])
                if tier == "zone" and z in zones:
                    continue
                if tier == "host" and h in hosts:
                    continue
                used_ids.add(d["id"])
                zones.add(z)
                hosts.add(h)
                out.append({**d, "index": len(primaries) + len(out)})
        return out

    def devices_on(self, ip: str, port: int) -> list[dict[str, Any]]:
        """The devices this ring places on one server (what a storage node serves). A
        wildcard `ip` (a server bound to every address) matches by port alone: the ring
        holds routable addresses."""
        return [d for d in self._ring.devs if d is not None and d["port"] == port
                and (ip in WILDCARD_IPS or d["ip"] == ip)]

    def parts_for_device(self, dev_id: int) -> list[int]:
        """Partitions with a replica on `dev_id` (the replicator's work list)."""
        parts = set()
        for table in self._ring.tables:
            for part, d in enumerate(table):
                if d == dev_id:
                    parts.add(part)
        return sorted(parts)

    def assignments(self) -> dict[int, int]:
        """dev id -> partition replicas assigned to it (blocking: a pass over the whole
        table, kept with the loaded ring so it is made once per ring file)."""
        ring = self._ring
        if ring.counts is None:
            counts: collections.Counter[int] = collections.Counter()
            for table in ring.tables:
                counts.update(table)  # counted in C: ~0.15 s for 3 x 2**20 assignments
            counts.pop(NONE_DEV, None)
            ring.counts = dict(counts)
        return ring.counts


def quorum_size(n: int) -> int:
    """How many of `n` replicas make a majority: what a write needs stored, and a read
    agreeing, for the answer to stand (the proxy's replicated writes, the reconciler, the
    sharder's cleaving)."""
    return n // 2 + 1
