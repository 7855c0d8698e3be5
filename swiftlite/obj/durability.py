"""Group durability: one filesystem flush makes many concurrent writes durable at once.

A durable object write needs its data flushed before the rename that publishes it, and the
rename (with any directories it created) flushed before the PUT is acknowledged. Done per
file that is three or four fsyncs per object, and a disk manages only about a thousand a
second, whatever their size: that, not bandwidth, caps small-object PUTs.

`GroupSync.sync()` is classic group commit over `syncfs(2)`: a caller needs a flush that
*starts* after its own writes; if one is already running it waits for that one to finish
and then shares the next, so every writer that arrived during a flush is covered by a single
following flush. Nothing is acknowledged before its flush completes, so a 201 still means
"on disk"; only the number of flushes changes (two per batch instead of ~3 per object).

Where syncfs is unavailable (not Linux), `sync_mode = file` keeps per-file fsyncs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from swiftlite.common.fsutil import fsync_dir

_libc = None


def _syncfs_fn():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name, use_errno=True) if name else False
    fn = getattr(_libc, "syncfs", None) if _libc else None
    return fn


def syncfs_available() -> bool:
    return _syncfs_fn() is not None


def syncfs(fd: int) -> None:
    fn = _syncfs_fn()
    if fn is None:
        os.sync()  # flushes everything; correct, only slower
        return
    if fn(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class GroupSync:
    """Coalesces durability requests for one filesystem.

    Writers announce their commit step with `writing()`; a flush leader waits up to
    `gather` seconds for every announced writer to reach `sync()` before it starts the
    flush, so one syncfs covers a whole wave of concurrent writes instead of the one or two
    that happened to arrive during the previous flush. Nobody waits when nobody else is
    writing, so a lone PUT pays no delay.
    """

    def __init__(self, path: str, gather: float = 0.002) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        self.gather = gather
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # flush finished
        self._arrived = threading.Condition(self._lock)  # a writer reached sync()
        self._started = 0  # flushes begun
        self._done = 0  # flushes finished
        self._running = False
        self._gathering = False
        self._active = 0  # writers inside writing()
        self._waiting = 0  # callers inside sync()
        self._error: OSError | None = None
        self.flushes = 0  # for tests and stats

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Mark a commit in progress: it will call sync() shortly, so a flush may wait."""
        with self._lock:
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._gathering:
                    self._arrived.notify()

    def sync(self) -> None:
        """Return once everything this thread wrote before calling is on stable storage."""
        with self._cond:
            target = self._started + 1  # the first flush to start after this call
            self._waiting += 1
            if self._gathering:
                self._arrived.notify()
            try:
                while self._done < target:
                    if self._running or self._gathering:
                        self._cond.wait()
                        continue
                    self._lead()
                if self._error is not None and self._done == target:
                    raise self._error  # the flush we shared failed: nothing is durable
            finally:
                self._waiting -= 1

    def _lead(self) -> None:
        """Gather the writers still on their way, then flush once for all (lock held)."""
        if self.gather > 0 and self._waiting < self._active:
            self._gathering = True
            deadline = time.monotonic() + self.gather
            while self._waiting < self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._arrived.wait(left)
            self._gathering = False
        self._running = True
        self._started += 1
        gen = self._started
        self._lock.release()
        error: OSError | None = None
        try:
            syncfs(self.fd)
        except OSError as exc:
            error = exc
        finally:
            self._lock.acquire()
            self._running = False
            self._done = gen
            self._error = error
            self.flushes += 1
            self._cond.notify_all()

    def close(self) -> None:
        os.close(self.fd)


class Syncers:
    """One GroupSync per filesystem (devices sharing one share its flushes: a syncfs
    covers the whole filesystem anyway), found by device path; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_path: dict[str, GroupSync] = {}
        self._by_dev: dict[int, GroupSync] = {}
        self.gather = 0.002

    def for_device(self, device_path: str) -> GroupSync:
        gs = self._by_path.get(device_path)
        if gs is None:
            dev = os.stat(device_path).st_dev
            with self._lock:
                gs = self._by_dev.get(dev)
                if gs is None:
                    gs = GroupSync(device_path, self.gather)
                    self._by_dev[dev] = gs
                self._by_path[device_path] = gs
        return gs

    def close(self) -> None:
        with self._lock:
            for gs in self._by_dev.values():
                gs.close()
            self._by_dev.clear()
            self._by_path.clear()


SYNCERS = Syncers()

# "batch": group commit over syncfs (default where available); "file": fsync every file and
# directory. Set once per process from the server's `sync_mode` config.
MODE = "batch"


def configure(mode: str, gather_ms: float = 2.0) -> str:
    global MODE
    if mode not in ("batch", "file"):
        raise ValueError(f"sync_mode must be 'batch' or 'file', not {mode!r}")
    SYNCERS.gather = max(0.0, gather_ms) / 1000
    MODE = mode if mode == "file" or syncfs_available() else "file"
    return MODE


def syncer(device_path: str) -> GroupSync | None:
    """The device's group syncer in batch mode; None in file mode or without the device."""
    if MODE != "batch":
        return None
    try:
        return SYNCERS.for_device(device_path)
    except FileNotFoundError:
        return None


def committing(device_path: str) -> AbstractContextManager[None]:
    """Wrap a write's commit step (the hop that flushes): lets group commit wait for it."""
    if MODE == "batch":
        try:
            return SYNCERS.for_device(device_path).writing()
        except FileNotFoundError:
            pass  # no device: the write itself reports it
    return nullcontext()


def flush_file(device_path: str, fd: int) -> None:
    """Make a written (not yet published) file's data durable."""
    if MODE == "batch":
        SYNCERS.for_device(device_path).sync()
    else:
        os.fsync(fd)


def flush_dirs(device_path: str, dir_fd: int, created_parents: list[str]) -> None:
    """Make a rename into `dir_fd` (and directories just created) durable."""
    if MODE == "batch":
        SYNCERS.for_device(device_path).sync()
        return
    os.fsync(dir_fd)
    for parent in created_parents:
        fsync_dir(parent)
