"""Reading an object back (GET/HEAD, a sync's file list), and the auditor's repairs of a hash
dir: its hint and quarantine.

The current files of an object (its ``state``, ``fileformat.state_of``): the newest .data or
.ts (a .ts wins a tie), plus the newest .meta when newer than a .data (or with no .data/.ts).
The hash dir carries its state as a hint (the xattr ``user.swiftlite.state``), set under the
flock before every rename into the dir (``hashdir.renamed``), so a read opens the named files
without listing the dir; a hint that names a file not there, or a tombstone, sends the read
to a listing, and the auditor sets hints that lost track (``refresh_hint``).

API used by the server, the proxy's local reads, the replicator and the auditor (blocking;
call through the thread pool): ``open_object`` (GET/HEAD), ``read_chunk``, ``quarantine``,
``current_paths`` (the files a sync must send), ``refresh_hint``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from swiftlite.obj.engine import bodysum
from swiftlite.obj.engine.fileformat import (
    FOOTER,
    CorruptFile,
    current_files,
    hash_dir,
    listdir,
    merge_metadata,
    parse_tail,
    read_fd_metadata,
    read_file_metadata,
    read_hint,
    split_name,
    state_of,
    write_hint,
)
from swiftlite.obj.engine.hashdir import DeviceMissing, locked_hash_dir

QUARANTINE = os.path.join("quarantined", "objects")

# What a whole-body read asks for before it knows the file's size: a 64 KiB image and its
# metadata in one read (at 64 KiB exactly, every such file took a second read and an fstat),
# and still under the size where malloc maps fresh pages for each buffer (~10x dearer).
FIRST_READ = 128 * 1024 - 64
# Room for the metadata after the body: a small `read_whole` asks for that much more, so a
# file whose body is just under it still comes back in the first read.
TAIL_GUESS = 4096


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
    stem = split_name(main)[0]
    if main.endswith(".ts"):
        return ObjectInfo("deleted", timestamp=stem)
    try:
        fd = os.open(f"{hdir}/{main}", os.O_RDONLY)
    except FileNotFoundError:  # replaced under us (or a hint ahead of its file): list it
        return open_object(device_path, part, hexhash, read_whole, verify, False)
    info = ObjectInfo("ok", timestamp=stem)
    try:
        # A small file is read whole without asking its size first: a read that comes back
        # short has reached the end. One syscall less, and in a proxy's pool thread each
        # syscall is one more wait to take the GIL back from a busy event loop.
        guess = min(read_whole + TAIL_GUESS + FOOTER.size, FIRST_READ) if read_whole else 0
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
                info.meta_timestamp = split_name(meta)[0]
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
    return [os.path.join(hdir, n) for n in current_files(listdir(hdir)) if n]


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
