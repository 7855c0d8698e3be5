"""One object on disk: its files, how they are written durably, read back, and quarantined.

Layout: ``<device>/objects/<part>/<suffix>/<hash>/<timestamp>.data | .ts | .meta``, with
temp files in ``<device>/tmp/`` and quarantined hash dirs in
``<device>/quarantined/objects/``.

File format (every kind, see ``fileformat``): ``body || msgpack metadata || footer``.
A .data file carries the object body and Content-Type, Content-Length, ETag (MD5 hex of the
body), X-Timestamp, X-Object-Meta-*, Content-Encoding, Content-Disposition, X-Delete-At and
``name`` ("/a/c/o"). A .meta file (POST) has no body: X-Timestamp, X-Object-Meta-* and
optionally Content-Type, Content-Encoding, Content-Disposition, X-Delete-At, which replace the
.data's. A .ts (tombstone) has no body: X-Timestamp and name. The metadata trails the body so
a PUT can stream the body before its ETag is known; a reader finds it from the end of the file.
Files are self-contained, so replication copies them byte for byte.

Durable write: stream to ``tmp/obj-<pid>-<random>``, flush it, then under the partition journal
lock (shared) and a flock on the hash dir (always in that order): re-check the timestamp,
rename into the hash dir and append the suffix-digest delta to the journal (see ``digests``);
then, journal released, flush the hash dir (and the parent of every directory just created)
and remove the files the new one makes obsolete. "Flush" is per `durability.MODE`: a shared
syncfs that covers every concurrent writer (group commit, the default) or per-file fsyncs.
A reader only ever sees whole files, and stale temp files are removed by ``clean_tmp`` at
start-up.

The current files of an object (its ``state``, ``fileformat.state_of``): the newest .data or
.ts (a .ts wins a tie), plus the newest .meta when newer than a .data (or with no .data/.ts).
The hash dir carries its state as a hint (the xattr ``user.swiftlite.state``), set under the
flock before every rename into the dir, so a read opens the named files without listing the
dir; a hint that names a file not there, or a tombstone, sends the read to a listing, and the
auditor sets hints that lost track (``refresh_hint``). Nothing may add a file to a hash dir
except through ``renamed``; a file copied in by hand is read once the auditor has passed.

API used by the server and the replicator (blocking; call through the thread pool):
``DataWriter`` (PUT a body, or ``commit_raw`` a file copied from a peer), ``write_marker``
(.ts / .meta), ``open_object`` (GET/HEAD), ``read_chunk``, ``quarantine``,
``current_paths`` (the files a sync must send), ``read_file_metadata``, ``clean_tmp``.
Every file committed with X-Delete-At joins its device's expiring queue on the way
(``renamed``; see ``expiring``), whichever path wrote it.
For ``batch_commit``, which flushes many writes at once: ``DataWriter.claim``,
``write_whole``, ``close_flushed``, ``publish`` (a ``renamed`` block), ``committed``,
``discard``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from swiftlite.obj import bodysum, digests, direct_io, durability, expiring
from swiftlite.obj.fileformat import (  # noqa: F401 (re-exported: one import for users)
    EXTS,
    FOOTER,
    HINT_XATTR,
    MAGIC,
    MUTABLE,
    OBJECTS,
    POSTABLE,
    USER_META,
    CorruptFile,
    _listdir,
    _newest_stem,
    _split,
    current_files,
    hash_dir,
    is_expired,
    merge_metadata,
    obsolete,
    pack_trailer,
    parse_tail,
    read_fd_metadata,
    read_file_metadata,
    read_hint,
    state_of,
    write_hint,
)

TMP = "tmp"
QUARANTINE = os.path.join("quarantined", "objects")


class DeviceMissing(Exception):
    """The device dir does not exist (or is not mounted): 507."""


class Conflict(Exception):
    """Not newer than what is stored: 409 with the stored timestamp."""

    def __init__(self, stored: str) -> None:
        super().__init__(stored)
        self.stored = stored


class NotFound(Exception):
    """POST to an object that does not exist; ``tombstone`` is the .ts timestamp if any."""

    def __init__(self, tombstone: str | None = None) -> None:
        super().__init__(tombstone or "")
        self.tombstone = tombstone


class ETagMismatch(Exception):
    pass


class Exists(Exception):
    """PUT with If-None-Match: * and the object exists, or with an If-Match ETag the current
    object does not have: 412."""


class DeleteAtMismatch(Exception):
    """DELETE with X-If-Delete-At and the object's X-Delete-At differs (or it is deleted):
    412, nothing written."""


def is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


# ---- writing --------------------------------------------------------------------------------

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


IOV_MAX = 1024  # Linux's limit on buffers per writev


def _write_all(fd: int, chunks: list[bytes]) -> int:
    """Write every chunk, in order, with as few syscalls as possible and without joining
    them first (a join copied each 1 MiB body once per replica)."""
    # Empty chunks left out: writev of nothing returns 0, which would never end the loop.
    bufs = [memoryview(c) for c in chunks if c]
    total = sum(len(b) for b in bufs)
    while bufs:
        n = os.writev(fd, bufs[:IOV_MAX])
        while n and bufs:  # drop what was written; a partial write resumes mid-buffer
            if n >= len(bufs[0]):
                n -= len(bufs[0])
                bufs.pop(0)
            else:
                bufs[0] = bufs[0][n:]
                n = 0
    return total


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


def _commit(device_path: str, part: int | str, hexhash: str, tmp: str, filename: str,
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


def _open_tmp(device_path: str, extra_flags: int = 0) -> tuple[int, str]:
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


def _check_newer_than(ts: str, exts: tuple[str, ...] = ("data", "ts")):
    def check(hdir: str, names: list[str]) -> None:
        stored = _newest_stem(names, exts)
        if stored is not None and stored >= ts:
            raise Conflict(stored)
        return None
    return check


def _delete_at(metadata: dict[str, str] | None) -> int | None:
    v = (metadata or {}).get("X-Delete-At")
    return int(v) if v and v.isdigit() else None


def _current_metadata(hdir: str, names: list[str]) -> dict[str, str] | None:
    """Merged metadata of the current .data (+ .meta), or None when there is no .data."""
    main, meta = current_files(names)
    if not main or not main.endswith(".data"):
        return None
    try:
        md, _ = read_file_metadata(os.path.join(hdir, main))
        if meta:
            md = merge_metadata(md, read_file_metadata(os.path.join(hdir, meta))[0])
    except (OSError, CorruptFile):
        return None
    return md


def _etag_matches(hdir: str, names: list[str], etag: str, key: str) -> bool:
    """Whether the current .data's ETag (or its metadata `key`'s, when it has one) is
    `etag`."""
    md = _current_metadata(hdir, names)
    if md is None:
        return False
    have = (md.get(key.title()) or md.get(key) if key else None) or md.get("ETag", "")
    return have.strip('"').lower() == etag.strip('"').lower()


class DataWriter:
    """Streams one object file to tmp in batches (one thread hop per batch), then commits."""

    def __init__(self, device_path: str, part: int | str, hexhash: str,
                 fsync: bool = True, refuse_existing: bool = False,
                 direct: bool = False, if_match: tuple[str, str] | None = None) -> None:
        self.refuse_existing = refuse_existing  # If-None-Match: *
        # (ETag, metadata key holding it or ""): the current object must have that ETag,
        # judged under the object's lock at commit, so two racing writers cannot both pass.
        self.if_match = if_match
        # A streamed body (write) goes to disk with O_DIRECT (swiftlite/obj/direct_io.py).
        self.direct = direct
        self._stager: direct_io.Stager | None = None
        self.device_path = device_path
        self.part = part
        self.hexhash = hexhash
        self.fsync = fsync
        self.fd = -1
        self.tmp: str | None = None
        self.since: int | None = None  # durability.epoch() before the first write
        self.sums = bodysum.Summer()
        self.size = 0
        self.done = False  # committed
        # abort() may run while a write is still in a pool thread (the request was cancelled
        # mid-hop): it waits for that write, and no write starts after it.
        self._lock = threading.RLock()
        self._aborted = False

    def check_newer(self, ts: str) -> None:
        """Early refusal (no lock): a PUT not newer than the stored object is a 409."""
        names = _listdir(hash_dir(self.device_path, self.part, self.hexhash))
        if self.refuse_existing and (current_files(names)[0] or "").endswith(".data"):
            raise Exists()
        _check_newer_than(ts)("", names)

    def write(self, chunks: list[bytes], hash_body: bool = True) -> None:
        """Part of a streamed body (the rest comes with `put`)."""
        with self._lock:
            self._write(chunks, hash_body, self.direct)

    def _write(self, chunks: list[bytes], hash_body: bool, direct: bool = False) -> None:
        if self._aborted:
            raise OSError(errno.ECANCELED, "write aborted")
        if self.fd < 0 and self._start(direct):
            self._stager = direct_io.Stager(self.fd)
        if not chunks:
            return
        if hash_body:
            self.sums.feed(chunks)
        try:
            self.size += self._stager.write(chunks) if self._stager is not None \
                else _write_all(self.fd, chunks)
        except BaseException:
            self.abort()
            raise

    def _close_synced(self) -> None:
        if self.fsync:
            durability.flush_file(self.device_path, self.fd, self.since)
        os.close(self.fd)
        self.fd = -1

    def put(self, chunks: list[bytes], metadata: dict[str, str], timestamp: str,
            expected_etag: str | None = None,
            body_sums: bodysum.Summer | None = None) -> CommitResult:
        """The last hop of a PUT: rest of the body, ETag check, trailer, fsync, commit.

        A body that fits in this one hop skips the early (unlocked) staleness check: the
        locked check in the commit refuses a stale write all the same, and a small write
        costs less than the extra directory listing every PUT would pay. `body_sums` are the
        whole body's sums when the caller already computed them (one body, many devices).
        """
        with self._lock:
            res = self._put(chunks, metadata, timestamp, expected_etag, body_sums)
            self.done = True
            return res

    def _put(self, chunks: list[bytes], metadata: dict[str, str], timestamp: str,
             expected_etag: str | None, body_sums: bodysum.Summer | None) -> CommitResult:
        try:
            with durability.committing(self.device_path):
                self._write(chunks, body_sums is None)
                sums = body_sums or self.sums
                etag = sums.etag
                if expected_etag and expected_etag.strip('"').lower() != etag:
                    raise ETagMismatch(etag)
                metadata = dict(metadata, ETag=etag, **{bodysum.CHECK_KEY: sums.check})
                metadata["Content-Length"] = str(self.size)
                metadata["X-Timestamp"] = timestamp
                if self._stager is not None:
                    self._stager.write([pack_trailer(metadata)])
                    self._stager.finish()
                    self._stager = None
                else:
                    _write_all(self.fd, [pack_trailer(metadata)])
                self._close_synced()
                res = _commit(self.device_path, self.part, self.hexhash, self.tmp,
                              f"{timestamp}.data", self._locked_check(timestamp), self.fsync,
                              metadata)
            self.tmp = None
            res.metadata = metadata
            return res
        except BaseException:
            self.abort()
            raise

    def _locked_check(self, ts: str) -> Callable[[str, list[str]], None]:
        newer = _check_newer_than(ts)

        def check(hdir: str, names: list[str]) -> None:
            if self.refuse_existing and (current_files(names)[0] or "").endswith(".data"):
                raise Exists()
            if self.if_match is not None and not _etag_matches(hdir, names, *self.if_match):
                raise Exists()
            return newer(hdir, names)
        return check

    def commit_raw(self, filename: str,
                   metadata: dict[str, str] | None = None) -> CommitResult:
        """Commit a whole file copied from a peer (replication); refused unless newer.
        `metadata` is the file's trailer when the caller parsed it; otherwise a .data or
        .meta has it read back (for the expiring queue)."""
        with self._lock:
            return self._commit_raw(filename, metadata)

    def _commit_raw(self, filename: str, metadata: dict[str, str] | None) -> CommitResult:
        try:
            stem, ext = _split(filename)
            if ext not in EXTS or not stem[:1].isdigit():
                raise ValueError(f"bad object file name {filename!r}")
            exts = ("meta", "data", "ts") if ext == "meta" else ("data", "ts")
            with durability.committing(self.device_path):
                if self.fd < 0:
                    self._write([], False)
                self._close_synced()
                if metadata is None and ext != "ts":
                    try:
                        metadata = read_file_metadata(self.tmp)[0]  # type: ignore[arg-type]
                    except CorruptFile:
                        metadata = None
                res = _commit(self.device_path, self.part, self.hexhash, self.tmp, filename,
                              _check_newer_than(stem, exts), self.fsync, metadata)
            self.tmp = None
            self.done = True
            return res
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            self._abort()

    # ---- batch commit (batch_commit): it flushes, and holds claim() across these steps ----

    def claim(self) -> AbstractContextManager[Any]:
        """Hold the writer for a batch: an abort() from the server waits until it is done."""
        return self._lock

    def write_whole(self, chunks: list[bytes], size: int) -> None:
        """Write the whole file (a body of `size` bytes the caller hashed, and its trailer)."""
        self._write(chunks, False)
        self.size = size

    def write_image(self, image: memoryview, length: int, size: int) -> None:
        """Write the whole file (a body of `size` bytes the caller hashed, and its trailer)
        from `direct_io.aligned_image`'s bytes, cut to `length`: with O_DIRECT, or buffered
        where the filesystem has no direct I/O."""
        with self._lock:
            if self._aborted:
                raise OSError(errno.ECANCELED, "write aborted")
            try:
                if self._start(True):
                    direct_io.write_image(self.fd, image, length)
                else:
                    _write_all(self.fd, [image[:length]])
            except BaseException:
                self.abort()
                raise
            self.size = size

    def _start(self, direct: bool) -> bool:
        """Open the temp file, with O_DIRECT if `direct` and the filesystem has it; True
        if it has."""
        self.since = durability.epoch(self.device_path)
        opened = direct_io.open_direct(
            self.device_path, lambda flags: _open_tmp(self.device_path, flags)) \
            if direct else None
        self.fd, self.tmp = opened or _open_tmp(self.device_path)
        return opened is not None

    def close_flushed(self) -> None:
        """Close the temp file once the caller's flush made its data durable."""
        os.close(self.fd)
        self.fd = -1

    def publish(self, timestamp: str,
                metadata: dict[str, str] | None = None) -> AbstractContextManager[Renamed]:
        """`renamed` for this writer's flushed file (its trailer `metadata`) as
        `<timestamp>.data`, with the same checks as `put`; pass the finished result to
        `committed`."""
        assert self.tmp is not None
        return renamed(self.device_path, self.part, self.hexhash, self.tmp,
                       f"{timestamp}.data", self._locked_check(timestamp), metadata,
                       self.fsync)

    def committed(self, result: CommitResult, metadata: dict[str, str]) -> CommitResult:
        self.tmp = None
        self.done = True
        result.metadata = metadata
        return result

    def discard(self) -> None:
        """Remove the temp file (a refused or failed batch write); the caller holds claim()."""
        self._abort()

    def _abort(self) -> None:
        if self._stager is not None:
            self._stager.close()
            self._stager = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.tmp:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            self.tmp = None


def _carry_forward(metadata: dict[str, str], current: dict[str, str]) -> None:
    """A new .meta replaces the last one: it keeps the current mutable sysmeta it does not
    change, and a patch (a POST of mutable sysmeta) keeps the user metadata and postable
    headers too (common/sysmeta.py MUTABLE_SYSMETA)."""
    patch = any(k.lower().startswith(MUTABLE) for k in metadata)
    have = {k.lower() for k in metadata}
    for k, v in current.items():
        lk = k.lower()
        if lk in have:
            continue
        if lk.startswith(MUTABLE) or (patch and (lk.startswith(USER_META) or lk in POSTABLE)):
            metadata[k] = v


def write_marker(device_path: str, part: int | str, hexhash: str, timestamp: str, ext: str,
                 metadata: dict[str, str], fsync: bool = True,
                 open_expired: bool = False, if_delete_at: int | None = None) -> CommitResult:
    """Write a .ts (DELETE) or .meta (POST) durably; one thread hop.

    .ts: Conflict unless newer than the newest .data/.ts; always written otherwise.
    With `if_delete_at` (the expirer's X-If-Delete-At, as Swift's), checked under the hash
    dir lock: NotFound when the object has no .data/.ts at all, Conflict when it is not
    older, DeleteAtMismatch unless its current X-Delete-At (.data + .meta) is that time.
    .meta: NotFound without a live .data, Conflict unless newer than the .data and .meta.
    ``CommitResult.existed`` says whether a live object was current before.
    """
    hdir = hash_dir(device_path, part, hexhash)
    if ext == "ts":
        base = _check_newer_than(timestamp)

        def check(d: str, names: list[str]) -> dict[str, str] | None:
            if if_delete_at is not None and current_files(names)[0] is None:
                raise NotFound(None)
            base(d, names)
            current = _current_metadata(d, names)
            if if_delete_at is not None and _delete_at(current) != if_delete_at:
                raise DeleteAtMismatch()
            return current
    else:
        def check(d: str, names: list[str]) -> dict[str, str] | None:
            main, _ = current_files(names)
            if not main or main.endswith(".ts"):
                raise NotFound(_split(main)[0] if main else None)
            current = _current_metadata(d, names)
            # open_expired: a POST may revive an object past its X-Delete-At (not yet reaped).
            if current is None or (is_expired(current) and not open_expired):
                raise NotFound(None)
            _check_newer_than(timestamp, ("data", "ts", "meta"))(d, names)
            return current
    # Early refusal without writing anything (the locked check in _commit is the real one).
    names = _listdir(hdir)
    if not names and not os.path.isdir(device_path):
        raise DeviceMissing(device_path)
    current = check(hdir, names)
    metadata = dict(metadata, **{"X-Timestamp": timestamp})
    if ext == "meta" and "Content-Type" not in metadata and current is not None and \
            "Content-Type" in current:
        # A POST without Content-Type keeps the one an earlier POST set (as Swift does):
        # only the newest .meta is kept, so it carries the type forward.
        metadata["Content-Type"] = current["Content-Type"]
    if ext == "meta" and current is not None:
        _carry_forward(metadata, current)
    since = durability.epoch(device_path)
    fd, tmp = _open_tmp(device_path)
    try:
        with durability.committing(device_path):
            _write_all(fd, [pack_trailer(metadata)])
            if fsync:
                durability.flush_file(device_path, fd, since)
            os.close(fd)
            fd = -1
            return _commit(device_path, part, hexhash, tmp, f"{timestamp}.{ext}", check,
                           fsync, metadata)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ---- reading --------------------------------------------------------------------------------

FIRST_READ = 64 * 1024  # what a whole-body read asks for before it knows the file's size


@dataclass
class ObjectInfo:
    """What GET/HEAD needs: found (and live), tombstoned, or absent."""

    status: str  # "ok" | "deleted" | "missing"
    timestamp: str | None = None  # data or tombstone timestamp
    meta_timestamp: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    body_len: int = 0
    fd: int = -1  # open on the .data when the body was not read whole
    body: bytes | None = None  # the whole body, when small enough to read in the same hop
    etag_ok: bool | None = None  # `body` checked against its sums (None: not checked)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_object(device_path: str, part: int | str, hexhash: str, read_whole: int = 0,
                verify: bool = False, hinted: bool = True) -> ObjectInfo:
    """Find the current files (by the hash dir's hint when it has one, else by listing it),
    read metadata; read the body too when <= `read_whole` bytes.

    A file with a corrupt trailer is quarantined and reported missing. `verify` checks a body
    read whole (for a full GET) against its sums (bodysum), so the caller can quarantine it.
    """
    hdir = hash_dir(device_path, part, hexhash)
    names = read_hint(hdir) if hinted else None
    if names is None or not names[0].endswith(".data"):  # a tombstone is read the long way
        hinted = False
        try:
            names = os.listdir(hdir)
        except (FileNotFoundError, NotADirectoryError):
            if not os.path.isdir(device_path):
                raise DeviceMissing(device_path) from None
            return ObjectInfo("missing")
    main, meta = current_files(names)
    if main is None:
        return ObjectInfo("missing")
    stem = _split(main)[0]
    if main.endswith(".ts"):
        return ObjectInfo("deleted", timestamp=stem)
    try:
        fd = os.open(os.path.join(hdir, main), os.O_RDONLY)
    except FileNotFoundError:  # replaced under us (or a hint ahead of its file): list it
        return open_object(device_path, part, hexhash, read_whole, verify, False)
    info = ObjectInfo("ok", timestamp=stem)
    try:
        # A small file is read whole without asking its size first: a read that comes back
        # short has reached the end. One syscall less, and in a proxy's pool thread each
        # syscall is one more wait to take the GIL back from a busy event loop.
        guess = min(read_whole + FOOTER.size, FIRST_READ) if read_whole else 0
        first = os.pread(fd, guess, 0) if guess else b""
        size = len(first) if len(first) < guess else os.fstat(fd).st_size
        if size - FOOTER.size <= read_whole:
            # A bigger one is read again from the start: cheaper than joining two pieces.
            whole = first if len(first) == size else os.pread(fd, size, 0)
            res = parse_tail(whole, size)
            if not isinstance(res, tuple):
                raise CorruptFile("short file")
            md, body_len = res
            info.body = whole[:body_len] if body_len < len(whole) else whole
            if verify:
                info.etag_ok = bodysum.body_ok(info.body, md)
        else:
            md, body_len = read_fd_metadata(fd, size)
            info.fd, fd = fd, -1
        if meta:
            try:
                md = merge_metadata(md, read_file_metadata(os.path.join(hdir, meta))[0])
                info.meta_timestamp = _split(meta)[0]
            except FileNotFoundError:
                if hinted:  # superseded since the hint was read: list the dir
                    info.close()
                    return open_object(device_path, part, hexhash, read_whole, verify, False)
    except CorruptFile:
        if fd >= 0:
            os.close(fd)
            fd = -1
        info.close()
        quarantine(device_path, part, hexhash)
        return ObjectInfo("missing")
    finally:
        if fd >= 0:
            os.close(fd)
    info.metadata = md
    info.body_len = body_len
    return info


def read_chunk(fd: int, offset: int, length: int, verifier: Any = None) -> bytes:
    """One hop of a streamed GET; feeds `verifier` the bytes read when given."""
    data = os.pread(fd, length, offset)
    if verifier is not None:
        verifier.update(data)
    return data


def current_paths(device_path: str, part: int | str, hexhash: str) -> list[str]:
    """Full paths of the object's current files (what a sync sends to a peer)."""
    hdir = hash_dir(device_path, part, hexhash)
    return [os.path.join(hdir, n) for n in current_files(_listdir(hdir)) if n]


def refresh_hint(device_path: str, part: int | str, hexhash: str) -> bool:
    """Set the hash dir's hint to its current files if it says otherwise (a dir written
    before hints, a crash between a hint and its rename, a file copied in by hand); True if
    it was set."""
    with locked_hash_dir(device_path, part, hexhash) as held:
        if held is None:
            return False
        state = state_of(held.names)
        if not state or read_hint(held.path) == state.split("|"):
            return False
        write_hint(held.fd, state)
        return True


def quarantine(device_path: str, part: int | str, hexhash: str) -> bool:
    """Move the object's hash dir under quarantined/objects/ and update its suffix digest."""
    hdir = hash_dir(device_path, part, hexhash)
    if not os.path.isdir(hdir):
        return False
    with locked_hash_dir(device_path, part, hexhash) as held:
        if held is None:
            return False
        old = state_of(held.names)
        qdir = os.path.join(device_path, QUARANTINE)
        os.makedirs(qdir, exist_ok=True)
        os.rename(hdir, os.path.join(qdir, f"{hexhash}-{os.urandom(4).hex()}"))
        assert held.journal is not None
        held.journal.record(hexhash[-3:], hexhash, old, "")
        return True


def clean_tmp(device_path: str, max_age: float = 3600.0) -> int:
    """Remove temp files left by dead processes (and anything older than `max_age`)."""
    tdir = os.path.join(device_path, TMP)
    removed = 0
    now = time.time()
    for name in _listdir(tdir):
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
