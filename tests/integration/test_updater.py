"""The updater replays saved container updates against a real container server (loopback)."""

from __future__ import annotations

import json
import os

import aiohttp
import pytest

from swiftlite.common.async_pending import iter_updates, save_update
from swiftlite.common.runtime.daemon import read_status, run_loop
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.server import create_app as container_app
from swiftlite.obj.server import create_app as object_app
from swiftlite.obj.updater import Updater
from tests.helpers import async_wait_for
from tests.integration.replication_support import Node


@pytest.fixture
async def pair(tmp_path):
    root = str(tmp_path)
    obj = Node(root, "obj", "object", ["d1"])
    cont = Node(root, "cont", "container", ["d1"])
    for n in (obj, cont):
        n.write_conf(root, {"object-updater": {"retry_min": 30}})
    await obj.start(object_app)
    yield obj, cont
    await obj.stop()
    await cont.stop()


async def put_objects(s, obj, cont, names):
    for name in names:
        h = {"X-Timestamp": Timestamp.now().internal, "Content-Type": "x/y",
             "X-Container-Host": f"127.0.0.1:{cont.port}", "X-Container-Device": "d1",
             "X-Container-Partition": "0"}
        async with s.put(f"http://127.0.0.1:{obj.port}/d1/0/a/c/{name}", data=b"abc",
                         headers=h) as r:
            assert r.status == 201


def saved(node):
    return list(iter_updates(node.dev_path()))


async def once(node):
    conf = node.section("object-updater")
    up = Updater(conf)
    up.once = True
    await run_loop(conf, "object-updater", up.run_pass, True, up.setup, up.teardown)
    return read_status(conf, "object-updater")


async def listing(s, cont):
    async with s.get(f"http://127.0.0.1:{cont.port}/d1/0/a/c?format=json") as r:
        assert r.status == 200
        return ([o["name"] for o in json.loads(await r.read())],
                int(r.headers["X-Container-Object-Count"]),
                int(r.headers["X-Container-Bytes-Used"]))


async def test_updates_land_once_the_container_is_back(pair):
    obj, cont = pair
    names = [f"o{i}" for i in range(6)]
    async with aiohttp.ClientSession() as s:
        await put_objects(s, obj, cont, names)  # container server down: saved for later
        await async_wait_for(lambda: len(saved(obj)) == 6, 10, what="6 async_pending files")
        st = await once(obj)
        assert st["failures"] == 6 and st["synced"] == 0 and len(saved(obj)) == 6
        await cont.start(container_app)
        st = await once(obj)  # up, but the container DB is not there yet: 404, kept
        assert st["failures"] == 6 and st["dropped"] == 0 and len(saved(obj)) == 6
        async with s.put(f"http://127.0.0.1:{cont.port}/d1/0/a/c",
                         headers={"X-Timestamp": Timestamp.now().internal}) as r:
            assert r.status == 201
        st = await once(obj)
        assert st["synced"] == 6 and st["failures"] == 0
        assert saved(obj) == []
        assert await listing(s, cont) == (names, 6, 18)


async def test_backoff_defers_failed_records_in_continuous_mode(pair):
    obj, cont = pair
    async with aiohttp.ClientSession() as s:
        await put_objects(s, obj, cont, ["x", "y"])
        await async_wait_for(lambda: len(saved(obj)) == 2, 10, what="2 async_pending files")
    up = Updater(obj.section("object-updater"))
    await up.setup()
    try:
        first = {"objects": 0, "synced": 0, "failures": 0}
        await up.run_pass(first)
        assert first["failures"] == 2
        second = {"objects": 0, "synced": 0, "failures": 0}
        await up.run_pass(second)
        assert second["deferred"] == 2 and second["objects"] == 0
        assert all(delay == 30 for _, delay in up.backoff.values())
    finally:
        await up.teardown()


async def test_records_past_reclaim_age_are_dropped(pair):
    obj, cont = pair
    old = Timestamp.parse(1000000000).internal
    save_update(obj.dev_path(), {"method": "PUT", "path": "/a/c/old", "headers": {
        "X-Timestamp": old}, "body": None, "timestamp": old, "targets": [
        {"ip": "127.0.0.1", "port": cont.port, "device": "d1", "partition": 0}]})
    st = await once(obj)
    assert st["dropped"] == 1 and saved(obj) == []
    assert os.path.isdir(obj.dev_path())
