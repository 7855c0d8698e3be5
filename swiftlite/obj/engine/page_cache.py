"""The page cache keeps the object files written last, and lets older ones go.

A buffered write copies the body into page-cache pages. Left there, every PUT grows the
cache with fresh pages. Fresh pages are the costly kind: on the VMs this runs on (a balloon
that hands free memory back to the host), a fresh page is faulted in from the host on first
touch: creating and writing a new 64 KiB file cost 57-313 us of kernel time, against 27 us
when its pages were ones just freed (`loadtests/RESULTS.md`, sixteenth session).
Swift drops every written object from the cache for a like reason, and then reads what
was just written from the disk.

`WrittenWindow` is the middle way: the most recent `limit` bytes of object files written
stay cached (an image is often read again soon after its upload, and a replica read then
costs no disk read), and older ones are dropped from the cache, so new writes reuse their
pages. A file read later is cached again by that read, as any file is.
"""

from __future__ import annotations

import collections
import mmap
import os
import threading

PAGE = mmap.PAGESIZE
WINDOW = 512 * 1024 * 1024  # written_cache_size's default (etc/object-server.conf)
MAX_FILES = 32768  # paths remembered at most: tiny objects would need millions for the bytes


def drop(path: str) -> None:
    """Let the kernel free `path`'s cached pages (clean ones: the file is flushed).
    A file removed or replaced since has nothing to drop."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass  # only a hint
    finally:
        os.close(fd)


class WrittenWindow:
    """The paths of recently written files, newest last, up to `limit` bytes of the pages
    they fill and `max_files` files (thread-safe)."""

    def __init__(self, limit: int, max_files: int = MAX_FILES) -> None:
        self.limit = max(0, limit)
        self.max_files = max(0, max_files)
        self._files: collections.deque[tuple[str, int]] = collections.deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self.dropped = 0  # files dropped from the cache: for tests and stats

    def add(self, path: str, nbytes: int) -> None:
        nbytes = max(1, -(-nbytes // PAGE)) * PAGE  # the cache holds whole pages
        with self._lock:
            self._files.append((path, nbytes))
            self._bytes += nbytes

    def overflow(self) -> list[str]:
        """Take the oldest paths out until what is left fits in `limit`; the caller drops
        them (`drop`, blocking: a committer thread, not the event loop)."""
        out = []
        with self._lock:
            while self._files and (self._bytes > self.limit
                                   or len(self._files) > self.max_files):
                path, n = self._files.popleft()
                self._bytes -= n
                out.append(path)
            self.dropped += len(out)
        return out

    def drop_overflow(self) -> int:
        """Drop what `overflow` takes out; returns how many files."""
        paths = self.overflow()
        for path in paths:
            drop(path)
        return len(paths)
