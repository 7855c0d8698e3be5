"""The daemon loop, pacing and status files."""

from __future__ import annotations

import asyncio
import json
import os
import time

from swiftlite.common.config import Section
from swiftlite.common.runtime.daemon import Pacer, read_status, run_loop, server_address, status_dir
from swiftlite.ring import Ring
from tests.integration.replication_support import Node, write_test_ring


def test_pacer_limits_objects_and_bytes():
    p = Pacer(objects_per_second=100, bytes_per_second=1000, burst_seconds=0.1)
    assert p.delay_for(10, 0) == 0  # the burst
    assert 0.09 < p.delay_for(10, 0) < 0.11  # 10 more objects at 100/s
    q = Pacer(bytes_per_second=1000, burst_seconds=0.1)
    assert 0.89 < q.delay_for(1, 1000) < 0.91  # 900 bytes over the burst at 1000 B/s
    assert Pacer().delay_for(10**6, 10**12) == 0  # unlimited


async def test_pacer_pace_really_waits():
    p = Pacer(objects_per_second=50, burst_seconds=0.02)
    t0 = time.monotonic()
    for _ in range(6):
        await p.pace()
    assert time.monotonic() - t0 >= 0.08  # 5 objects past the 1-object burst at 50/s


def test_status_dir_default_and_override(tmp_path):
    assert status_dir(Section(devices=str(tmp_path / "node1"))) == str(tmp_path / "run")
    assert status_dir(Section(devices="/x", status_dir=str(tmp_path / "s"))) == str(
        tmp_path / "s")


async def test_once_runs_one_pass_and_writes_status(tmp_path):
    conf = Section(devices=str(tmp_path / "devs"), status_dir=str(tmp_path / "run"))
    calls = []

    async def one_pass(stats):
        calls.append(1)
        stats["partitions"] += 3
        stats["synced"] += 2

    assert await run_loop(conf, "test-daemon", one_pass, once=True) == 0
    assert calls == [1]
    st = read_status(conf, "test-daemon")
    assert st["partitions"] == 3 and st["synced"] == 2 and st["failures"] == 0
    assert st["daemon"] == "test-daemon" and st["duration"] >= 0 and st["start"] > 0
    with open(os.path.join(tmp_path, "run", "test-daemon.json")) as f:
        assert json.load(f) == st


async def test_failed_pass_recorded_and_once_exits_nonzero(tmp_path):
    conf = Section(devices=str(tmp_path), status_dir=str(tmp_path / "run"))

    async def boom(stats):
        raise RuntimeError("disk on fire")

    assert await run_loop(conf, "d", boom, once=True) == 1
    assert read_status(conf, "d")["failures"] == 1


async def test_continuous_mode_repeats_every_interval(tmp_path):
    conf = Section(devices=str(tmp_path), status_dir=str(tmp_path / "run"), interval="0.01")
    calls = []

    async def one_pass(stats):
        calls.append(1)

    task = asyncio.ensure_future(run_loop(conf, "d", one_pass, once=False))
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    task.cancel()
    assert len(calls) >= 3


def test_local_devices_match_server_bind_port(tmp_path):
    root = str(tmp_path)
    nodes = [Node(root, f"n{i}", "object", [f"d{i}"]) for i in range(3)]
    write_test_ring(os.path.join(root, "object.ring.gz"), nodes, [[0], [1], [2]], 0)
    for n in nodes:
        n.write_conf(root, {"object-replicator": {}})
    ring = Ring(os.path.join(root, "object.ring.gz"))
    conf = nodes[1].section("object-replicator")
    assert [d["device"] for d in ring.devices_on(*server_address(conf, "object"))] == ["d1"]
    # A server bound to every address serves the ring's devices on its port.
    assert [d["device"] for d in ring.devices_on("0.0.0.0", nodes[2].port)] == ["d2"]
