"""The resume log: an append-only file of acknowledged uploads, fsynced in batches.

Line 1 is a header naming the destination; every further line is one JSON record
{"n": name, "s": size, "e": etag} written only after the server acknowledged the object and
its ETag matched. A crash can tear the last line; it is ignored and cut off on reopen, so the
next append starts on a clean line. A crash can also lose the last unsynced batch: those
objects are simply uploaded again (a PUT of the same bytes is harmless).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

VERSION = 1


class StateMismatch(Exception):
    """The state file belongs to another destination (container/prefix)."""


def default_state_path(src: str, container: str, prefix: str) -> str:
    """A file in the cwd named after SRC_DIR and the destination, so reruns find it."""
    src = os.path.abspath(src)
    key = hashlib.sha1(f"{src}\0{container}\0{prefix}".encode("utf-8", "surrogateescape"))
    base = os.path.basename(src.rstrip(os.sep)) or "root"
    return os.path.join(os.getcwd(), f".swiftlite-migrate-{base}-{key.hexdigest()[:10]}.state")


def read_state(path: str) -> tuple[dict[str, Any] | None, dict[str, int], int]:
    """(header, {name: size}, offset just past the last complete line)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, {}, 0
    end = data.rfind(b"\n") + 1  # a torn last line (no newline) is not a record
    header: dict[str, Any] | None = None
    done: dict[str, int] = {}
    for i, line in enumerate(data[:end].splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a damaged line is skipped; its object is uploaded again
        if not isinstance(rec, dict):
            continue
        if i == 0 and "v" in rec:
            header = rec
        elif isinstance(rec.get("n"), str):
            done[rec["n"]] = int(rec.get("s", -1))
    return header, done, end


class StateLog:
    """Records acknowledged objects; `flush()` (write + fsync) is cheap enough per batch."""

    def __init__(self, path: str, container: str, prefix: str, batch: int = 256,
                 interval: float = 1.0) -> None:
        self.path = path
        self.batch = batch
        self.interval = interval
        header, self.done, end = read_state(path)
        want = {"v": VERSION, "container": container, "prefix": prefix}
        if header is not None and (header.get("container"), header.get("prefix")) != (
                container, prefix):
            raise StateMismatch(
                f"state file {path} is for container {header.get('container')!r} prefix "
                f"{header.get('prefix')!r}; use another --state")
        self._f = open(path, "ab")
        if self._f.tell() != end:
            self._f.truncate(end)  # drop a torn tail so the next record starts a line
            self._f.seek(end)
        self._pending: list[bytes] = []
        if header is None:
            if end:
                self._f.truncate(0)
            self._pending.append(json.dumps(want).encode() + b"\n")
            self.done = {}
        self._last_flush = time.monotonic()

    def is_done(self, name: str, size: int) -> bool:
        """Recorded with the same size (a file that changed size since is uploaded again)."""
        return self.done.get(name) == size

    def record(self, name: str, size: int, etag: str) -> None:
        self._pending.append(
            json.dumps({"n": name, "s": size, "e": etag}, ensure_ascii=False)
            .encode("utf-8", "surrogateescape") + b"\n")
        self.done[name] = size

    def due(self) -> bool:
        return bool(self._pending) and (
            len(self._pending) >= self.batch
            or time.monotonic() - self._last_flush >= self.interval)

    def take(self) -> bytes:
        """Detach the pending records (on the loop) so a thread can write them."""
        buf = b"".join(self._pending)
        self._pending = []
        self._last_flush = time.monotonic()
        return buf

    def write(self, buf: bytes) -> None:
        """Blocking: append and fsync (called in a worker thread, one batch at a time)."""
        if buf:
            self._f.write(buf)
            self._f.flush()
            os.fsync(self._f.fileno())

    def flush(self) -> None:
        self.write(self.take())

    def close(self) -> None:
        self.flush()
        self._f.close()
