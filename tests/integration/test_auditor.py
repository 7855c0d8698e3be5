"""The auditor against a real object server's files: quarantine, digests, reclaim, drift."""

from __future__ import annotations

import os
import time

import aiohttp
import pytest

from swiftlite.common.hashing import hash_path
from swiftlite.common.runtime.daemon import read_status, run_loop
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.auditor import Auditor
from swiftlite.obj.engine import digests, fileformat, reading
from swiftlite.obj.server import create_app as object_app
from tests.integration.replication_support import Node


@pytest.fixture
async def node(tmp_path):
    n = Node(str(tmp_path), "obj", "object", ["d1"])
    n.write_conf(str(tmp_path), {"object-auditor": {
        "reclaim_age": 3600, "max_bytes_per_second": "100m", "max_files_per_second": 0}})
    await n.start(object_app)
    yield n
    await n.stop()


async def put(s, node, name, body, ts=None):
    async with s.put(f"http://127.0.0.1:{node.port}/d1/0/a/c/{name}", data=body,
                     headers={"X-Timestamp": ts or Timestamp.now().internal,
                              "Content-Type": "x/y"}) as r:
        assert r.status == 201


async def audit(node):
    conf = node.section("object-auditor")
    aud = Auditor(conf)
    await run_loop(conf, "object-auditor", aud.run_pass, True)
    return read_status(conf, "object-auditor")


def data_path(node, name):
    return reading.current_paths(node.dev_path(), 0, hash_path("a", "c", name))[0]


async def test_corrupt_body_and_trailer_quarantined_digest_updated(node):
    async with aiohttp.ClientSession() as s:
        for i in range(10):
            await put(s, node, f"o{i}", os.urandom(2000))
        with open(data_path(node, "o3"), "r+b") as f:
            f.write(b"\0\0\0")  # flipped body bytes
        p = data_path(node, "o7")
        os.truncate(p, os.path.getsize(p) - 3)  # torn trailer
        st = await audit(node)
        assert st["objects"] == 10 and st["quarantined"] == 2 and st["bytes"] >= 8 * 2000
        qdir = os.path.join(node.dev_path(), "quarantined", "objects")
        assert sorted(n.split("-")[0] for n in os.listdir(qdir)) == sorted(
            hash_path("a", "c", n) for n in ("o3", "o7"))
        # The incremental digests agree with a full listing: the replicator will notice.
        assert digests.get_digests(node.dev_path(), 0) == digests.recompute(node.dev_path(), 0)
        for name, want in (("o3", 404), ("o7", 404), ("o1", 200)):
            async with s.get(f"http://127.0.0.1:{node.port}/d1/0/a/c/{name}") as r:
                assert r.status == want
        again = await audit(node)
        assert again["quarantined"] == 0 and again["objects"] == 8


async def test_old_tombstones_reclaimed_and_drift_healed(node):
    async with aiohttp.ClientSession() as s:
        old = Timestamp.parse(time.time() - 7200).internal
        async with s.delete(f"http://127.0.0.1:{node.port}/d1/0/a/c/dead",
                            headers={"X-Timestamp": old}) as r:
            assert r.status == 404
        await put(s, node, "live", b"x")
        # A crash between a rename and its journal append: a file the digests do not know.
        h = hash_path("a", "c", "ghost")
        hdir = fileformat.hash_dir(node.dev_path(), 0, h)
        os.makedirs(hdir)
        ts = Timestamp.now().internal
        with open(os.path.join(hdir, f"{ts}.ts"), "wb") as f:
            f.write(fileformat.pack_trailer({"X-Timestamp": ts, "name": "/a/c/ghost"}))
        assert digests.get_digests(node.dev_path(), 0) != digests.recompute(node.dev_path(), 0)
        st = await audit(node)
        assert st["reclaimed"] == 1 and st["rehashed"] == 1
        assert not os.path.exists(fileformat.hash_dir(node.dev_path(), 0,
                                                      hash_path("a", "c", "dead")))
        assert digests.get_digests(node.dev_path(), 0) == digests.recompute(node.dev_path(), 0)


async def test_stale_digest_temp_files_removed_fresh_ones_kept(node):
    """A crash while creating a journal or replacing a digest file leaves a temp file in the
    partition dir; the auditor removes those older than an hour and leaves a live writer's."""
    async with aiohttp.ClientSession() as s:
        await put(s, node, "t0", b"x" * 100)
    part_dir = os.path.join(node.dev_path(), fileformat.OBJECTS, "0")
    old = time.time() - 7200
    for name in (".journal-99999-deadbeef", ".digests-crashed"):
        with open(os.path.join(part_dir, name), "wb") as f:
            f.write(b"left over")
        os.utime(os.path.join(part_dir, name), (old, old))
    with open(os.path.join(part_dir, ".digests-inflight"), "wb") as f:
        f.write(b"being written")
    before = digests.get_digests(node.dev_path(), 0)
    st = await audit(node)
    assert st["temp_removed"] == 2
    left = sorted(n for n in os.listdir(part_dir) if n.startswith("."))
    assert left == [".digests-inflight"]
    assert digests.JOURNAL in os.listdir(part_dir) or digests.DIGESTS in os.listdir(part_dir)
    assert digests.get_digests(node.dev_path(), 0) == before == digests.recompute(
        node.dev_path(), 0)


async def test_a_hint_that_lost_track_of_its_files_is_set_again(node):
    """Reads follow a hash dir's state hint. Where it names files that are not the current
    ones (here, a newer .data copied in by hand, as a restore might), a read serves the older
    object until the auditor's pass, which sets the hint to the files the dir holds; a dir
    with no hint (written before hints) gets one too."""
    async with aiohttp.ClientSession() as s:
        await put(s, node, "restored", b"old")
        await put(s, node, "unhinted", b"u")
        hexhash = hash_path("a", "c", "restored")
        hdir = fileformat.hash_dir(node.dev_path(), 0, hexhash)
        try:
            os.getxattr(hdir, fileformat.HINT_XATTR)
        except OSError:
            pytest.skip("no user xattrs on this filesystem")
        newer = Timestamp.now().internal
        blob = b"new" + fileformat.pack_trailer({
            "X-Timestamp": newer, "name": "/a/c/restored", "Content-Type": "x/y",
            "Content-Length": "3", "ETag": "22af645d1859cb5ca6da0c484f1f37ea"})
        with open(os.path.join(hdir, f"{newer}.data"), "wb") as f:
            f.write(blob)
        unhinted = fileformat.hash_dir(node.dev_path(), 0, hash_path("a", "c", "unhinted"))
        os.removexattr(unhinted, fileformat.HINT_XATTR)
        url = f"http://127.0.0.1:{node.port}/d1/0/a/c"
        async with s.get(f"{url}/restored") as r:
            assert await r.read() == b"old"
        st = await audit(node)
        assert st["hints"] == 2
        assert os.getxattr(hdir, fileformat.HINT_XATTR).decode() == f"{newer}.data"
        async with s.get(f"{url}/restored") as r:
            assert r.status == 200 and await r.read() == b"new"
        async with s.get(f"{url}/unhinted") as r:
            assert r.status == 200 and await r.read() == b"u"
        assert (await audit(node))["hints"] == 0
