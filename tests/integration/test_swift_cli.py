"""The stock `swift` command (python-swiftclient) against `swiftlite up`, unchanged."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

SWIFT = os.path.join(os.path.dirname(sys.executable), "swift")


def swift(cluster, *args: str, cwd: str | None = None) -> str:
    cmd = [SWIFT, "-A", cluster.auth_url, "-U", "test:tester", "-K", "testing", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert r.returncode == 0, f"{' '.join(args)} failed: {r.stdout}\n{r.stderr}"
    return r.stdout


def test_swift_cli_round_trip(cluster, tmp_path):
    src = tmp_path / "images"
    (src / "cats").mkdir(parents=True)
    (src / "dogs").mkdir()
    files = {
        "cats/a.jpg": os.urandom(64 * 1024),
        "cats/b.jpg": os.urandom(300 * 1024),
        "dogs/c.png": os.urandom(16 * 1024),
        "big.bin": os.urandom(20 * 1024 * 1024),
    }
    for rel, data in files.items():
        (src / rel).write_bytes(data)

    out = swift(cluster, "stat")
    assert "Account: AUTH_test" in out

    swift(cluster, "upload", "photos", "cats", "dogs", "big.bin", cwd=str(src))
    assert swift(cluster, "list", "photos").split() == sorted(files)

    assert swift(cluster, "list", "photos", "--prefix", "cats/").split() == \
        ["cats/a.jpg", "cats/b.jpg"]
    assert swift(cluster, "list", "photos", "--delimiter", "/").split() == \
        ["big.bin", "cats/", "dogs/"]

    dest = tmp_path / "down"
    dest.mkdir()
    # `swift download` checks every ETag against the MD5 of what it received.
    out = swift(cluster, "download", "photos", cwd=str(dest))
    for rel, data in files.items():
        got = (dest / rel).read_bytes()
        assert hashlib.md5(got).digest() == hashlib.md5(data).digest(), rel

    swift(cluster, "post", "-m", "Color:blue", "photos", "cats/a.jpg")
    assert "Color: blue" in swift(cluster, "stat", "photos", "cats/a.jpg")
    swift(cluster, "post", "-m", "Owner:ann", "photos")
    assert "Owner: ann" in swift(cluster, "stat", "photos")

    swift(cluster, "delete", "photos", "cats/a.jpg")
    assert "cats/a.jpg" not in swift(cluster, "list", "photos").split()
    swift(cluster, "delete", "photos")
    assert "photos" not in swift(cluster, "list").split()


def test_connection_class(cluster):
    conn = cluster.connection()
    conn.put_container("conn-test")
    conn.put_object("conn-test", "x", b"abc", content_type="text/plain")
    headers, body = conn.get_object("conn-test", "x")
    assert body == b"abc" and headers["content-type"].startswith("text/plain")
    _, listing = conn.get_container("conn-test", full_listing=True)
    assert [o["name"] for o in listing] == ["x"]
    assert listing[0]["hash"] == hashlib.md5(b"abc").hexdigest() and listing[0]["bytes"] == 3
    conn.delete_object("conn-test", "x")
    conn.delete_container("conn-test")


def test_account_and_container_answers_say_accept_ranges(cluster):
    """python-swiftclient's own functional tests check Accept-Ranges on account and container
    HEAD and GET, as Swift sends it; `swift stat` prints it."""
    conn = cluster.connection()
    conn.put_container("ranges")
    conn.put_object("ranges", "o", b"x")
    for headers in (conn.head_account(), conn.get_account()[0],
                    conn.head_container("ranges"), conn.get_container("ranges")[0]):
        assert headers.get("accept-ranges") == "bytes", headers
    # A fresh account (auto-created on first write) answers the same before it exists.
    fresh = cluster.connection("test2:tester2", "testing2")
    assert fresh.head_account().get("accept-ranges") == "bytes"
    assert "Accept-Ranges: bytes" in swift(cluster, "stat", "ranges")
    assert "Accept-Ranges: bytes" in swift(cluster, "stat")
