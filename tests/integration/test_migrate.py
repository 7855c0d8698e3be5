"""swiftlite-migrate end to end: crash it, interrupt it, resume, and check every object.

Runs against the all-in-one cluster (tests/conftest.py `cluster`), with its object ring. Set
SWIFTLITE_TEST_EXTERNAL_AUTH=http://127.0.0.1:16080/auth/v1.0 to aim it at another Swift
endpoint (user test:tester, key testing) instead; the ring is then not used (path order).
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import uuid

import pytest
import swiftclient

from tests.helpers import wait_for

NFILES = 2000
USER, KEY = "test:tester", "testing"
SUMMARY = re.compile(r"summary: (\w+): uploaded (\d+) objects, (\d+) bytes .* skipped (\d+) "
                     r"already done; failures (\d+)")


@pytest.fixture(scope="module")
def target(request):
    """(auth_url, ring path or None)."""
    ext = os.environ.get("SWIFTLITE_TEST_EXTERNAL_AUTH")
    if ext:
        return ext, None
    cluster = request.getfixturevalue("cluster")
    return cluster.auth_url, os.path.join(cluster.etc_dir, "object.ring.gz")


def make_tree(root: str, n: int) -> dict[str, str]:
    """n small files in nested dirs; returns {object name: md5}."""
    rng = random.Random(42)
    out = {}
    for i in range(n):
        d = os.path.join(root, f"album{i % 23}", f"day {i % 7}")
        os.makedirs(d, exist_ok=True)
        fname = f"img{i:05d}.jpg" if i % 100 else f"bild-ü-{i}.jpg"  # some non-ASCII names
        body = rng.randbytes(rng.randint(1, 400))
        with open(os.path.join(d, fname), "wb") as f:
            f.write(body)
        out[os.path.relpath(os.path.join(d, fname), root)] = hashlib.md5(body).hexdigest()
    return out


def migrate_cmd(src, auth_url, container, state, ring, *extra) -> list[str]:
    cmd = [sys.executable, "-m", "swiftlite.migrate.cli", src, "--url", auth_url, "--user",
           USER, "--key", KEY, "--container", container, "--state", state, "--concurrency",
           "16", *extra]
    if ring:
        cmd += ["--ring", ring]
    return cmd


def state_records(path: str) -> int:
    """Complete record lines in the state file (the header line excluded)."""
    try:
        with open(path, "rb") as f:
            return max(f.read().count(b"\n") - 1, 0)
    except FileNotFoundError:
        return 0


def start(cmd, log_dir, tag) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(os.path.join(log_dir, f"{tag}.out"), "wb"),
                            stderr=open(os.path.join(log_dir, f"{tag}.err"), "wb"))


def read(log_dir, tag, stream="out") -> str:
    with open(os.path.join(log_dir, f"{tag}.{stream}"), encoding="utf-8") as f:
        return f.read()


def test_migrate_crash_interrupt_resume(target, tmp_path):
    auth_url, ring = target
    src = str(tmp_path / "src")
    expected = make_tree(src, NFILES)
    state = str(tmp_path / "migrate.state")
    container = f"migrate-{uuid.uuid4().hex[:8]}"
    cmd = migrate_cmd(src, auth_url, container, state, ring)
    logs = str(tmp_path)

    # 1. a crash (SIGKILL) once part of the tree is acknowledged
    p = start(cmd, logs, "run1")
    wait_for(lambda: p.poll() is not None or state_records(state) >= 300, 120,
             what="first run to record 300 objects")
    p.kill()
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL, read(logs, "run1", "err")
    after_crash = state_records(state)
    assert 300 <= after_crash < NFILES

    # 2. a Ctrl-C: finishes in-flight uploads, writes the state, exits 130
    p = start(cmd, logs, "run2")
    wait_for(lambda: p.poll() is not None or state_records(state) >= after_crash + 300, 120,
             what="second run to record 300 more objects")
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=60) == 130, read(logs, "run2", "err")
    m = SUMMARY.search(read(logs, "run2"))
    assert m and m.group(1) == "interrupted"
    assert int(m.group(4)) >= after_crash  # the crashed run's records were honoured
    after_int = state_records(state)
    assert after_int < NFILES

    # 3. resume to the end: nothing acknowledged is uploaded again
    p = start(cmd, logs, "run3")
    assert p.wait(timeout=180) == 0, read(logs, "run3", "err")
    m = SUMMARY.search(read(logs, "run3"))
    assert m and m.group(1) == "done", read(logs, "run3")
    uploaded, skipped, failures = int(m.group(2)), int(m.group(4)), int(m.group(5))
    assert failures == 0
    assert skipped >= after_int > 0  # SIGINT flushed every acknowledged record
    assert uploaded + skipped == NFILES
    assert "resuming from" in read(logs, "run3", "err")

    # every file is there exactly once with the right ETag
    conn = swiftclient.Connection(auth_url, USER, KEY, retries=2, timeout=30)
    _, listing = conn.get_container(container, full_listing=True)
    names = [o["name"] for o in listing]
    assert len(names) == len(set(names)) == NFILES
    assert {o["name"]: o["hash"] for o in listing} == expected
    for name in random.Random(1).sample(sorted(expected), 50):
        assert conn.head_object(container, name)["etag"].strip('"') == expected[name]
    name = sorted(expected)[0]
    _, body = conn.get_object(container, name)
    assert hashlib.md5(body).hexdigest() == expected[name]

    # a fourth run finds nothing to do
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    m = SUMMARY.search(out.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(4)) == NFILES


def test_migrate_reports_bad_files_and_uses_prefix(target, tmp_path):
    auth_url, ring = target
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.png").write_bytes(b"a" * 10)
    (src / "sub" / "b.png").write_bytes(b"b" * 20)
    (src / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(src / "pipe")
    container = f"migrate-{uuid.uuid4().hex[:8]}"
    cmd = migrate_cmd(str(src), auth_url, container, str(tmp_path / "st"), ring,
                      "--prefix", "imported/")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    failed = sorted(line.split(":")[0].rsplit("/", 1)[-1] for line in out.stdout.splitlines()
                    if line.startswith("FAILED "))
    assert failed == ["dangling", "pipe"]
    m = SUMMARY.search(out.stdout)
    assert m and int(m.group(2)) == 2 and int(m.group(5)) == 2
    conn = swiftclient.Connection(auth_url, USER, KEY, retries=2, timeout=30)
    _, listing = conn.get_container(container, full_listing=True)
    assert {o["name"]: o["bytes"] for o in listing} == {"imported/a.png": 10,
                                                        "imported/sub/b.png": 20}


def test_migrate_manifest_in_ring_order(target, tmp_path):
    auth_url, ring = target
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"f{i}.jpg").write_bytes(str(i).encode())
    manifest = tmp_path / "list.txt"
    manifest.write_text("".join(f"f{i}.jpg\n" for i in range(0, 30, 2)))
    container = f"migrate-{uuid.uuid4().hex[:8]}"
    cmd = migrate_cmd(str(src), auth_url, container, str(tmp_path / "st"), ring,
                      "--manifest", str(manifest), "--order", "partition")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("path order" in out.stderr) == (ring is None)  # the no-ring fallback warns
    conn = swiftclient.Connection(auth_url, USER, KEY, retries=2, timeout=30)
    _, listing = conn.get_container(container, full_listing=True)
    assert sorted(o["name"] for o in listing) == sorted(f"f{i}.jpg" for i in range(0, 30, 2))
    if ring:
        assert_placed_as_ring_says(ring, conn.get_auth()[0].rsplit("/", 1)[-1], container,
                                   [o["name"] for o in listing])


def assert_placed_as_ring_says(ring_path, account, container, names):
    """The tool's partitions (ring + [hash] affixes beside it) are where the cluster stored
    the objects: <root>/<node>/<dev>/objects/<part>/<suffix>/<hash> on each primary device."""
    from swiftlite.common import hashing
    from swiftlite.migrate.ordering import load_ring

    saved = (hashing._PREFIX.decode(), hashing._SUFFIX.decode())
    try:
        ring = load_ring(ring_path)
        root = os.path.dirname(os.path.dirname(ring_path))
        for name in names:
            part, nodes = ring.get_nodes(account, container, name)
            h = hashing.hash_path(account, container, name)
            found = glob.glob(os.path.join(root, "*", "*", "objects", str(part), h[-3:], h))
            devs = sorted(os.path.basename(f.split(os.sep + "objects" + os.sep)[0])
                          for f in found)
            assert devs == sorted(n["device"] for n in nodes), (name, part, found)
    finally:
        hashing.set_hash_path_affixes(*saved)  # process-global: leave them as found
