"""Per-device update log: one flush makes a batch of item updates durable for every DB of a
device.

Without it, each DB's group commit flushes that DB's WAL, so 32 updates spread over the 10
shards of a sharded container cost about ten flushes where one DB would have cost one. With
it (`db_update_log`), a DB's group commit writes its rows to the DB without a flush
(`synchronous = NORMAL`: safe against a process crash, not a power loss), then hands them
to its device's log. The log gathers every DB's entries that arrive while it flushes,
writes them with one `fdatasync`, and only then are the updates answered: a 2xx still
means the update survives a power loss, in the log if not yet in the DB.

Segments are `<device>/<kind>s_log/<worker>-<seq>.log`, each held under an exclusive
`flock` by the worker that writes it (a worker has one log per device). When a segment
passes `db_update_log_bytes` or `db_update_log_seconds`, the worker starts the next one,
then flushes the WAL of every DB the old one touched, and deletes it:
the DBs themselves are flushed once per segment, not once per commit. A segment's entries
were applied to their DBs before they were logged, so after that flush it holds nothing
the DBs lack.

After a crash, a segment nobody holds is replayed by whichever worker locks it first (at
start-up, and every `db_update_log_seconds` after): its rows are merged again, newest wins,
so rows a DB already holds change nothing; then those DBs are flushed and the segment
deleted. A torn tail (the crash came mid-write, so those updates were never answered) ends
the replay of its segment.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import struct
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgpack

from swiftlite.common.fsutil import fsync_dir
from swiftlite.common.threadpool import run_blocking

log = logging.getLogger("swiftlite.db.update_log")

_HEAD = struct.Struct("<II")  # payload length, crc32 of the payload
MAX_RECORD = 64 << 20  # a length past this is a torn or corrupt header, not a record
SUFFIX = ".log"

# Merges `rows` into the DB at `path` (absolute), durably; raises if the DB is gone.
Replayer = Callable[[str, list[dict[str, Any]]], Awaitable[None]]


def log_dir(devices: str, device: str, kind: str) -> str:
    return os.path.join(devices, device, f"{kind}s_log")


def encode(db_rel: str, rows: list[dict[str, Any]]) -> bytes:
    payload = msgpack.packb([db_rel, rows], use_bin_type=True)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def decode(data: bytes) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The records of a segment, in order, up to the first torn or corrupt one."""
    pos = 0
    while pos + _HEAD.size <= len(data):
        length, crc = _HEAD.unpack_from(data, pos)
        start = pos + _HEAD.size
        if length > MAX_RECORD or start + length > len(data):
            return
        payload = data[start:start + length]
        if zlib.crc32(payload) != crc:
            return
        try:
            db_rel, rows = msgpack.unpackb(payload, raw=False)
        except Exception:
            return
        yield db_rel, rows
        pos = start + length


def flush_db(path: str) -> None:
    """fsync a DB's WAL, where the unflushed commits are (or, past a checkpoint, in the main
    file, which SQLite flushes when a checkpoint completes, before the WAL is reused).

    Only the WAL file is opened here, and no SQLite connection: closing a descriptor of the
    DB file itself drops every POSIX lock this process's connections hold on it (fcntl
    locks belong to the process), and another process's connection, closing, could then
    take the DB for unused and delete the WAL under the server's connection, whose later
    commits would go to a deleted file."""
    try:
        fd = os.open(path + "-wal", os.O_RDONLY)
    except FileNotFoundError:
        return  # no WAL: every commit is in the main file, flushed by its checkpoint
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Segment:
    """One open segment: its fd holds the flock until the segment is retired."""

    def __init__(self, directory: str, name: str) -> None:
        try:  # the log's own directory only: a device that vanished (a failed disk
            os.mkdir(directory)  # unmounted, renamed away) must not come back empty here
        except FileExistsError:
            pass
        self.path = os.path.join(directory, name)
        # Created and locked under a dot name, then renamed in: a scanner never sees (and
        # takes for a dead worker's) a segment its owner has not locked yet.
        tmp = os.path.join(directory, "." + name)
        self.fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.rename(tmp, self.path)
        fsync_dir(directory)
        self.started = time.monotonic()
        self.size = 0
        self.dbs: set[str] = set()
        self.broken = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        os.fdatasync(self.fd)
        self.size += len(data)

    def retire(self, devices_dev: str) -> None:
        """Flush the WAL of every DB this segment touched, then delete it (blocking)."""
        for rel in sorted(self.dbs):
            flush_db(os.path.join(devices_dev, rel))
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)


class DeviceLog:
    """The log of one device in this worker. Blocking, and used by one commit round at a
    time (swiftlite.db.device_commit): no lock of its own."""

    def __init__(self, dev_path: str, directory: str, token: str, max_bytes: int,
                 max_age: float) -> None:
        self.dev_path = dev_path
        self.dir = directory
        self.token = token
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._seq = 0
        self._seg: _Segment | None = None
        self.flushes = 0

    def rotate_if_due(self) -> _Segment | None:
        """Close the current segment if it is full, old or broken; returns it (to retire)."""
        seg = self._seg
        if seg is not None and (seg.broken or seg.size >= self.max_bytes
                                or time.monotonic() - seg.started >= self.max_age):
            self._seg = None
            return seg
        return None

    def write(self, records: list[tuple[str, bytes]]) -> None:
        """Append (db_rel, record) pairs and flush them. Raises if the write or the flush
        failed: then nothing written here may be taken as durable."""
        seg = self._seg
        if seg is None:
            self._seq += 1
            seg = self._seg = _Segment(self.dir, f"{self.token}-{self._seq:06d}{SUFFIX}")
        try:
            seg.write(b"".join(rec for _, rec in records))
        except Exception:
            seg.broken = True  # its tail is unknown: the next write starts a new segment
            raise
        seg.dbs.update(rel for rel, _ in records)
        self.flushes += 1

    def take(self) -> _Segment | None:
        seg, self._seg = self._seg, None
        return seg


class UpdateLog:
    """A worker's update logs, one per device, their retirement, and the replay of dead
    workers' segments."""

    def __init__(self, devices: str, kind: str, max_bytes: int = 16 << 20,
                 max_age: float = 10.0) -> None:
        self.devices = devices
        self.kind = kind
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._logs: dict[str, DeviceLog] = {}
        self._retiring: set[asyncio.Task] = set()
        self.replayed_records = 0

    def device_log(self, device: str) -> DeviceLog:
        dl = self._logs.get(device)
        if dl is None:
            dl = self._logs[device] = DeviceLog(
                os.path.join(self.devices, device), log_dir(self.devices, device, self.kind),
                self.token, self.max_bytes, self.max_age)
        return dl

    @property
    def flushes(self) -> int:
        return sum(dl.flushes for dl in self._logs.values())

    def retire(self, seg: _Segment | None, dev_path: str) -> None:
        """Flush the DBs `seg` touched and delete it, in the background."""
        if seg is None:
            return
        task = asyncio.create_task(self._retire_one(seg, dev_path))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire_one(self, seg: _Segment, dev_path: str) -> None:
        try:
            await run_blocking(seg.retire, dev_path)
        except Exception:  # left on disk, locked until this worker exits: replayed then
            log.exception("retiring update log segment %s", seg.path)

    async def close(self) -> None:
        """Retire every segment (the caller has stopped the commit rounds): a clean stop
        leaves nothing to replay."""
        for dl in self._logs.values():
            self.retire(dl.take(), dl.dev_path)
        if self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)

    # -- replay ------------------------------------------------------------------------------
    async def replay_orphans(self, replay: Replayer) -> int:
        """Replay and delete every segment of this server's devices that no live worker
        holds; returns how many. Rows for a DB that no longer exists are dropped."""
        done = 0
        for device in await run_blocking(_listdir, self.devices):
            directory = log_dir(self.devices, device, self.kind)
            for name in await run_blocking(_listdir, directory):
                if name.startswith("."):  # a segment made but never locked and renamed in
                    await run_blocking(_unlink_stale, os.path.join(directory, name))
                elif name.endswith(SUFFIX):
                    if await self._replay_segment(os.path.join(self.devices, device),
                                                  os.path.join(directory, name), replay):
                        done += 1
        return done

    async def _replay_segment(self, dev_path: str, path: str, replay: Replayer) -> bool:
        fd = await run_blocking(_lock_orphan, path)
        if fd is None:
            return False  # its worker is alive (or another worker is replaying it)
        try:
            data = await run_blocking(_read_fd, fd)
            by_db: dict[str, list[dict[str, Any]]] = {}
            records = 0
            for db_rel, rows in decode(data):
                by_db.setdefault(db_rel, []).extend(rows)
                records += 1
            for db_rel, rows in by_db.items():
                db_path = os.path.normpath(os.path.join(dev_path, db_rel))
                if not db_path.startswith(dev_path + os.sep):
                    continue  # not a path this log could have written
                try:
                    await replay(db_path, rows)
                except Exception as exc:  # gone, deleted, quarantined: nothing to restore
                    log.warning("update log replay: %s: %s", db_path, exc)
            await run_blocking(_unlink, path)
            self.replayed_records += records
            log.info("replayed update log segment %s: %d records for %d DBs", path,
                     records, len(by_db))
            return True
        finally:
            os.close(fd)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _lock_orphan(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    if os.fstat(fd).st_nlink == 0:  # retired by its owner while we waited: done already
        os.close(fd)
        return None
    return fd


def _read_fd(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _unlink_stale(path: str, age: float = 60.0) -> None:
    """Remove a dot file older than `age` seconds (a younger one may be a live worker's
    segment between its creation and its rename)."""
    try:
        if time.time() - os.stat(path).st_mtime > age:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
