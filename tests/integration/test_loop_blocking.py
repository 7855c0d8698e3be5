"""No server stats, opens or reads a device or ring file on its event loop (issue 16, item 12).

Real servers run in this process (object, container, account on loopback; a proxy in front
of a real `swiftlite up` cluster), so the file-system calls they make can be watched: every
`os.stat`, `os.lstat`, `os.open`, `os.listdir`, `os.scandir` and `open` of a path under the
watched roots is recorded with whether it ran on a thread that runs an event loop. Device
checks (`isdir`, or `ismount` with mount_check), a device's first use (its filesystem's flush
handle) and ring reloads (stat, read, gunzip) must all happen in the thread pool.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import time
from array import array
from typing import Any

import aiohttp
import msgpack
import pytest
from aiohttp import web, web_protocol, web_response

from swiftlite.common import hashing
from swiftlite.common.config import Section, load_sections
from swiftlite.common.hashing import hash_path
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import durability
from swiftlite.ring import Ring, RingData, write_ring
from tests.helpers import async_wait_for, free_port


class FsWatch:
    """Records file-system calls on paths under `roots`: (call, path) on a loop thread or not."""

    CALLS = ("stat", "lstat", "open", "listdir", "scandir")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *roots: str) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots) + tuple(roots)
        self.on_loop: list[tuple[str, str]] = []
        self.off_loop: list[tuple[str, str]] = []
        for name in self.CALLS:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))
        monkeypatch.setattr(builtins, "open", self._wrap("builtins.open", builtins.open))

    def _wrap(self, name: str, fn: Any) -> Any:
        def watched(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            self._record(name, path)
            return fn(path, *args, **kwargs)
        return watched

    def _record(self, name: str, path: Any) -> None:
        if isinstance(path, int):
            return  # a file descriptor: no lookup
        p = os.fsdecode(os.fspath(path))
        if not p.startswith(self.roots):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.off_loop.append((name, p))
        else:
            self.on_loop.append((name, p))

    def clear(self) -> None:
        self.on_loop.clear()
        self.off_loop.clear()


def fake_mounts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """mount_check on temp dirs: a directory counts as mounted. The fake still stats the
    path (through the watched os.stat), as the real ismount lstats it."""
    probed: list[str] = []

    def ismount(path: Any) -> bool:
        probed.append(os.fspath(path))
        return os.path.isdir(path)

    monkeypatch.setattr(os.path, "ismount", ismount)
    return probed


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


def ts() -> str:
    return Timestamp.now().internal


def storage_conf(tmp_path, role: str, devices: list[str], mount_check: bool) -> Section:
    root = tmp_path / "devices"
    for d in devices:
        (root / d).mkdir(parents=True)
    conf = Section({"devices": str(root), "mount_check": str(mount_check), "fsync": "false",
                    "db_synchronous": "NORMAL", "status_dir": str(tmp_path / "run")})
    conf.name = f"{role}-server"
    return conf


@pytest.mark.parametrize("mount_check", [True, False])
async def test_object_server_touches_devices_only_in_the_thread_pool(tmp_path, monkeypatch,
                                                                     mount_check):
    from swiftlite.obj.server import create_app

    conf = storage_conf(tmp_path, "object", ["sda", "sdb", "sdc"], mount_check)
    probed = fake_mounts(monkeypatch)
    watch = FsWatch(monkeypatch, conf["devices"])
    runner, port = await serve(await create_app(conf))
    base = f"http://127.0.0.1:{port}"
    statuses: list[tuple[str, str, int]] = []
    try:
        async with aiohttp.ClientSession() as s:
            async def call(method: str, path: str, data: Any = None, **headers: str) -> bytes:
                async with s.request(method, base + path, data=data, headers=headers) as r:
                    statuses.append((method, path, r.status))
                    return await r.read()

            # Each device's first use: the mount check and its filesystem's flush handle.
            await call("PUT", "/sda/1/a/c/o", b"small", **{"X-Timestamp": ts()})
            await call("PUT", "/sdb/1/a/c/o", b"x" * 300_000, **{"X-Timestamp": ts()})
            await call("PUT", "/sdc/2/a/c/g", b"grouped", **{
                "X-Timestamp": ts(), "X-Backend-Also-Devices": "sda,sdb"})
            assert await call("GET", "/sda/1/a/c/o") == b"small"
            await call("POST", "/sda/1/a/c/o", **{"X-Timestamp": ts()})
            await call("DELETE", "/sdb/1/a/c/o", **{"X-Timestamp": ts()})
            # The replicator's routes (digests is Swift's REPLICATE).
            suffix = hash_path("a", "c", "o")[-3:]
            await call("MERGE", "/sda/1/digests")
            await call("MERGE", f"/sda/1/digests/{suffix}")
            await call("MERGE", "/sdc/2/states", msgpack.packb([suffix]))
            await call("MERGE", "/sdc/2/sync", b"")
            await call("GET", "/sdz/1/a/c/o")  # no such device
    finally:
        await runner.cleanup()
    assert watch.on_loop == [], "file-system calls on the event loop"
    assert [st for *_, st in statuses] == [201] * 3 + [200, 202, 204] + [200] * 4 + [507], \
        statuses
    devices = {os.path.join(conf["devices"], d) for d in ("sda", "sdb", "sdc", "sdz")}
    assert devices <= set(probed) if mount_check else not probed  # in the pool
    for d in ("sda", "sdb", "sdc"):  # first used (stat, open of the filesystem): in the pool
        assert durability.SYNCERS.known(os.path.join(conf["devices"], d)) is not None


@pytest.mark.parametrize("mount_check", [True, False])
async def test_db_servers_touch_devices_only_in_the_thread_pool(tmp_path, monkeypatch,
                                                                mount_check):
    from swiftlite.account.server import create_app as account_app
    from swiftlite.container.server import create_app as container_app

    aconf = storage_conf(tmp_path / "a", "account", ["sda"], mount_check)
    cconf = storage_conf(tmp_path / "c", "container", ["sda", "sdb"], mount_check)
    probed = fake_mounts(monkeypatch)
    watch = FsWatch(monkeypatch, str(tmp_path))
    arunner, aport = await serve(account_app(aconf))
    crunner, cport = await serve(container_app(cconf))
    try:
        async with aiohttp.ClientSession() as s:
            async def call(port: int, method: str, path: str, data: Any = None,
                           **headers: str) -> bytes:
                url = f"http://127.0.0.1:{port}{path}"
                async with s.request(method, url, data=data, headers=headers) as r:
                    assert r.status < 300, (method, path, r.status, await r.text())
                    return await r.read()

            await call(aport, "PUT", "/sda/0/a", **{"X-Timestamp": ts()})
            await call(cport, "PUT", "/sdb/0/a/c", **{"X-Timestamp": ts()})
            await call(cport, "PUT", "/sdb/0/a/c/o", **{
                "X-Timestamp": ts(), "X-Size": "1", "X-Content-Type": "x/y", "X-Etag": "e"})
            assert await call(cport, "GET", "/sdb/0/a/c") == b"o\n"
            await call(aport, "HEAD", "/sda/0/a")
            # The DB replicator's route, on a device not used before.
            h = hash_path("a", "c")
            got = msgpack.unpackb(await call(cport, "MERGE", f"/sda/0/{h}", msgpack.packb(
                {"op": "sync", "id": "x", "info": {}})))
            assert got == {"exists": False}
    finally:
        await crunner.cleanup()
        await arunner.cleanup()
    assert watch.on_loop == [], "file-system calls on the event loop"
    devices = {os.path.join(cconf["devices"], d) for d in ("sda", "sdb")}
    assert devices <= set(probed) if mount_check else not probed  # in the pool


# ---- the ring --------------------------------------------------------------------------------

def ring_data(nodes: int, seed: int, part_power: int = 10) -> RingData:
    """A ring whose every partition's replicas are (seed + p) % nodes, (+1), (+2)."""
    devs: list[dict[str, Any] | None] = [
        {"id": i, "region": 1, "zone": i, "ip": "127.0.0.1", "port": 6000 + i,
         "device": f"d{i}", "weight": 1.0} for i in range(nodes)]
    parts = 1 << part_power
    tables = [array("H", ((seed + p + r) % nodes for p in range(parts))) for r in range(3)]
    return RingData(part_power, 3, devs, tables)


async def test_ring_reload_happens_in_the_thread_pool(tmp_path, monkeypatch):
    path = str(tmp_path / "object.ring.gz")
    write_ring(path, ring_data(8, seed=0))
    ring = Ring(path, reload_interval=0)  # due at every lookup
    parts = range(0, 1 << 10, 37)

    def ids() -> list[tuple[int, ...]]:
        return [tuple(n["id"] for n in ring.get_part_nodes(p)) for p in parts]

    old = ids()
    watch = FsWatch(monkeypatch, str(tmp_path))
    write_ring(path, ring_data(8, seed=3))
    watch.clear()  # that was the test writing it
    seen = []

    def lookups() -> bool:
        got = ids()  # every lookup checks; none waits for the reload
        seen.append(got)
        return got != old

    await async_wait_for(lookups, 10, interval=0.001, what="the new ring")
    assert watch.on_loop == [], "the ring file was read on the event loop"
    assert ("open", path) in [(c.split(".")[-1], p) for c, p in watch.off_loop]
    # Each lookup saw one whole ring, the old one or the new one, never a mix.
    new = [tuple((3 + p + r) % 8 for r in range(3)) for p in parts]
    assert all(got in (old, new) for got in seen) and seen[-1] == new

    # A daemon's explicit refresh before a pass: also in the pool, and what it returns to
    # is the ring now on disk (or a check started by a lookup already swapped it in).
    write_ring(path, ring_data(8, seed=5))
    watch.clear()
    await ring.refresh()
    assert watch.on_loop == [] and watch.off_loop
    ring.reload_interval = 3600  # no more checks: what is loaded now is what refresh left
    assert ids() == [tuple((5 + p + r) % 8 for r in range(3)) for p in parts]


@pytest.fixture
def isolated_proxy_process_state(monkeypatch):
    """The proxy app patches aiohttp's request parser and 204 framing for its process, and
    its config sets the process-wide hash path affixes: put them back after the test."""
    monkeypatch.setattr(web_protocol, "HttpRequestParser", web_protocol.HttpRequestParser)
    monkeypatch.setattr(web_response, "should_remove_content_length",
                        web_response.should_remove_content_length)
    saved = hashing._PREFIX, hashing._SUFFIX
    yield
    hashing._PREFIX, hashing._SUFFIX = saved


async def test_proxy_requests_never_read_the_ring_file(cluster, monkeypatch,
                                                       isolated_proxy_process_state):
    """A proxy (in this process, in front of a real cluster) with ring_reload_interval = 0:
    requests go on while a new ring file is loaded, and none of them reads it."""
    from swiftlite.proxy.server import create_app

    conf = load_sections(os.path.join(cluster.etc_dir, "proxy.conf"))["proxy-server"]
    conf["ring_reload_interval"] = "0"
    app = create_app(conf)
    runner, port = await serve(app)
    base = f"http://127.0.0.1:{port}"
    ring_path = os.path.join(cluster.etc_dir, "object.ring.gz")
    watch = FsWatch(monkeypatch, cluster.etc_dir)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/auth/v1.0", headers={
                    "X-Auth-User": cluster.user, "X-Auth-Key": cluster.key}) as r:
                assert r.status == 200
                token = r.headers["X-Auth-Token"]
            t = {"X-Auth-Token": token}
            c = f"{base}/v1/AUTH_test/loop-{os.getpid()}-{time.monotonic_ns()}"
            async with s.put(c, headers=t) as r:
                assert r.status in (201, 202), await r.text()
            with open(ring_path, "rb") as f:  # same placement, a new file (a new inode)
                write_ring(ring_path, RingData.from_bytes(f.read()))
            watch.clear()
            n = 0

            async def request_until_read() -> bool:
                nonlocal n
                n += 1
                async with s.put(f"{c}/o{n}", data=b"x" * n, headers=t) as r:
                    assert r.status == 201, await r.text()
                async with s.get(f"{c}/o{n}", headers=t) as r:
                    assert r.status == 200 and await r.read() == b"x" * n
                return any(p == ring_path for _, p in watch.on_loop + watch.off_loop)

            await async_wait_for(request_until_read, 20, interval=0,
                                 what="the proxy to read the new object ring")
    finally:
        await runner.cleanup()
    assert watch.on_loop == [], "a proxy request read the ring file on the event loop"
    assert any(p == ring_path for _, p in watch.off_loop)
