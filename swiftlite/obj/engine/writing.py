"""Writing an object's files: a PUT's streamed .data, a peer's copied file, a .ts or .meta.

File format (every kind, see ``fileformat``): ``body || msgpack metadata || footer``.
A .data file carries the object body and Content-Type, Content-Length, ETag (MD5 hex of the
body), X-Timestamp, X-Object-Meta-*, Content-Encoding, Content-Disposition, X-Delete-At and
``name`` ("/a/c/o"). A .meta file (POST) has no body: X-Timestamp, X-Object-Meta-* and
optionally Content-Type, Content-Encoding, Content-Disposition, X-Delete-At, which replace the
.data's. A .ts (tombstone) has no body: X-Timestamp and name. The metadata trails the body so
a PUT can stream the body before its ETag is known; a reader finds it from the end of the file.
Files are self-contained, so replication copies them byte for byte.

What is written here is committed through ``hashdir`` (temp file, locks, rename, flush);
this module decides what goes in the file and which checks refuse it.

API used by the server and the replicator (blocking; call through the thread pool):
``DataWriter`` (PUT a body, or ``commit_raw`` a file copied from a peer), ``write_marker``
(.ts / .meta).
For ``batch_commit``, which flushes many writes at once: ``DataWriter.claim``,
``write_whole``, ``close_flushed``, ``publish`` (a ``hashdir.renamed`` block), ``committed``,
``discard``.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from swiftlite.obj.engine import bodysum, direct_io, durability, pending_marks
from swiftlite.obj.engine.fileformat import (
    EXTS,
    MUTABLE,
    POSTABLE,
    USER_META,
    CorruptFile,
    current_files,
    hash_dir,
    is_expired,
    listdir,
    merge_metadata,
    pack_trailer,
    read_file_metadata,
    split_name,
)
from swiftlite.obj.engine.hashdir import (
    CommitResult,
    DeviceMissing,
    Renamed,
    check_newer_than,
    commit,
    open_tmp,
    renamed,
)


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
                 direct: bool = False, if_match: tuple[str, str] | None = None,
                 ext: str = "data") -> None:
        # "pend": an EC fragment archive's first phase (obj/engine/ec_archive.py), not current
        # until made durable, and kept out of the expiring queue until then.
        self.ext = ext
        self.refuse_existing = refuse_existing  # If-None-Match: *
        # (ETag, metadata key holding it or ""): the current object must have that ETag,
        # judged under the object's lock at commit, so two racing writers cannot both pass.
        self.if_match = if_match
        # A streamed body (write) goes to disk with O_DIRECT (swiftlite/obj/engine/direct_io.py).
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
        names = listdir(hash_dir(self.device_path, self.part, self.hexhash))
        if self.refuse_existing and (current_files(names)[0] or "").endswith(".data"):
            raise Exists()
        check_newer_than(ts)("", names)

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
                if sums.refuses(expected_etag):
                    raise ETagMismatch(sums.etag)
                metadata = sums.stamp(metadata)
                metadata["Content-Length"] = str(self.size)
                metadata["X-Timestamp"] = timestamp
                if self._stager is not None:
                    self._stager.write([pack_trailer(metadata)])
                    self._stager.finish()
                    self._stager = None
                else:
                    _write_all(self.fd, [pack_trailer(metadata)])
                self._close_synced()
                self._mark_pending(timestamp)
                res = commit(self.device_path, self.part, self.hexhash, self.tmp,
                             f"{timestamp}.{self.ext}", self._locked_check(timestamp),
                             self.fsync, metadata if self.ext == "data" else None)
            self.tmp = None
            res.metadata = metadata
            return res
        except BaseException:
            self.abort()
            raise

    def _locked_check(self, ts: str) -> Callable[[str, list[str]], None]:
        newer = check_newer_than(ts)

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
            stem, ext = split_name(filename)
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
                res = commit(self.device_path, self.part, self.hexhash, self.tmp, filename,
                             check_newer_than(stem, exts), self.fsync, metadata)
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
            self.device_path, lambda flags: open_tmp(self.device_path, flags)) \
            if direct else None
        self.fd, self.tmp = opened or open_tmp(self.device_path)
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
        self._mark_pending(timestamp)
        return renamed(self.device_path, self.part, self.hexhash, self.tmp,
                       f"{timestamp}.{self.ext}", self._locked_check(timestamp),
                       metadata if self.ext == "data" else None, self.fsync)

    def _mark_pending(self, timestamp: str) -> None:
        # Before the rename, under the same flush: a durable .pend has a durable mark.
        if self.ext == pending_marks.PENDING:
            pending_marks.note(self.device_path, self.part, self.hexhash, timestamp)

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
                 open_expired: bool = False, if_delete_at: int | None = None,
                 if_present: bool = False) -> CommitResult:
    """Write a .ts (DELETE) or .meta (POST) durably; one thread hop.

    .ts: Conflict unless newer than the newest .data/.ts; always written otherwise.
    With `if_delete_at` (the expirer's X-If-Delete-At, as Swift's), checked under the hash
    dir lock: NotFound when the object has no .data/.ts at all, Conflict when it is not
    older, DeleteAtMismatch unless its current X-Delete-At (.data + .meta) is that time.
    .meta: NotFound without a live .data, Conflict unless newer than the .data and .meta.
    ``CommitResult.existed`` says whether a live object was current before.
    With `if_present` (a .ts only): NotFound, nothing written, unless a .data is current (the
    proxy clearing an older copy from an EC policy's other tier: most often there is none).
    """
    hdir = hash_dir(device_path, part, hexhash)
    if ext == "ts":
        base = check_newer_than(timestamp)

        def check(d: str, names: list[str]) -> dict[str, str] | None:
            if if_delete_at is not None and current_files(names)[0] is None:
                raise NotFound(None)
            if if_present and not (current_files(names)[0] or "").endswith(".data"):
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
                raise NotFound(split_name(main)[0] if main else None)
            current = _current_metadata(d, names)
            # open_expired: a POST may revive an object past its X-Delete-At (not yet reaped).
            if current is None or (is_expired(current) and not open_expired):
                raise NotFound(None)
            check_newer_than(timestamp, ("data", "ts", "meta"))(d, names)
            return current
    # Early refusal without writing anything (the locked check in commit is the real one).
    names = listdir(hdir)
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
    fd, tmp = open_tmp(device_path)
    try:
        with durability.committing(device_path):
            _write_all(fd, [pack_trailer(metadata)])
            if fsync:
                durability.flush_file(device_path, fd, since)
            os.close(fd)
            fd = -1
            return commit(device_path, part, hexhash, tmp, f"{timestamp}.{ext}", check,
                          fsync, metadata)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
