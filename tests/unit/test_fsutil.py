import os
import stat

import pytest

from swiftlite.common import fsutil


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_write_creates_and_replaces(tmp_path):
    p = str(tmp_path / "f.bin")
    fsutil.atomic_write(p, b"one")
    assert open(p, "rb").read() == b"one"
    ino = os.stat(p).st_ino
    fsutil.atomic_write(p, b"two!")
    assert open(p, "rb").read() == b"two!"
    assert os.stat(p).st_ino != ino  # a new file renamed over, not rewritten in place
    assert os.listdir(tmp_path) == ["f.bin"]


def test_atomic_write_mode(tmp_path):
    p = str(tmp_path / "a")
    fsutil.atomic_write(p, b"x")
    assert _mode(p) == 0o644
    fsutil.atomic_write(p, b"x", mode=0o640)
    assert _mode(p) == 0o640
    fsutil.atomic_write(p, b"x", mode=None, fsync=False)
    assert _mode(p) == 0o600  # mkstemp's own mode


def test_atomic_write_tmp_dir_and_prefix(tmp_path):
    tmp_dir = tmp_path / "tmp"
    tmp_dir.mkdir()
    dest = tmp_path / "d"
    dest.mkdir()
    p = str(dest / "rec")
    fsutil.atomic_write(p, b"r", tmp_dir=str(tmp_dir), prefix="async-", sync_dir=True)
    assert open(p, "rb").read() == b"r"
    assert os.listdir(tmp_dir) == []


def test_atomic_write_failure_leaves_old_file_and_no_temp(tmp_path):
    p = str(tmp_path / "keep")
    fsutil.atomic_write(p, b"old")
    # Renaming over a directory fails after the temp file was written.
    target = tmp_path / "adir"
    target.mkdir()
    (target / "child").write_bytes(b"")
    with pytest.raises(OSError):
        fsutil.atomic_write(str(target), b"new", prefix=".t-")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".t-")]
    # Data that cannot be written (not bytes) also cleans up.
    with pytest.raises(TypeError):
        fsutil.atomic_write(p, "text", prefix=".t-")  # type: ignore[arg-type]
    assert open(p, "rb").read() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["adir", "keep"]


def test_fsync_dir(tmp_path):
    fsutil.fsync_dir(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        fsutil.fsync_dir(str(tmp_path / "missing"))
