"""Fragment archives of erasure-coded policies on an object server: the two-phase write.

Backend protocol (the proxy's side is swiftlite/proxy/ec_put.py):

1. ``PUT`` of an EC policy's object (``X-Backend-Storage-Policy-Index`` names one): the body
   is the fragment archive followed by a footer, ``msgpack(map) || struct("<I4s")(length,
   b"ECF1")``. The footer carries the archive's `ArchiveInfo` (``X-Object-Sysmeta-Ec-*``):
   only the proxy knows the object's ETag and length once the whole body has passed, so
   they come after it (as Swift's MIME footers do). The proxy's footer names the archive's
   fast check (xxh3-64, ``X-Object-Sysmeta-Ec-Archive-Check``) where an ArchiveInfo has its
   MD5: the server computes the MD5 of what it stores anyway and records that (one with the
   MD5 itself, as the reconstructor and older proxies send, is taken too). The server checks
   the archive (its check or MD5, and its length; a mismatch is a 422 / 400) and commits it,
   fsynced, as ``<timestamp>.pend``: durable but not current. `fileformat.current_files`
   knows only .data/.ts/.meta, so a .pend changes neither what a read sees nor the suffix
   digests; nothing is sent to the container servers yet.
2. ``POST`` with ``X-Backend-Ec-Commit: yes`` and the PUT's ``X-Timestamp``, sent by the
   proxy only once a quorum of PUTs succeeded: `make_durable` renames ``<ts>.pend`` to
   ``<ts>.data`` (through `hashdir.renamed`, so the state hint, journal and expiring queue
   are kept as for any write), flushes the hash dir, and the server then sends the container
   update, with the object's size and ETag (not the archive's), when the commit names a
   container replica (the proxy names one in only some commits: `ec_put.update_senders`).
   Repeating it is harmless.

A kill -9 at any point leaves either a .pend (never read as the object) or a whole .data; a
rename is atomic. A kill of the proxy during phase 2 may leave some archives of a version
durable and others pending: a durable one proves that k + 1 were stored (phase 2 starts only
then), so a reader that finds one but fewer than k asks the other nodes for their pending
archive of that timestamp (GET/HEAD with ``X-Backend-Ec-Pending: <timestamp>``,
`open_pending`), as Swift reads non-durable fragments.

A .pend older than the current .data/.ts is removed by the next commit in its hash dir; one
whose commit never came stays (never read); the reconstructor makes it durable when the
other primaries hold that version durably, and removes it `reclaim_age` after its write if
it is still pending then (found by its mark, obj/engine/pending_marks.py: no listing).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping

import msgpack

from swiftlite.common.ec.meta import (
    EC_ARCHIVE_CHECK,
    EC_ARCHIVE_ETAG,
    FOOTER_KEYS,
    KEYS,
    ArchiveInfo,
)
from swiftlite.common.hashing import FAST_CHECK_PREFIX
from swiftlite.obj.engine import bodysum, durability, pending_marks
from swiftlite.obj.engine.fileformat import (
    CorruptFile,
    current_files,
    hash_dir,
    listdir,
    read_fd_metadata,
    read_file_metadata,
    split_name,
)
from swiftlite.obj.engine.hashdir import CommitResult, Conflict, renamed
from swiftlite.obj.engine.reading import ObjectInfo

PENDING = pending_marks.PENDING  # the extension of an archive not yet durable
COMMIT_HEADER = "X-Backend-Ec-Commit"
PENDING_HEADER = "X-Backend-Ec-Pending"  # a GET/HEAD of the pending archive of this timestamp
FOOTER = struct.Struct("<I4s")
FOOTER_MAGIC = b"ECF1"
MAX_FOOTER = 4096  # a footer holds six short strings; anything longer is not one


class BadFooter(ValueError):
    """A PUT body whose footer is missing or malformed, or whose archive has the wrong
    length (400)."""


class PendingMissing(Exception):
    """A commit for an archive this device does not hold (404)."""


def pack_footer(info: ArchiveInfo | Mapping[str, str]) -> bytes:
    """A PUT body's footer: an ArchiveInfo's metadata, or `Encoder.footer_metadata` (the
    archive's fast check in place of its MD5)."""
    md = info.to_metadata() if isinstance(info, ArchiveInfo) else dict(info)
    raw = msgpack.packb(md, use_bin_type=True)
    return raw + FOOTER.pack(len(raw), FOOTER_MAGIC)


class FooterSplitter:
    """Splits a PUT body into the archive (streamed on) and its footer (the last bytes):
    each chunk's bytes are released once at least MAX_FOOTER bytes follow them."""

    def __init__(self) -> None:
        self._held: list[bytes] = []
        self._held_len = 0
        self.archive_bytes = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """The bytes that are surely archive, now."""
        self._held.append(chunk)
        self._held_len += len(chunk)
        out: list[bytes] = []
        while self._held and self._held_len - len(self._held[0]) >= MAX_FOOTER:
            first = self._held.pop(0)
            self._held_len -= len(first)
            out.append(first)
        self.archive_bytes += sum(len(b) for b in out)
        return out

    def finish(self) -> tuple[list[bytes], dict[str, str], str]:
        """The archive's last bytes, the EC sysmeta to store with it and what its bytes
        must match (its MD5, or its fast check: then its MD5 is the one the writer computes,
        `bodysum.OWN_MD5`). BadFooter if there is no footer, or the archive's length is not
        the one it describes."""
        tail = b"".join(self._held)
        self._held = []
        if len(tail) < FOOTER.size:
            raise BadFooter("body too short for an EC footer")
        length, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER.size)
        if magic != FOOTER_MAGIC or length + FOOTER.size > min(len(tail), MAX_FOOTER):
            raise BadFooter("no EC footer at the end of the body")
        start = len(tail) - FOOTER.size - length
        try:
            raw = msgpack.unpackb(tail[start:len(tail) - FOOTER.size], raw=False)
            if not isinstance(raw, dict) or set(raw) not in (set(KEYS), set(FOOTER_KEYS)):
                raise BadFooter(f"an EC footer holds exactly {', '.join(FOOTER_KEYS)}")
            check = raw.pop(EC_ARCHIVE_CHECK, None)
            if check is not None:
                if not (isinstance(check, str) and check.startswith(FAST_CHECK_PREFIX)
                        and len(check) == len(FAST_CHECK_PREFIX) + 16):
                    raise BadFooter(f"bad {EC_ARCHIVE_CHECK}: {check!r}")
                raw[EC_ARCHIVE_ETAG] = "0" * 32  # checked whole below, then replaced
            info = ArchiveInfo.from_metadata(raw)
        except (ValueError, msgpack.UnpackException) as exc:
            raise BadFooter(f"bad EC footer: {exc}") from None
        rest = tail[:start]
        self.archive_bytes += len(rest)
        if self.archive_bytes != info.layout.archive_length:
            raise BadFooter(f"archive of {self.archive_bytes} bytes, not the "
                            f"{info.layout.archive_length} its footer says")
        md = info.to_metadata()
        if check is None:
            return [rest] if rest else [], md, info.archive_etag
        md[EC_ARCHIVE_ETAG] = bodysum.OWN_MD5
        return [rest] if rest else [], md, check


def listing_size_etag(metadata: dict[str, str]) -> tuple[str, str]:
    """The size and ETag a container listing shows for an object file's metadata: the
    object's, which for a fragment archive are in its EC sysmeta, not its own."""
    lower = {k.lower(): v for k, v in metadata.items()}
    size = lower.get("x-object-sysmeta-ec-content-length")
    etag = lower.get("x-object-sysmeta-ec-etag")
    if size is not None and etag is not None:
        return size, etag
    return metadata.get("Content-Length", "0"), metadata.get("ETag", "")


def make_durable(device_path: str, part: int | str, hexhash: str, timestamp: str,
                 fsync: bool = True) -> tuple[CommitResult | None, dict[str, str]]:
    """Phase 2: ``<timestamp>.pend`` becomes ``<timestamp>.data``, durably. Returns the
    commit (None when it was durable already) and the archive's metadata. PendingMissing
    without either file; Conflict when a newer .data/.ts is current (the .pend is removed:
    it can never be the object). Blocking."""
    hdir = hash_dir(device_path, part, hexhash)
    pend, data = f"{timestamp}.{PENDING}", f"{timestamp}.data"
    try:
        metadata, _ = read_file_metadata(os.path.join(hdir, pend))
    except FileNotFoundError:
        if os.path.exists(os.path.join(hdir, data)):  # a repeated commit
            return None, read_file_metadata(os.path.join(hdir, data))[0]
        main, _ = current_files(listdir(hdir))
        if main is not None and split_name(main)[0] > timestamp:
            # A newer version's commit removed it (`_remove_stale_pending`): it lost.
            raise Conflict(split_name(main)[0]) from None
        raise PendingMissing(timestamp) from None

    class Done(Exception):
        pass

    def check(d: str, names: list[str]) -> None:
        if data in names:
            raise Done()
        main, _ = current_files(names)
        if main is not None and split_name(main)[0] > timestamp:
            raise Conflict(split_name(main)[0])  # whether or not its commit removed ours yet
        if pend not in names:
            raise PendingMissing(timestamp)
        return None

    try:
        with durability.committing(device_path):
            with renamed(device_path, part, hexhash, os.path.join(hdir, pend), data, check,
                         metadata, fsync) as r:
                if fsync:
                    durability.flush_dirs(device_path, r.held.fd, [])
                res = r.finish()
                _remove_stale_pending(r.held.path, r.names, timestamp)
        pending_marks.clear(device_path, part, hexhash, timestamp)
        return res, metadata
    except Done:
        pending_marks.clear(device_path, part, hexhash, timestamp)
        return None, metadata
    except Conflict:
        _unlink(os.path.join(hdir, pend))
        pending_marks.clear(device_path, part, hexhash, timestamp)
        raise


def _remove_stale_pending(hdir: str, names: list[str], timestamp: str) -> None:
    """Archives whose commit never came, older than the one just made durable."""
    for name in _older_pending(names, timestamp):
        _unlink(os.path.join(hdir, name))


def _older_pending(names: list[str], timestamp: str) -> Iterator[str]:
    for name in names:
        stem, ext = split_name(name)
        if ext == PENDING and stem < timestamp:
            yield name


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def open_pending(device_path: str, part: int | str, hexhash: str,
                 timestamp: str) -> ObjectInfo:
    """The pending archive of `timestamp`, open for a GET/HEAD ("missing" without one).
    Blocking."""
    path = os.path.join(hash_dir(device_path, part, hexhash), f"{timestamp}.{PENDING}")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return ObjectInfo("missing")
    try:
        md, body_len = read_fd_metadata(fd, os.fstat(fd).st_size)
    except CorruptFile:
        os.close(fd)
        return ObjectInfo("missing")
    return ObjectInfo("ok", timestamp=timestamp, metadata=md, body_len=body_len, fd=fd)


def pending_archives(device_path: str, part: int | str, hexhash: str) -> list[str]:
    """The .pend files of an object (tests, tools)."""
    return sorted(n for n in listdir(hash_dir(device_path, part, hexhash))
                  if split_name(n)[1] == PENDING)
