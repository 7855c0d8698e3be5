"""Object replication between real object servers on loopback (in-process), one pass at a time."""

from __future__ import annotations

import hashlib
import os
import shutil
import time

import aiohttp
import pytest

from swiftlite.common.hashing import hash_path
from swiftlite.common.runtime.daemon import read_status, run_loop
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import digests, fileformat, reading
from swiftlite.obj.replicator import ObjectReplicator
from swiftlite.obj.server import create_app as object_app
from tests.integration.replication_support import Node, write_test_ring

PART_POWER = 1  # two partitions; both on nodes 0,1,2; node 3 is a handoff


@pytest.fixture
async def nodes(tmp_path):
    root = str(tmp_path)
    ns = [Node(root, f"n{i}", "object", [f"d{i}"]) for i in range(4)]
    write_test_ring(os.path.join(root, "object.ring.gz"), ns,
                    [[0, 0], [1, 1], [2, 2]], PART_POWER)
    for n in ns:
        n.write_conf(root, {"object-replicator": {"reclaim_age": 3600, "concurrency": 2}})
        await n.start(object_app)
    yield ns
    for n in ns:
        await n.stop()


async def put(session, node, name, body, ts=None, part=None):
    ts = ts or Timestamp.now().internal
    part = 0 if part is None else part
    url = f"http://127.0.0.1:{node.port}/{node.devices[0]}/{part}/a/c/{name}"
    async with session.put(url, data=body, headers={"X-Timestamp": ts,
                                                     "Content-Type": "x/y"}) as r:
        assert r.status == 201, await r.text()
    return ts


async def request(session, method, node, name, ts=None, part=0, headers=None):
    url = f"http://127.0.0.1:{node.port}/{node.devices[0]}/{part}/a/c/{name}"
    h = {"X-Timestamp": ts or Timestamp.now().internal, **(headers or {})}
    async with session.request(method, url, headers=h) as r:
        return r.status, await r.read()


async def run_pass(node):
    """One `--once` pass through the daemon loop; returns the status file it wrote."""
    conf = node.section("object-replicator")
    rep = ObjectReplicator(conf)
    await run_loop(conf, "object-replicator", rep.run_pass, True, rep.setup, rep.teardown)
    return read_status(conf, "object-replicator")


def state(node, name, part=0):
    h = hash_path("a", "c", name)
    return fileformat.state_of(os.listdir(fileformat.hash_dir(node.dev_path(), part, h))) \
        if os.path.isdir(fileformat.hash_dir(node.dev_path(), part, h)) else ""


async def test_push_to_peers_then_digests_match(nodes):
    n0, n1, n2, _ = nodes
    async with aiohttp.ClientSession() as s:
        bodies = {f"o{i}": os.urandom(100 + i) for i in range(30)}
        for name, body in bodies.items():
            await put(s, n0, name, body)
        stats = await run_pass(n0)
        assert stats["failures"] == 0
        assert stats["synced"] == 60  # 30 objects to each of two peers
        for n in (n1, n2):
            for name, body in bodies.items():
                st, got = await request(s, "GET", n, name)
                assert st == 200 and got == body
            assert digests.get_digests(n.dev_path(), 0) == digests.get_digests(n0.dev_path(), 0)
        # Nothing to do on a second pass: digests match, no suffix listed, nothing sent.
        again = await run_pass(n0)
        assert again["synced"] == 0 and again["objects"] == 0 and again["suffixes_synced"] == 0
        assert again["partitions"] == 1 and again["duration"] >= 0 and again["start"] > 0


async def test_delete_and_post_replicate_newest_wins(nodes):
    n0, n1, n2, _ = nodes
    async with aiohttp.ClientSession() as s:
        t1 = await put(s, n0, "gone", b"x" * 10)
        await put(s, n0, "meta", b"y" * 10)
        await run_pass(n0)
        assert state(n2, "gone") == f"{t1}.data"
        # n1 deletes one and POSTs the other; an old copy on n0 must not win back.
        t2 = Timestamp.now().internal
        st, _ = await request(s, "DELETE", n1, "gone", t2)
        assert st == 204
        t3 = Timestamp.now().internal
        st, _ = await request(s, "POST", n1, "meta", t3, headers={"X-Object-Meta-K": "v"})
        assert st == 202
        await run_pass(n0)  # n0 has nothing newer: sends nothing that undoes n1's writes
        assert state(n1, "gone") == f"{t2}.ts"
        await run_pass(n1)
        for n in (n0, n2):
            assert state(n, "gone") == f"{t2}.ts"
            st, _ = await request(s, "GET", n, "gone")
            assert st == 404
            assert state(n, "meta").endswith(f"|{t3}.meta")
            url = f"http://127.0.0.1:{n.port}/{n.devices[0]}/0/a/c/meta"
            async with s.head(url) as r:
                assert r.headers["X-Object-Meta-K"] == "v"


async def test_handoff_pushed_to_primaries_and_removed(nodes):
    n0, n1, n2, n3 = nodes
    async with aiohttp.ClientSession() as s:
        body = os.urandom(5000)
        await put(s, n3, "h1", body)  # n3 holds partition 0 without being assigned it
        await put(s, n1, "h2", b"primary only")
        stats = await run_pass(n3)
        assert stats["handoff_partitions"] == 1 and stats["handoff_removed"] == 1
        for n in (n0, n1, n2):
            st, got = await request(s, "GET", n, "h1")
            assert st == 200 and got == body
        assert not os.path.exists(os.path.join(n3.dev_path(), "objects", "0"))


async def test_handoff_kept_while_a_primary_is_down(nodes):
    n0, n1, n2, n3 = nodes
    async with aiohttp.ClientSession() as s:
        await put(s, n3, "h1", b"keep me")
        await n2.stop()
        stats = await run_pass(n3)
        assert stats["failures"] >= 1 and stats["handoff_removed"] == 0
        assert state(n3, "h1").endswith(".data")
        assert state(n0, "h1").endswith(".data")


async def test_old_tombstones_reclaimed_young_ones_replicated(nodes):
    n0, n1, n2, _ = nodes
    old = Timestamp.parse(time.time() - 7200).internal  # older than reclaim_age (1 h)
    async with aiohttp.ClientSession() as s:
        await request(s, "DELETE", n0, "old", old)
        await request(s, "DELETE", n0, "young")
        assert state(n0, "old").endswith(".ts")
        stats = await run_pass(n0)
        assert stats["reclaimed"] == 1
        assert state(n0, "old") == "" and state(n1, "old") == ""
        assert state(n1, "young").endswith(".ts") and state(n2, "young").endswith(".ts")


async def test_corrupt_source_is_not_spread(nodes):
    n0, n1, _, _ = nodes
    async with aiohttp.ClientSession() as s:
        body = b"A" * 4096
        await put(s, n0, "bad", body)
        path = reading.current_paths(n0.dev_path(), 0, hash_path("a", "c", "bad"))[0]
        with open(path, "r+b") as f:
            f.write(b"B")  # same size, body no longer matches its ETag
        stats = await run_pass(n0)
        assert stats["failures"] >= 1
        assert state(n1, "bad") == ""
        assert hashlib.md5(body).hexdigest()  # the good body is what a restore must bring


async def test_drifted_peer_digest_healed_without_resending(nodes):
    n0, n1, n2, _ = nodes
    async with aiohttp.ClientSession() as s:
        await put(s, n0, "drift", b"z" * 100)
        await run_pass(n0)
        await put(s, n0, "y", b"y" * 100)
        # n1 gets y's file as a crash would leave it: on disk, but never journaled.
        h = hash_path("a", "c", "y")
        shutil.copytree(fileformat.hash_dir(n0.dev_path(), 0, h),
                        fileformat.hash_dir(n1.dev_path(), 0, h))
        assert digests.get_digests(n1.dev_path(), 0) != digests.recompute(n1.dev_path(), 0)
        stats = await run_pass(n0)
        assert stats["failures"] == 0 and stats["synced"] == 1  # y to n2 only
        assert digests.get_digests(n1.dev_path(), 0) == digests.recompute(n1.dev_path(), 0) \
            == digests.get_digests(n0.dev_path(), 0)
