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

A failed flush fails every write it may have covered, and a later flush cannot undo that:
after a writeback error Linux reports the error once and marks the pages clean, so the next
syncfs returns 0 for data that never reached the disk. Failures are therefore kept per flush
generation, and a caller fails when any flush that ended after its first write failed (see
`GroupSync.epoch` and `sync(since)`), however late it wakes.

Where syncfs is unavailable (not Linux), `sync_mode = file` keeps per-file fsyncs.

Fault injection (tests only): `SWIFTLITE_FAIL_FLUSHES="3"` (or "3,5") in a process's
environment, read by `configure`, makes that process's 3rd (and 5th) group flush raise EIO
instead of flushing, the way a real one reports a writeback error.
`SWIFTLITE_FLUSH_DELAY_MS="300"` makes each of its filesystem flushes take that much longer,
the way a slow disk's do (so a test can catch batches in flight).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from swiftlite.common.fsutil import fsync_dir
from swiftlite.common.threadpool import run_blocking

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


FAIL_ENV = "SWIFTLITE_FAIL_FLUSHES"
DELAY_ENV = "SWIFTLITE_FLUSH_DELAY_MS"
_delay = [0.0]  # seconds added to every flush: tests only
_fail_at: frozenset[int] = frozenset()  # group flush numbers (1-based) that fail: tests only
_flush_count = [0]  # group flushes of this process (counted under each GroupSync's lock)
_count_lock = threading.Lock()


def _injected_failure() -> OSError | None:
    """The EIO the fault injection asks of this flush, if any (no cost when it is off)."""
    if not _fail_at:
        return None
    with _count_lock:
        _flush_count[0] += 1
        n = _flush_count[0]
    if n in _fail_at:
        return OSError(errno.EIO, f"{os.strerror(errno.EIO)} (injected: flush {n})")
    return None


def set_failing_flushes(spec: str | None) -> None:
    """Make the listed group flushes ("3" or "3,5", counted from now) raise EIO."""
    global _fail_at
    _fail_at = frozenset(int(n) for n in (spec or "").replace(",", " ").split())
    _flush_count[0] = 0


def syncfs(fd: int) -> None:
    if _delay[0]:
        time.sleep(_delay[0])
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
        # Failed flushes by generation, kept while a caller may still ask about them (the
        # oldest go past _KEEP_FAILED; a caller older than what was dropped fails anyway).
        self._failed: dict[int, OSError] = {}
        self._dropped: tuple[int, OSError | None] = (0, None)  # newest dropped generation
        self.flushes = 0  # for tests and stats
        self.failures = 0

    def epoch(self) -> int:
        """A token for `sync(since=...)`, taken before a caller's first write: flushes that
        end after it may have written (and lost) that caller's pages."""
        return self._done

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

    def sync(self, since: int | None = None) -> None:
        """Return once everything this thread wrote before calling is on stable storage;
        raise if a flush that may have covered any of it failed.

        `since` is `epoch()` from before the caller's first write (default: this call, which
        still counts a flush running now: it may have picked up the caller's pages)."""
        with self._cond:
            target = self._started + 1  # the first flush to start after this call
            if since is None:
                since = self._done
            self._waiting += 1
            if self._gathering:
                self._arrived.notify()
            try:
                while self._done < target:
                    if self._running or self._gathering:
                        self._cond.wait()
                        continue
                    self._lead()
                if self._failed or self._dropped[1] is not None:
                    error = self._failure(since, target)
                    if error is not None:
                        raise error  # a flush that covered us failed: nothing is durable
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
            error = _injected_failure()
            if error is None:
                syncfs(self.fd)
        except OSError as exc:
            error = exc
        finally:
            self._lock.acquire()
            self._running = False
            self._done = gen
            if error is not None:
                self._record_failure(gen, error)
            self.flushes += 1
            self._cond.notify_all()

    def _record_failure(self, gen: int, error: OSError) -> None:
        self.failures += 1
        self._failed[gen] = error
        if len(self._failed) > _KEEP_FAILED:
            old = min(self._failed)
            self._dropped = (old, self._failed.pop(old))

    def _failure(self, since: int, target: int) -> OSError | None:
        """The error of a flush in generations (since, target], if one failed (lock held)."""
        dropped, dropped_error = self._dropped
        if since < dropped:
            return dropped_error  # its record is gone: assume the worst
        for gen, error in self._failed.items():
            if since < gen <= target:
                return error
        return None

    def close(self) -> None:
        os.close(self.fd)


_KEEP_FAILED = 256  # failed generations remembered per filesystem


class Syncers:
    """One GroupSync per filesystem (devices sharing one share its flushes: a syncfs
    covers the whole filesystem anyway), found by device path; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_path: dict[str, GroupSync] = {}
        self._by_dev: dict[int, GroupSync] = {}
        self.gather = 0.002

    def known(self, device_path: str) -> GroupSync | None:
        """The device's syncer if it was used before; None means `for_device` would stat
        and open it (blocking: the event loop sends that first use to the thread pool)."""
        return self._by_path.get(device_path)

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
    if os.environ.get(FAIL_ENV):
        set_failing_flushes(os.environ[FAIL_ENV])
    _delay[0] = float(os.environ.get(DELAY_ENV) or 0) / 1000
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


def known_syncers(device_paths: list[str]) -> list[GroupSync | None] | None:
    """`syncer` of each device without touching the disk; None while a device's first use
    (a stat and an open: blocking, so the event loop sends it to `syncers_of`) is to come."""
    if MODE != "batch":
        return [None] * len(device_paths)
    found = [SYNCERS.known(p) for p in device_paths]
    return None if None in found else found


async def syncers_of(device_paths: list[str]) -> list[GroupSync | None]:
    """`syncer` of each device, from the event loop: a first use runs in the thread pool."""
    found = known_syncers(device_paths)
    if found is None:
        found = await run_blocking(lambda: [syncer(p) for p in device_paths])
    return found


def committing(device_path: str) -> AbstractContextManager[None]:
    """Wrap a write's commit step (the hop that flushes): lets group commit wait for it."""
    if MODE == "batch":
        try:
            return SYNCERS.for_device(device_path).writing()
        except FileNotFoundError:
            pass  # no device: the write itself reports it
    return nullcontext()


def epoch(device_path: str) -> int | None:
    """`GroupSync.epoch` of the device's filesystem (None in file mode or without it): take
    it before a file's first write and pass it to `flush_file`."""
    if MODE == "batch":
        try:
            return SYNCERS.for_device(device_path).epoch()
        except FileNotFoundError:
            pass
    return None


def flush_file(device_path: str, fd: int, since: int | None = None) -> None:
    """Make a written (not yet published) file's data durable; `since` is `epoch()` from
    before its first write (a failed flush since then may have dropped its pages)."""
    if MODE == "batch":
        SYNCERS.for_device(device_path).sync(since)
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
