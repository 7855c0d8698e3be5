"""Atomic file replacement and directory fsync, shared by every writer of whole files.

A reader of `path` sees the old file or the new one, never half of one: the data goes to a
temp file in the same filesystem, is flushed (and fsynced when asked), then renamed over
`path`. Blocking: servers call these from the thread pool.
"""

from __future__ import annotations

import os
import tempfile


def fsync_dir(path: str) -> None:
    """Make the entries of directory `path` (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int | None = 0o644, fsync: bool = True,
                 tmp_dir: str | None = None, prefix: str = ".tmp-",
                 sync_dir: bool = False) -> None:
    """Atomically replace `path` with `data`.

    `mode` is applied to the temp file before the rename (mkstemp makes 0600, and other
    users or tools may read the file); None keeps 0600. `tmp_dir` must be on the same
    filesystem as `path` (default: `path`'s directory). `fsync` makes the data durable
    before the rename; `sync_dir` also fsyncs `path`'s directory after it, so the rename
    itself survives a crash. The temp file is removed if anything before the rename fails.
    """
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=tmp_dir or d, prefix=prefix)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        fsync_dir(d)
