"""Container and account DB replication between real servers on loopback (in-process)."""

from __future__ import annotations

import json
import os

import aiohttp
import pytest

from swiftlite.account.broker import AccountBroker
from swiftlite.account.server import create_app as account_app
from swiftlite.common.runtime.daemon import read_status, run_loop
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.server import create_app as container_app
from swiftlite.db.replicator import DBReplicator
from tests.integration.replication_support import Node, write_test_ring


async def start_nodes(tmp_path, kind, factory):
    root = str(tmp_path)
    ns = [Node(root, f"n{i}", kind, [f"d{i}"]) for i in range(4)]
    write_test_ring(os.path.join(root, f"{kind}.ring.gz"), ns, [[0, 0], [1, 1], [2, 2]], 1)
    for n in ns:
        n.write_conf(root, {f"{kind}-replicator": {"reclaim_age": 3600, "per_diff": 7}})
        await n.start(factory)
    return ns


@pytest.fixture
async def cnodes(tmp_path):
    ns = await start_nodes(tmp_path, "container", container_app)
    yield ns
    for n in ns:
        await n.stop()


@pytest.fixture
async def anodes(tmp_path):
    ns = await start_nodes(tmp_path, "account", account_app)
    yield ns
    for n in ns:
        await n.stop()


async def run_pass(node, kind):
    conf = node.section(f"{kind}-replicator")
    rep = DBReplicator(conf, {"container": ContainerBroker, "account": AccountBroker}[kind])
    await run_loop(conf, rep.name, rep.run_pass, True, rep.setup, rep.teardown)
    return read_status(conf, rep.name)


def url(node, *names):
    return f"http://127.0.0.1:{node.port}/{node.devices[0]}/0/" + "/".join(names)


async def put_rows(s, node, names, deleted=False):
    for name in names:
        h = {"X-Timestamp": Timestamp.now().internal}
        if not deleted:
            h.update({"X-Size": "3", "X-Content-Type": "x/y", "X-Etag": "e"})
        method = s.delete if deleted else s.put
        async with method(url(node, "a", "c", name), headers=h) as r:
            assert r.status in (201, 204), await r.text()


async def listing(s, node):
    async with s.get(url(node, "a", "c") + "?format=json") as r:
        if r.status != 200:
            return r.status, None, None
        return 200, [o["name"] for o in json.loads(await r.read())], \
            int(r.headers["X-Container-Object-Count"])


async def test_container_rows_replicate_both_ways(cnodes):
    n0, n1, n2, _ = cnodes
    async with aiohttp.ClientSession() as s:
        async with s.put(url(n0, "a", "c"), headers={"X-Timestamp": Timestamp.now().internal,
                                                      "X-Container-Meta-Color": "blue"}) as r:
            assert r.status == 201
        names = [f"o{i:02d}" for i in range(20)]
        await put_rows(s, n0, names)
        st = await run_pass(n0, "container")
        assert st["failures"] == 0 and st["created"] == 2 and st["synced"] == 40
        for n in (n1, n2):
            assert await listing(s, n) == (200, names, 20)
            async with s.head(url(n, "a", "c")) as r:
                assert r.headers["X-Container-Meta-Color"] == "blue"
        # Changes on another replica flow back, newest wins. n1 never pushed before, so its
        # first push sends all its 21 rows (merging them changes nothing but the 3 new ones).
        await put_rows(s, n1, ["o00", "o01"], deleted=True)
        await put_rows(s, n1, ["new"])
        st = await run_pass(n1, "container")
        assert st["failures"] == 0 and st["synced"] == 42
        expect = sorted([*names[2:], "new"])
        for n in (n0, n2):
            assert await listing(s, n) == (200, expect, 19)
        # From then on the sync points mean only rows changed since travel.
        st = await run_pass(n1, "container")
        assert st["synced"] == 0
        await put_rows(s, n1, ["newer"])
        st = await run_pass(n1, "container")
        assert st["synced"] == 2
        assert (await listing(s, n2))[2] == 20


async def test_container_handoff_reverted_and_removed(cnodes):
    n0, n1, n2, n3 = cnodes
    async with aiohttp.ClientSession() as s:
        async with s.put(url(n3, "a", "c"), headers={"X-Timestamp": Timestamp.now().internal}):
            pass
        await put_rows(s, n3, ["x", "y"])
        st = await run_pass(n3, "container")
        assert st["handoff_removed"] == 1 and st["failures"] == 0
        for n in (n0, n1, n2):
            assert await listing(s, n) == (200, ["x", "y"], 2)
        assert not any(f.endswith(".db") for _, _, fs in os.walk(n3.dev_path()) for f in fs)


async def test_container_delete_timestamp_replicates(cnodes):
    n0, n1, n2, _ = cnodes
    async with aiohttp.ClientSession() as s:
        async with s.put(url(n0, "a", "c"), headers={"X-Timestamp": Timestamp.now().internal}):
            pass
        await run_pass(n0, "container")
        async with s.delete(url(n1, "a", "c"),
                            headers={"X-Timestamp": Timestamp.now().internal}) as r:
            assert r.status == 204
        await run_pass(n1, "container")
        for n in (n0, n2):
            assert (await listing(s, n))[0] == 404


async def test_account_rows_replicate(anodes):
    n0, n1, n2, _ = anodes
    async with aiohttp.ClientSession() as s:
        async with s.put(url(n0, "a"), headers={"X-Timestamp": Timestamp.now().internal}) as r:
            assert r.status == 201
        for c in ("c1", "c2"):
            ts = Timestamp.now().internal
            async with s.put(url(n0, "a", c), headers={
                    "X-Put-Timestamp": ts, "X-Delete-Timestamp": "0", "X-Timestamp": ts,
                    "X-Object-Count": "4", "X-Bytes-Used": "40"}) as r:
                assert r.status == 201
        st = await run_pass(n0, "account")
        assert st["failures"] == 0 and st["synced"] == 4
        for n in (n1, n2):
            async with s.get(url(n, "a") + "?format=json") as r:
                assert r.status == 200
                assert [c["name"] for c in json.loads(await r.read())] == ["c1", "c2"]
                assert r.headers["X-Account-Object-Count"] == "8"
