"""The page cache keeps the object files written last and lets the older ones go."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import hashlib
import mmap
import os
import time

import pytest

from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import durability, fileformat, hashdir, page_cache, reading, writing
from swiftlite.obj.engine.batch_commit import BatchCommitter

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
PAGE = mmap.PAGESIZE


def resident_pages(path: str) -> int:
    """How many of the file's pages the page cache holds (mincore(2) on a mapping of it)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)  # private: a writable buffer
    try:
        buf = (ctypes.c_char * size).from_buffer(mm)
        try:
            vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
            if _libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size),
                             vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(v & 1 for v in vec)
        finally:
            del buf
    finally:
        mm.close()


def _flushed_file(path: str, size: int) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())


@pytest.fixture
def droppable(tmp_path):
    """tmp_path, where a flushed file's pages can be dropped (not on tmpfs, whose pages are
    the file itself)."""
    probe = str(tmp_path / "probe")
    _flushed_file(probe, 8 * PAGE)
    if resident_pages(probe) == 0:
        pytest.skip("this filesystem's files were not in the page cache after a write")
    page_cache.drop(probe)
    if resident_pages(probe) != 0:
        pytest.skip("this filesystem keeps its pages whatever the hint (tmpfs)")
    os.unlink(probe)
    return tmp_path


def test_the_window_gives_up_its_oldest_files_beyond_its_bytes_or_count():
    w = page_cache.WrittenWindow(250 * PAGE)
    for i in range(5):
        w.add(f"f{i}", 100 * PAGE)
    assert w.overflow() == ["f0", "f1", "f2"]  # 200 pages left: the newest two
    assert w.overflow() == []
    w.add("f5", 50 * PAGE - 100)  # counted in whole pages: 50
    assert w.overflow() == []  # 250 pages fit
    w.add("f6", 1)  # one page
    assert w.overflow() == ["f3"]
    assert w.dropped == 4
    assert page_cache.WrittenWindow(0).overflow() == []
    zero = page_cache.WrittenWindow(0)
    zero.add("g", 1)
    assert zero.overflow() == ["g"]
    few = page_cache.WrittenWindow(1 << 30, max_files=2)  # tiny files: the count binds
    for i in range(4):
        few.add(f"t{i}", 10)
    assert few.overflow() == ["t0", "t1"]


def test_drop_frees_a_flushed_files_pages_and_ignores_a_missing_file(droppable):
    path = str(droppable / "f")
    _flushed_file(path, 16 * PAGE)
    assert resident_pages(path) == 16
    page_cache.drop(path)
    assert resident_pages(path) == 0
    with open(path, "rb") as f:
        f.read()
    assert resident_pages(path) == 16  # a read caches it again
    page_cache.drop(str(droppable / "gone"))  # nothing to drop, no error


async def test_the_committer_leaves_the_newest_files_cached_and_drops_the_rest(droppable):
    assert durability.configure("batch") == "batch"
    dev = str(droppable / "d1")
    os.mkdir(dev)
    body = 16 * PAGE
    committer = BatchCommitter(written_cache=3 * body)
    base = Timestamp.now().ticks
    paths = []
    for i in range(6):  # one at a time: six batches, each dropping what overflowed
        h = hashlib.md5(f"o{i}".encode()).hexdigest()
        ts = Timestamp(base + i).internal
        data = os.urandom(body)
        etag, res = await committer.put([writing.DataWriter(dev, 1, h)], [data],
                                        {"name": f"/a/c/o{i}"}, ts)
        assert isinstance(res[0], hashdir.CommitResult) and etag == hashlib.md5(data).hexdigest()
        paths.append(os.path.join(fileformat.hash_dir(dev, 1, h), f"{ts}.data"))
    deadline = time.monotonic() + 10
    while committer.window.dropped < 3:  # dropped after each batch's answers
        assert time.monotonic() < deadline, "the committer did not drop the oldest files"
        await asyncio.sleep(0.01)
    assert [resident_pages(p) > 0 for p in paths] == [False] * 3 + [True] * 3
    # Dropped from the cache, not from the store.
    info = reading.open_object(dev, 1, hashlib.md5(b"o0").hexdigest(), 1 << 20, True)
    assert info.status == "ok" and info.metadata["Content-Length"] == str(body)
    info.close()


async def test_without_a_window_every_written_file_stays_cached(droppable):
    assert durability.configure("batch") == "batch"
    dev = str(droppable / "d1")
    os.mkdir(dev)
    committer = BatchCommitter(written_cache=None)
    base = Timestamp.now().ticks
    paths = []
    for i in range(4):
        h = hashlib.md5(f"n{i}".encode()).hexdigest()
        ts = Timestamp(base + i).internal
        await committer.put([writing.DataWriter(dev, 1, h)], [os.urandom(8 * PAGE)],
                            {"name": f"/a/c/n{i}"}, ts)
        paths.append(os.path.join(fileformat.hash_dir(dev, 1, h), f"{ts}.data"))
    assert committer.window is None
    assert all(resident_pages(p) > 0 for p in paths)
