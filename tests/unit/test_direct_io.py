"""O_DIRECT writes (swiftlite/obj/engine/direct_io.py) on a real disk.

`make test` may put the suite's clusters in RAM (tests/ram_tmpdir.sh), and an older tmpfs
refuses O_DIRECT (the object servers then fall back to buffered writes). These tests therefore
write into a directory in the checkout, on the disk it was cloned to, so the direct path on a
real filesystem keeps a test whatever the temp dir is.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from swiftlite.obj.engine import direct_io

REPO = Path(__file__).resolve().parents[2]
SIZES = [0, 1, 4095, 4096, 4097, 65536, 65537, (1 << 20) + 3]


@pytest.fixture
def disk_dir():
    d = tempfile.mkdtemp(prefix=".direct-io-test-", dir=REPO)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _open(path: str):
    def opener(extra: int) -> tuple[int, str]:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | extra, 0o600), path
    return opener


def _direct_fd(disk_dir: str, name: str) -> int:
    got = direct_io.open_direct(disk_dir, _open(os.path.join(disk_dir, name)))
    if got is None:
        pytest.skip(f"the filesystem of {disk_dir} refuses O_DIRECT")
    return got[0]


@pytest.mark.parametrize("size", SIZES)
def test_whole_image_written_direct_reads_back(disk_dir, size):
    body = random.randbytes(size)
    fd = _direct_fd(disk_dir, "whole")
    try:
        image, length = direct_io.aligned_image([body[: size // 3], body[size // 3:]])
        assert len(image) % direct_io.ALIGN == 0 and length == size
        direct_io.write_image(fd, image, length)
    finally:
        os.close(fd)
    assert Path(disk_dir, "whole").read_bytes() == body


@pytest.mark.parametrize("size", SIZES)
def test_streamed_file_written_direct_reads_back(disk_dir, size):
    body = random.randbytes(size)
    fd = _direct_fd(disk_dir, "streamed")
    try:
        stager = direct_io.Stager(fd)
        off = 0
        for step in (1, 4095, 7, 8192, 65536, 100_000):  # odd steps cross block edges
            if off >= size:
                break
            assert stager.write([body[off:off + step]]) == len(body[off:off + step])
            off += step
        if off < size:
            stager.write([body[off:]])
        stager.finish()
    finally:
        os.close(fd)
    assert Path(disk_dir, "streamed").read_bytes() == body

