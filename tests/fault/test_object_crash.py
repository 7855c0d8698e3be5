"""kill -9 the object server during a write storm: no partial object, digests heal."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time

import aiohttp
import msgpack
import pytest

from swiftlite.common.hashing import hash_path
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import digests
from tests.helpers import ServerProcess, free_port

PARTS = 3
NAMES = [f"o{i}" for i in range(40)]


def part_of(name: str) -> int:
    return sum(name.encode()) % PARTS


@pytest.mark.slow
async def test_kill_during_write_storm(tmp_path):
    devices = tmp_path / "devices"
    (devices / "sda").mkdir(parents=True)
    dev = str(devices / "sda")
    conf = tmp_path / "object-server.conf"
    # One process: the kill then takes down exactly the process whose temp files the restart
    # must find dead (forked workers may still be exiting when the next one starts).
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[object-server]\n"
                    "write_batch_size = 16k\nio_threads = 8\nworkers = 1\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    rng = random.Random(1234)
    bodies: dict[str, bytes] = {}          # etag -> body, for every body ever sent
    acked: dict[str, str] = {}             # name -> newest acknowledged timestamp
    tick = [int(time.time() * 100000)]

    def next_ts() -> str:
        tick[0] += 1
        return Timestamp(tick[0]).internal

    async def one_write(s: aiohttp.ClientSession) -> None:
        name = rng.choice(NAMES)
        path = f"{base}/sda/{part_of(name)}/a/c/{name}"
        t = next_ts()
        op = rng.random()
        if op < 0.7:
            body = os.urandom(rng.choice([1000, 40_000, 100_000]))
            bodies[hashlib.md5(body).hexdigest()] = body
            r = await s.put(path, data=body, headers={"X-Timestamp": t})
        elif op < 0.85:
            r = await s.delete(path, headers={"X-Timestamp": t})
        else:
            r = await s.post(path, headers={"X-Timestamp": t, "X-Object-Meta-K": t})
        async with r:
            await r.read()
            if r.status in (201, 204) or (r.status == 404 and op >= 0.7 and op < 0.85):
                if t > acked.get(name, ""):
                    acked[name] = t

    proc = ServerProcess("object", str(conf), port)

    async def storm(kill_after: int) -> int:
        done = 0

        async def worker(s: aiohttp.ClientSession) -> None:
            nonlocal done
            while True:
                try:
                    await one_write(s)
                except (aiohttp.ClientError, OSError):
                    return
                done += 1
                if done == kill_after:
                    proc.kill()  # SIGKILL mid-storm: other requests are in flight
                    return

        async with aiohttp.ClientSession() as s:
            await asyncio.gather(*(worker(s) for _ in range(12)))
        return done

    for _round in range(3):
        proc.start()
        kill_after = rng.randint(20, 120)
        assert await storm(kill_after) >= kill_after

    proc.start()
    try:
        assert os.listdir(os.path.join(dev, "tmp")) == []  # stale temp files cleaned up
        async with aiohttp.ClientSession() as s:
            for name in NAMES:
                async with s.get(f"{base}/sda/{part_of(name)}/a/c/{name}") as r:
                    body = await r.read()
                    if r.status == 200:
                        # (a) whole and correct, never partial
                        assert hashlib.md5(body).hexdigest() == r.headers["ETag"]
                        assert bodies[r.headers["ETag"]] == body
                    else:
                        assert r.status == 404
                    if name in acked:  # acknowledged writes are durable
                        assert r.headers.get("X-Backend-Timestamp", "") >= acked[name]
            # (b) one explicit listing of the changed suffixes, then digests are exact
            for part in range(PARTS):
                sufs = sorted({hash_path("a", "c", n)[-3:] for n in NAMES if part_of(n) == part})
                async with s.request("MERGE", f"{base}/sda/{part}/digests/{'-'.join(sufs)}") as r:
                    assert r.status == 200
                    healed = msgpack.unpackb(await r.read())
                assert healed == digests.recompute(dev, part)
                async with s.request("MERGE", f"{base}/sda/{part}/digests") as r:
                    assert msgpack.unpackb(await r.read()) == healed
    finally:
        proc.stop()
