"""How a file enters an object's hash dir: the locks, the rename, the journal, the flush.

Layout: ``<device>/objects/<part>/<suffix>/<hash>/<timestamp>.data | .ts | .meta``, with
temp files in ``<device>/tmp/`` and quarantined hash dirs in
``<device>/quarantined/objects/``.

Durable write: stream to ``tmp/obj-<pid>-<random>`` (``open_tmp``), flush it, then under the
partition journal lock (shared) and a flock on the hash dir (always in that order): re-check
the timestamp, rename into the hash dir and append the suffix-digest delta to the journal
(see ``digests``); then, journal released, flush the hash dir (and the parent of every
directory just created) and remove the files the new one makes obsolete. "Flush" is per
`durability.MODE`: a shared syncfs that covers every concurrent writer (group commit, the
default) or per-file fsyncs. A reader only ever sees whole files, and stale temp files are
removed by ``clean_tmp`` at start-up.

The hash dir carries its state as a hint (the xattr ``user.swiftlite.state``, see
``fileformat.HINT_XATTR``), set under the flock before every rename into the dir. Nothing
may add a file to a hash dir except through ``renamed``; a file copied in by hand is read
once the auditor has passed. Every file committed with X-Delete-At joins its device's
expiring queue on the way (``renamed``; see ``expiring``), whichever path wrote it.

Why a module of its own: the writers (``writer``), the readers' repairs (``reader``), the
replicator (``sync``) and ``batch_commit`` all lock hash dirs and commit into them the same
way, so the lock order and the commit steps live in one place. Blocking; call through the
thread pool.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from swiftlite.obj.engine import digests, durability, expiring
from swiftlite.obj.engine.fileformat import (
    _newest_stem,
    hash_dir,
    is_expired,
    listdir,
    obsolete,
    state_of,
    write_hint,
)

TMP = "tmp"


class DeviceMissing(Exception):
    """The device dir does not exist (or is not mounted): 507."""


class Conflict(Exception):
    """Not newer than what is stored: 409 with the stored timestamp."""

    def __init__(self, stored: str) -> None:
        super().__init__(stored)
        self.stored = stored


def is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


# ---- committing -----------------------------------------------------------------------------

def _makedirs(path: str) -> list[str]:
    """Create `path` and missing parents; returns the dirs created, outermost first.

    Tries the mkdir first, then the parent's: a new object's hash dir usually has its suffix
    dir already, and otherwise its partition dir, so that is one or three syscalls (each a
    GIL round trip in the committer) instead of a stat of every level."""
    try:
        os.mkdir(path)
        return [path]
    except FileExistsError:
        return []
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent == path:
            raise
    created = _makedirs(parent)
    try:
        os.mkdir(path)
        created.append(path)
    except FileExistsError:
        pass
    except FileNotFoundError:  # a parent emptied and removed meanwhile: start over
        return created + _makedirs(path)
    return created


@dataclass
class LockedHashDir:
    """A hash dir held by `locked_hash_dir`: its path, locked fd and entries at lock time."""
    path: str
    fd: int
    names: list[str]
    journal: digests.Journal | None

    def release_journal(self) -> None:
        """Let folds and rehashes in while the hash dir stays locked (e.g. during fsyncs)."""
        if self.journal is not None:
            self.journal.__exit__(None, None, None)
            self.journal = None


@contextmanager
def locked_hash_dir(device_path: str, part: int | str,
                    hexhash: str) -> Iterator[LockedHashDir | None]:
    """Lock an object's hash dir the way every writer does, or yield None if it is gone.

    Order: the partition journal (shared), then a flock on the hash dir. A dir renamed away
    (quarantined, removed) while we waited for the flock yields None: the caller gives up
    or starts again. Both locks are released on exit; the hash dir first.
    """
    hdir = hash_dir(device_path, part, hexhash)
    held = LockedHashDir(hdir, -1, [], digests.journal(device_path, part).__enter__())
    try:
        try:
            held.fd = os.open(hdir, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(held.fd, fcntl.LOCK_EX)
            same = os.stat(hdir).st_ino == os.fstat(held.fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            yield None
            return
        held.names = os.listdir(hdir)
        yield held
    finally:
        if held.fd >= 0:
            os.close(held.fd)
        held.release_journal()


@dataclass
class CommitResult:
    old_state: str
    new_state: str
    journal_size: int
    metadata: dict[str, str] = field(default_factory=dict)  # merged, before the write
    existed: bool = False  # a live (unexpired) .data was current before the write


@dataclass
class Renamed:
    """A file renamed into its hash dir, its digest delta journaled, not yet flushed; the
    hash dir stays locked until the `renamed` block exits."""
    held: LockedHashDir
    names: list[str]
    created: list[str]  # directories made for it, outermost first
    result: CommitResult

    def finish(self) -> CommitResult:
        """Once the rename is durable: remove the files the new one makes obsolete."""
        for n in obsolete(self.names):
            try:
                os.unlink(os.path.join(self.held.path, n))
            except FileNotFoundError:
                pass
        return self.result


@contextmanager
def renamed(device_path: str, part: int | str, hexhash: str, tmp: str, filename: str,
            check: Callable[[str, list[str]], dict[str, str] | None],
            metadata: dict[str, str] | None = None,
            fsync: bool = True) -> Iterator[Renamed]:
    """Move `tmp` (already flushed) into the hash dir as `filename` and journal its digest
    delta; the block that follows flushes it, then calls `finish()`. Leaving the block
    without finish() (a failed flush) keeps the older files.

    `check(hash_dir, names)` raises Conflict/NotFound to refuse; it may return the current
    merged metadata. Locks: the partition journal (shared), then the hash dir (flock), the
    order every writer uses. The journal is released before the block, so a fold or rehash
    never waits on a disk flush; the hash dir stays locked until the block exits.

    `metadata` is the new file's own: every object file committed on a device passes here,
    so this is where one carrying X-Delete-At joins the device's expiring queue
    (`expiring.note`, before the block's flush, which covers it in batch mode; in file mode
    with `fsync` the record is fsynced). Without X-Delete-At that is one dict lookup.
    """
    hdir = hash_dir(device_path, part, hexhash)
    while True:
        created = _makedirs(hdir)
        with locked_hash_dir(device_path, part, hexhash) as held:
            if held is None:  # quarantined or removed while we waited: start again
                continue
            names = held.names
            old = state_of(names)
            current = check(hdir, names)
            names.append(filename)
            new = state_of(names)  # obsolete files do not count, removed or not
            write_hint(held.fd, new)  # before the rename: see fileformat.HINT_XATTR
            os.rename(tmp, os.path.join(hdir, filename))
            assert held.journal is not None
            held.journal.record(hexhash[-3:], hexhash, old, new)
            journal_size = held.journal.size
            held.release_journal()
            if metadata is not None and "X-Delete-At" in metadata:
                expiring.note(device_path, part, hexhash, metadata, current,
                              fsync and durability.MODE != "batch")
            existed = current is not None and not is_expired(current)
            yield Renamed(held, names, created,
                          CommitResult(old, new, journal_size, current or {}, existed))
            return


def commit(device_path: str, part: int | str, hexhash: str, tmp: str, filename: str,
           check: Callable[[str, list[str]], dict[str, str] | None],
           fsync: bool = True, metadata: dict[str, str] | None = None) -> CommitResult:
    """Move `tmp` (already flushed) into the hash dir as `filename`, atomically and durably
    (`renamed`, then flush the hash dir; older files are removed only after that)."""
    with renamed(device_path, part, hexhash, tmp, filename, check, metadata, fsync) as r:
        if fsync:
            durability.flush_dirs(device_path, r.held.fd,
                                  [os.path.dirname(d) for d in r.created])
        return r.finish()


_tmp_names = [0, "", 0]  # pid, random prefix, counter: unique without a syscall per file


def _reset_tmp_names() -> None:
    _tmp_names[:] = [os.getpid(), os.urandom(4).hex(), 0]


_reset_tmp_names()
os.register_at_fork(after_in_child=_reset_tmp_names)


def _tmp_path(device_path: str) -> str:
    t = _tmp_names
    t[2] += 1  # under the GIL; O_EXCL catches the impossible repeat
    return os.path.join(device_path, TMP, f"obj-{t[0]}-{t[1]}{t[2]:08x}")


# Fault injection (tests only): SWIFTLITE_FULL_DEVICES="d2" (comma-separated device names)
# makes this process's object writes to those devices fail with ENOSPC, as a full disk's
# do (the server answers 507). Read once at import; unset, it costs one falsy check.
FULL_ENV = "SWIFTLITE_FULL_DEVICES"
_full_devices = frozenset(filter(None, os.environ.get(FULL_ENV, "").split(",")))


def open_tmp(device_path: str, extra_flags: int = 0) -> tuple[int, str]:
    if _full_devices and os.path.basename(device_path) in _full_devices:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected: {FULL_ENV})")
    path = _tmp_path(device_path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | extra_flags
    try:
        return os.open(path, flags, 0o644), path
    except FileNotFoundError:
        if not os.path.isdir(device_path):
            raise DeviceMissing(device_path) from None
        os.makedirs(os.path.join(device_path, TMP), exist_ok=True)
        return os.open(path, flags, 0o644), path


def check_newer_than(ts: str, exts: tuple[str, ...] = ("data", "ts")):
    def check(hdir: str, names: list[str]) -> None:
        stored = _newest_stem(names, exts)
        if stored is not None and stored >= ts:
            raise Conflict(stored)
        return None
    return check


def clean_tmp(device_path: str, max_age: float = 3600.0) -> int:
    """Remove temp files left by dead processes (and anything older than `max_age`)."""
    tdir = os.path.join(device_path, TMP)
    removed = 0
    now = time.time()
    for name in listdir(tdir):
        path = os.path.join(tdir, name)
        stale = False
        if name.startswith("obj-"):
            try:
                pid = int(name.split("-")[1])
                stale = pid == os.getpid() or not _pid_alive(pid)
            except (ValueError, IndexError):
                stale = True
        if not stale:
            try:
                stale = now - os.stat(path).st_mtime > max_age
            except FileNotFoundError:
                continue
        if stale:
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
