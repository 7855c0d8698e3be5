"""kill -9 of the container server loses no acknowledged object update."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from swiftlite.common.timestamp import Timestamp
from tests.helpers import ServerProcess, free_port

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("workers", [1, 2])
async def test_kill9_loses_no_acknowledged_update(tmp_path, workers):
    """Two workers: each has its own update log, and both write the same DB (one's rounds
    find it locked by the other's and hand the batch to the DB's own commit)."""
    devices = tmp_path / "node"
    (devices / "sda").mkdir(parents=True)
    conf = tmp_path / "c.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[container-server]\nio_threads = 2\n"
                    f"workers = {workers}\n")
    port = free_port()
    proc = ServerProcess("container", str(conf), port).start()
    base = f"http://127.0.0.1:{port}/sda/0/AUTH_k/c"
    acked: list[str] = []
    killed = asyncio.Event()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.put(base, headers={"X-Timestamp": Timestamp.now().internal}) as r:
                assert r.status == 201

            async def updater(w: int) -> None:
                for i in range(1000):
                    if killed.is_set():
                        return
                    name = f"w{w:02d}-{i:04d}"
                    h = {"X-Timestamp": Timestamp.parse(time.time()).internal, "X-Size": "1",
                         "X-Content-Type": "t", "X-Etag": "e"}
                    try:
                        async with http.put(f"{base}/{name}", headers=h) as r:
                            if r.status == 201:
                                acked.append(name)
                    except aiohttp.ClientError:
                        return

            async def killer() -> None:
                while len(acked) < 150:
                    await asyncio.sleep(0.001)
                proc.kill()  # SIGKILL while 16 updaters have updates in flight
                killed.set()

            await asyncio.gather(killer(), *(updater(w) for w in range(16)))
        assert len(acked) >= 150
        proc.start()
        async with aiohttp.ClientSession() as http:
            async with http.get(base, params={"format": "json"}) as r:
                assert r.status == 200
                names = {row["name"] for row in json.loads(await r.read())}
            async with http.head(base) as r:
                count = int(r.headers["X-Container-Object-Count"])
        missing = set(acked) - names
        assert not missing, f"{len(missing)} acknowledged updates lost"
        assert count == len(names)  # the stat row agrees with the rows after recovery
        # The killed workers' update-log segments were replayed and deleted before the
        # restarted server answered (it has written nothing since).
        assert not list((devices / "sda" / "containers_log").glob("*.log"))
    finally:
        proc.stop()
