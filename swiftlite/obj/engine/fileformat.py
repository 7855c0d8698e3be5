"""Object file names and format: which files are current, and the trailer with the metadata.

File format (every kind): ``body || metadata || footer``. ``metadata`` is a msgpack map of
str -> str and ``footer`` is ``struct("<I4s")``: the metadata length and the magic ``b"SLO1"``.
The metadata trails the body so a PUT can stream the body before its ETag is known; a reader
finds it from the end of the file. (``writing`` describes what each kind of file carries.)

Current files of an object (its ``state``): the newest .data or .ts (a .ts wins a tie), plus
the newest .meta when it is newer than a .data (or when there is no .data/.ts at all). All
pure functions of names and bytes, except the small metadata readers at the end.
"""

from __future__ import annotations

import errno
import os
import struct
import time

import msgpack

from swiftlite.common.policies import data_dir
from swiftlite.common.sysmeta import MUTABLE_SYSMETA

FOOTER = struct.Struct("<I4s")
MAGIC = b"SLO1"
EXTS = ("data", "ts", "meta")
# Replaced as a set by a .meta (POST); everything else comes from the .data.
POSTABLE = ("content-type", "content-encoding", "content-disposition", "x-delete-at",
            "x-object-manifest", "cache-control", "content-language", "expires")
USER_META = "x-object-meta-"
MUTABLE = MUTABLE_SYSMETA  # per key from the newest .meta (a patch POST), over the .data's
OBJECTS = "objects"


class CorruptFile(Exception):
    pass


# ---- names and state ------------------------------------------------------------------------

class PolicyPart(int):
    """Partition `part` of storage policy `policy` > 0: the number, plus its data dir.

    Partition numbers are per policy ring, so a partition of policy N lives under
    `objects-N/` (its own digests and journal). Policy 0's partitions stay plain ints, which
    keeps its layout exactly the pre-policy one; `policy_part` makes the right kind.
    """

    policy: int

    def __new__(cls, part: int | str, policy: int) -> PolicyPart:
        obj = int.__new__(cls, part)
        obj.policy = policy
        return obj

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, int):
            return NotImplemented
        return int(self) == int(other) and getattr(other, "policy", 0) == self.policy

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash((int(self), self.policy))

    def __str__(self) -> str:
        return str(int(self))

    __repr__ = __str__


def policy_part(part: int | str, policy: int) -> int:
    return int(part) if not policy else PolicyPart(part, policy)


def policy_of(part: int | str) -> int:
    return getattr(part, "policy", 0)


def part_dir(device_path: str, part: int | str) -> str:
    """`<device>/objects[-N]/<part>`: a partition's dir in its policy's data dir."""
    # Formatted, not os.path.join: every read and write builds these paths, and join is
    # the dearer by a microsecond each (device paths come joined, with no trailing slash).
    return f"{device_path}/{data_dir(policy_of(part))}/{part}"


def hash_dir(device_path: str, part: int | str, hexhash: str) -> str:
    return f"{part_dir(device_path, part)}/{hexhash[-3:]}/{hexhash}"


def split_name(name: str) -> tuple[str, str]:
    """`<stem>.<ext>` -> (stem, ext)."""
    stem, _, ext = name.rpartition(".")
    return stem, ext


def current_files(names: list[str]) -> tuple[str | None, str | None]:
    """(newest .data/.ts, newer .meta) among a hash dir's file names."""
    best: tuple[str, bool] | None = None
    best_name = None
    meta_stem = None
    meta_name = None
    for n in names:
        stem, ext = split_name(n)
        if not stem[:1].isdigit():
            continue
        if ext == "data" or ext == "ts":
            key = (stem, ext == "ts")
            if best is None or key > best:
                best, best_name = key, n
        elif ext == "meta" and (meta_stem is None or stem > meta_stem):
            meta_stem, meta_name = stem, n
    if meta_name is not None and best is not None and (best[1] or meta_stem <= best[0]):
        meta_name = None
    return best_name, meta_name


def state_of(names: list[str]) -> str:
    """The object's state for its suffix digest: current file names joined by "|"."""
    a, b = current_files(names)
    if a and b:
        return f"{a}|{b}"
    return a or b or ""


# The state an object's hash dir holds, kept on the dir itself so a read opens its files
# without listing the dir: a listing was over half of a local read's pool time (six GIL
# round trips for a one-file dir). Trusted only because every file added to a hash dir goes
# through `hashdir.renamed`, which sets the hint (hash dir locked) before the rename, so the
# hint never names an existing file older than the current one. A hint naming a file that is
# not there (a crash between the two, a failed rename) only sends the read to a listing.
HINT_XATTR = "user.swiftlite.state"


def read_hint(hdir: str) -> list[str] | None:
    """The current file names the hash dir's hint gives, or None (no hint, no dir, a
    filesystem without user xattrs): the caller lists the dir."""
    try:
        raw = os.getxattr(hdir, HINT_XATTR)
    except OSError:
        return None
    try:
        state = raw.decode()
    except UnicodeDecodeError:
        return None
    names = state.split("|")
    if not state or len(names) > 2 or any(os.sep in n or n[:1] in ("", ".") for n in names):
        return None
    return names


def write_hint(dir_fd: int, state: str) -> None:
    """Set the hint of the (locked) hash dir open as `dir_fd`. Where it cannot be set, it is
    removed, and failing that the caller's write fails: a stale hint would serve old data."""
    try:
        os.setxattr(dir_fd, HINT_XATTR, state.encode())
        return
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return  # no user xattrs here: no hint can exist either
    try:
        os.removexattr(dir_fd, HINT_XATTR)
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise


def obsolete(names: list[str]) -> list[str]:
    keep = set(current_files(names))
    return [n for n in names if split_name(n)[1] in EXTS and n not in keep]


def _newest_stem(names: list[str], exts: tuple[str, ...]) -> str | None:
    stems = [s for s, e in map(split_name, names) if e in exts and s[:1].isdigit()]
    return max(stems) if stems else None


def listdir(path: str) -> list[str]:
    """A directory's entries; none when it is missing (or is a file)."""
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


# ---- file format ----------------------------------------------------------------------------

def pack_trailer(metadata: dict[str, str]) -> bytes:
    raw = msgpack.packb(metadata, use_bin_type=True)
    return raw + FOOTER.pack(len(raw), MAGIC)


def parse_tail(tail: bytes | memoryview, file_size: int) -> tuple[dict[str, str], int] | int:
    """(metadata, body length) from the last bytes of a file, or how many tail bytes it needs."""
    if len(tail) < FOOTER.size:
        raise CorruptFile("file too short")
    mlen, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER.size)
    if magic != MAGIC or mlen + FOOTER.size > file_size:
        raise CorruptFile("bad footer")
    need = mlen + FOOTER.size
    if len(tail) < need:
        return need
    start = len(tail) - need
    try:
        meta = msgpack.unpackb(bytes(tail[start:start + mlen]), raw=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptFile("bad metadata") from exc
    if not isinstance(meta, dict):
        raise CorruptFile("bad metadata")
    return meta, file_size - need


def read_fd_metadata(fd: int, size: int) -> tuple[dict[str, str], int]:
    want = min(size, 4096)
    while True:
        res = parse_tail(os.pread(fd, want, size - want), size)
        if isinstance(res, tuple):
            return res
        want = res


def read_file_metadata(path: str) -> tuple[dict[str, str], int]:
    """(metadata, body length) of one object file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_fd_metadata(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def merge_metadata(data_meta: dict[str, str], meta_meta: dict[str, str] | None) -> dict[str, str]:
    if not meta_meta:
        return data_meta
    out = {k: v for k, v in data_meta.items()
           if not (k.lower().startswith(USER_META) or k.lower() in POSTABLE[1:])}
    for k, v in meta_meta.items():
        lk = k.lower()
        if lk.startswith(USER_META) or lk in POSTABLE:
            out[k] = v
        elif lk.startswith(MUTABLE):
            if v:
                out[k] = v
            else:
                out.pop(k, None)
    return out


def is_expired(metadata: dict[str, str], now: float | None = None) -> bool:
    v = metadata.get("X-Delete-At")
    if not v:
        return False
    try:
        return int(v) <= (time.time() if now is None else now)
    except ValueError:
        return False
