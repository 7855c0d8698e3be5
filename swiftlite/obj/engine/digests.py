"""Incremental suffix digests: per partition, one 128-bit digest per suffix, kept exact in O(1).

A suffix's digest is the XOR, over every object hash dir in it, of
``xxh3_128(hash + "/" + state)`` where ``state`` is the object's current file names
(``fileformat.state_of``: newest .data/.ts, then a newer .meta, joined by "|"). An object with no
files contributes nothing. Because XOR is its own inverse, a write that moves an object from
state ``s0`` to ``s1`` changes its suffix digest by ``h(s0) ^ h(s1)``, whatever the object count.

On disk, under ``<device>/objects/<part>/``:

- ``hashes.journal``: append-only msgpack records. The first is ``["J", id(16 bytes)]`` (the
  file's identity, written before the file is linked into place); every later one is
  ``[suffix(int 0..4095), delta(16 bytes)]``. Deltas commute, so concurrent appends in any
  order are fine (each is one small O_APPEND write).
- ``hashes.digests``: ``b"SLD1" + journal id(16) + folded offset(u64 LE) + msgpack map``
  ``{suffix: 16-byte digest}`` of the non-empty suffixes: the digests with every journal
  record before ``offset`` of journal ``id`` folded in (REPLICATE answers that map). Folding
  writes this file (tmp, fsync, rename) then unlinks the journal; a crash in between re-reads
  the same journal from ``offset``, so no delta is ever applied twice.

Locking (``flock`` on the journal, so it holds across threads and worker processes): a write
holds it shared from before it reads the object's old state until its delta is appended; a fold
or a suffix rehash holds it exclusive, so a listing never sees a state whose delta is still to
come. A kill -9 between an object's rename and its journal append leaves that one suffix
drifted; ``rehash_suffixes`` (REPLICATE with a suffix list, the replicator, the auditor) heals
it. A journal or digest file that cannot be read whole (a damaged record, a torn one found
under the exclusive lock, a bad header) hides deltas of unknown suffixes: it is logged and
the partition's digests are re-derived from its hash dirs before the journal goes, never
folded without them. Nothing else here lists a suffix directory except ``rehash_suffixes``
and ``object_states``.

API for the server and the replicator (all blocking: call through the thread pool):

- ``get_digests(device_path, part) -> {suffix: 16-byte digest}`` for every non-empty suffix;
  folds the journal into the digest file when it has grown past ``FOLD_BYTES``.
  ``get_digests_packed`` is the same, msgpack-encoded (cheapest when all is folded).
- ``fold(device_path, part)``: fold now (the server runs it in the background).
- ``rehash_suffixes(device_path, part, suffixes) -> {suffix: digest}`` (all non-empty suffixes
  of the partition, after re-deriving the listed ones from their directories).
- ``object_states(device_path, part, suffix) -> {hash: state}`` (non-empty states only).
- ``journal(device_path, part)``: context manager used by every writer (see ``Journal``).
- ``recompute(device_path, part) -> {suffix: digest}``: the full listing, for tests/benchmarks.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from collections.abc import Iterable

import msgpack
import xxhash

from swiftlite.common.fsutil import atomic_write
from swiftlite.obj.engine import fileformat

log = logging.getLogger("swiftlite.object.digests")

JOURNAL = "hashes.journal"
DIGESTS = "hashes.digests"
# Temp files of a journal being created and of a digest file being replaced; a crash between
# their write and their rename/link leaves them behind (see `clean_stale_temps`).
TEMP_PREFIXES = (".journal-", ".digests-")
SUFFIXES = 4096
_MAGIC = b"SLD1"
_HEAD = struct.Struct("<4s16sQ")
SUFFIX_NAMES = [f"{i:03x}" for i in range(SUFFIXES)]
_ZERO = bytes(16)
FOLD_BYTES = 64 * 1024  # ~3k records; past this a read folds (and the server folds early)


def state_hash(hexhash: str, state: str) -> int:
    """An object's contribution to its suffix digest (0 when it has no files)."""
    if not state:
        return 0
    return int.from_bytes(xxhash.xxh3_128_digest(f"{hexhash}/{state}".encode()), "big")


def _part_dir(device_path: str, part: int | str) -> str:
    return fileformat.part_dir(device_path, part)


class Journal:
    """A locked handle on a partition's journal; ``record`` appends one delta.

    ``with journal(dev, part) as j:`` takes the shared lock (writers); ``exclusive=True``
    takes it exclusively (folds, rehashes). The partition dir is created when missing.
    """

    def __init__(self, device_path: str, part: int | str, exclusive: bool = False,
                 create: bool = True) -> None:
        self.part_dir = _part_dir(device_path, part)
        self.path = os.path.join(self.part_dir, JOURNAL)
        self.exclusive = exclusive
        self.create = create  # False: raise FileNotFoundError when there is no journal
        self.fd = -1
        self.size = 0

    def _open(self) -> None:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                if not self.create:
                    raise
                self._create()
                continue
            fcntl.flock(fd, fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH)
            st = os.fstat(fd)
            if st.st_nlink == 0:  # folded and unlinked while we waited
                os.close(fd)
                continue
            self.fd = fd
            self.size = st.st_size
            return

    def _create(self) -> None:
        # The header must be the file's first record, so it is written before the file
        # appears under its name; link() does not replace a journal another writer made.
        os.makedirs(self.part_dir, exist_ok=True)
        tmp = os.path.join(self.part_dir,
                           f"{TEMP_PREFIXES[0]}{os.getpid()}-{os.urandom(4).hex()}")
        with open(tmp, "wb") as f:
            f.write(msgpack.packb(["J", os.urandom(16)]))
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)

    def __enter__(self) -> Journal:
        self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # releases the lock
        self.fd = -1

    def record(self, suffix: str, hexhash: str, old_state: str, new_state: str) -> None:
        delta = state_hash(hexhash, old_state) ^ state_hash(hexhash, new_state)
        self.record_delta(suffix, delta)

    def record_delta(self, suffix: str, delta: int) -> None:
        if delta:
            rec = msgpack.packb([int(suffix, 16), delta.to_bytes(16, "big")])
            os.write(self.fd, rec)
            # At least this big (other writers may append too): enough for the fold
            # threshold, without an fstat per write.
            self.size += len(rec)

    def read(self, folded_id: bytes = b"", folded_offset: int = 0
             ) -> tuple[bytes, int, dict[int, int], str | None]:
        """(journal id, offset read to, {suffix: XOR of its deltas}, damage) of the records
        not yet folded (those past `folded_offset` when `folded_id` is this journal).
        `damage` says what could not be read (then records of unknown suffixes are missing);
        a torn tail counts only under the exclusive lock (else it may be an append in
        progress, left for later)."""
        size = os.fstat(self.fd).st_size
        data = memoryview(os.pread(self.fd, size, 0))
        head = msgpack.Unpacker(use_list=False)
        head.feed(data[:64])
        try:
            tag, jid = next(head)
            if tag != "J" or not isinstance(jid, bytes):
                raise ValueError("no journal header")
        except (StopIteration, ValueError, TypeError, msgpack.UnpackException):
            return b"", 0, {}, f"no journal header ({size} bytes)"
        pos = head.tell()
        if jid == folded_id and folded_offset > pos:
            pos = folded_offset
        unpacker = msgpack.Unpacker(use_list=False)
        unpacker.feed(data[pos:])
        acc: dict[int, int] = {}
        end = pos
        try:
            for suffix, delta in unpacker:
                if not 0 <= suffix < SUFFIXES or len(delta) != 16:
                    raise ValueError(f"bad record {suffix!r}, {delta!r}")
                acc[suffix] = acc.get(suffix, 0) ^ int.from_bytes(delta, "big")
                end = pos + unpacker.tell()
        except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
            return jid, end, acc, f"damaged record at offset {end} of {size}: {exc!r}"
        if self.exclusive and end < size:  # no writer is appending: a crash tore it
            return jid, end, acc, f"torn record at offset {end} of {size}"
        return jid, end, acc, None


def journal(device_path: str, part: int | str, exclusive: bool = False) -> Journal:
    return Journal(device_path, part, exclusive)


def _read_digest_file(part_dir: str) -> tuple[bytes, int, dict[str, bytes]] | None:
    """(journal id folded, offset folded, {suffix: digest}); empty when absent, None when
    the file is there but cannot be read (its digests must be re-derived)."""
    try:
        with open(os.path.join(part_dir, DIGESTS), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b"", 0, {}
    if len(data) < _HEAD.size or not data.startswith(_MAGIC):
        return None
    _, jid, offset = _HEAD.unpack_from(data)
    try:
        digests = msgpack.unpackb(data[_HEAD.size:], raw=False)
    except (ValueError, msgpack.UnpackException):
        return None
    if not isinstance(digests, dict):
        return None
    return jid, offset, digests


def _write_digest_file(part_dir: str, jid: bytes, offset: int,
                       digests: dict[str, bytes]) -> None:
    body = msgpack.packb(digests, use_bin_type=True)
    atomic_write(os.path.join(part_dir, DIGESTS),
                 _HEAD.pack(_MAGIC, jid.ljust(16, b"\0"), offset) + body,
                 prefix=TEMP_PREFIXES[1], sync_dir=True)


class Damaged(Exception):
    """The journal or the digest file could not be read whole (see `_current`)."""


def _current(j: Journal) -> tuple[bytes, int, dict[str, bytes], bool]:
    """The digest file with the journal's unfolded records applied: (journal id, offset
    read to, digests, whether anything was applied). Raises Damaged when either file could
    not be read whole: deltas of unknown suffixes are missing."""
    state = _read_digest_file(j.part_dir)
    if state is None:
        raise Damaged(f"unreadable {DIGESTS}")
    fjid, foffset, digests = state
    jid, end, acc, damage = j.read(fjid, foffset)
    if damage is not None:
        raise Damaged(f"{JOURNAL}: {damage}")
    for suffix, delta in acc.items():
        name = SUFFIX_NAMES[suffix]
        d = int.from_bytes(digests.get(name, _ZERO), "big") ^ delta
        if d:
            digests[name] = d.to_bytes(16, "big")
        else:
            digests.pop(name, None)
    return jid, end, digests, bool(acc)


def _rederive_locked(j: Journal, why: Damaged) -> tuple[bytes, int, dict[str, bytes]]:
    """Every suffix of the partition re-derived from its hash dirs (exclusive lock held),
    as the state to write with the whole journal counted as folded."""
    log.error("suffix digests of %s: %s; re-deriving every suffix from the hash dirs",
              j.part_dir, why)
    jid, _, _, _ = j.read()
    return jid, os.fstat(j.fd).st_size, _rederive(j.part_dir)


def _fold_locked(j: Journal) -> dict[str, bytes]:
    try:
        jid, end, digests, changed = _current(j)
    except Damaged as why:
        jid, end, digests = _rederive_locked(j, why)
        changed = True
    if changed:
        _write_digest_file(j.part_dir, jid, end, digests)
    os.unlink(j.path)  # waiting writers see nlink == 0 and start a new journal
    return digests


def _part_exists(device_path: str, part: int | str) -> bool:
    return os.path.isdir(_part_dir(device_path, part))


def fold(device_path: str, part: int | str) -> dict[str, bytes]:
    """Fold the journal into the digest file now; returns the digests."""
    if not _part_exists(device_path, part):
        return {}
    try:
        with Journal(device_path, part, exclusive=True, create=False) as j:
            return _fold_locked(j)
    except FileNotFoundError:  # nothing to fold
        state = _read_digest_file(_part_dir(device_path, part))
    if state is not None:
        return state[2]
    with Journal(device_path, part, exclusive=True) as j:  # a bad digest file: rebuild it
        return _fold_locked(j)


def get_digests(device_path: str, part: int | str) -> dict[str, bytes]:
    """{suffix: digest} for every non-empty suffix, from the digest file and the journal."""
    if not _part_exists(device_path, part):
        return {}
    try:
        with Journal(device_path, part, create=False) as j:
            if j.size <= FOLD_BYTES:
                return _current(j)[2]
    except FileNotFoundError:
        # No journal: everything is folded (a fold unlinks the journal only after renaming
        # the digest file into place), and a read creates nothing.
        state = _read_digest_file(_part_dir(device_path, part))
        if state is not None:
            return state[2]
    except Damaged:
        pass  # the fold, under the exclusive lock, logs it and re-derives
    return fold(device_path, part)


def get_digests_packed(device_path: str, part: int | str) -> bytes:
    """``get_digests`` msgpack-encoded (REPLICATE's body). With nothing to fold, the digest
    file's own map is returned as it is on disk, neither decoded nor re-encoded."""
    part_dir = _part_dir(device_path, part)
    if not os.path.exists(os.path.join(part_dir, JOURNAL)):
        try:
            with open(os.path.join(part_dir, DIGESTS), "rb") as f:
                data = f.read()
            if data.startswith(_MAGIC) and len(data) > _HEAD.size:
                return data[_HEAD.size:]
        except FileNotFoundError:
            pass
    return msgpack.packb(get_digests(device_path, part), use_bin_type=True)


def _suffix_listing(part_dir: str, suffix: str) -> dict[str, str]:
    sdir = os.path.join(part_dir, suffix)
    try:
        names = os.listdir(sdir)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[str, str] = {}
    for h in names:
        if len(h) != 32:
            continue
        try:
            files = os.listdir(os.path.join(sdir, h))
        except (FileNotFoundError, NotADirectoryError):
            continue
        state = fileformat.state_of(files)
        if state:
            out[h] = state
    return out


def _suffix_digest(part_dir: str, suffix: str) -> int:
    d = 0
    for h, state in _suffix_listing(part_dir, suffix).items():
        d ^= state_hash(h, state)
    return d


def object_states(device_path: str, part: int | str, suffix: str) -> dict[str, str]:
    """{hash: state} of every object (or tombstone) in one suffix; lists that suffix only."""
    return _suffix_listing(_part_dir(device_path, part), suffix)


def rehash_suffixes(device_path: str, part: int | str,
                    suffixes: Iterable[str]) -> dict[str, bytes]:
    """Re-derive the listed suffixes from disk (healing drift); return all digests."""
    wanted = sorted({s.lower() for s in suffixes if _valid_suffix(s)})
    if not _part_exists(device_path, part):
        return {}
    with journal(device_path, part, exclusive=True) as j:
        try:
            jid, end, digests, _ = _current(j)
        except Damaged as why:
            jid, end, digests = _rederive_locked(j, why)
            wanted = []  # all of them are fresh
        for s in wanted:
            d = _suffix_digest(j.part_dir, s)
            if d:
                digests[s] = d.to_bytes(16, "big")
            else:
                digests.pop(s, None)
        _write_digest_file(j.part_dir, jid, end, digests)
        os.unlink(j.path)
        return digests


def recompute(device_path: str, part: int | str) -> dict[str, bytes]:
    """Every suffix re-derived by listing (what a listing-based store pays); read only."""
    return _rederive(_part_dir(device_path, part))


def _rederive(part_dir: str) -> dict[str, bytes]:
    try:
        names = os.listdir(part_dir)
    except FileNotFoundError:
        return {}
    out: dict[str, bytes] = {}
    for s in names:
        if _valid_suffix(s):
            d = _suffix_digest(part_dir, s)
            if d:
                out[s] = d.to_bytes(16, "big")
    return out


def _valid_suffix(s: str) -> bool:
    if len(s) != 3:
        return False
    try:
        int(s, 16)
    except ValueError:
        return False
    return True


def clean_stale_temps(device_path: str, part: int | str, names: list[str],
                      max_age: float = 3600.0) -> int:
    """Remove journal/digest temp files among a partition dir's `names` older than
    `max_age` seconds (a live writer's are seconds old); returns how many went."""
    part_dir = _part_dir(device_path, part)
    removed = 0
    now = time.time()
    for name in names:
        if not name.startswith(TEMP_PREFIXES):
            continue
        path = os.path.join(part_dir, name)
        try:
            if now - os.stat(path).st_mtime > max_age:
                os.unlink(path)
                removed += 1
        except FileNotFoundError:
            pass
    return removed
