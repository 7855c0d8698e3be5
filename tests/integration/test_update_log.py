"""The container server's per-device update log (swiftlite.db.update_log, device_commit):
acknowledged object updates survive losing what the DBs had not flushed, a clean stop and
rotation leave nothing to replay, and a DB another writer holds does not stall the
device's other DBs."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import aiohttp
import pytest

from swiftlite.common.timestamp import Timestamp
from swiftlite.db.paths import db_file
from tests.helpers import ServerProcess, async_wait_for, free_port

ACCOUNT = "AUTH_ul"


def _server(tmp_path, extra: str = "") -> tuple[ServerProcess, str, str, str]:
    """(server, devices, its container `c`'s URL, c's DB path)."""
    devices = tmp_path / "node"
    (devices / "sda").mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "c.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[container-server]\nio_threads = 4\n"
                    f"{extra}\n")
    srv = ServerProcess("container", str(conf), free_port())
    return (srv, str(devices), f"http://127.0.0.1:{srv.port}/sda/0/{ACCOUNT}/c",
            db_file(str(devices), "sda", "container", 0, ACCOUNT, "c"))


def _segments(devices: str) -> list[str]:
    return sorted(glob.glob(os.path.join(devices, "sda", "containers_log", "*.log")))


def _rows_on_disk(path: str) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM object WHERE deleted = 0")}
    finally:
        conn.close()


async def _put_container(http: aiohttp.ClientSession, base: str) -> None:
    async with http.put(base, headers={"X-Timestamp": Timestamp.now().internal}) as r:
        assert r.status == 201


async def _update(http: aiohttp.ClientSession, base: str, name: str) -> int:
    h = {"X-Timestamp": Timestamp.now().internal, "X-Size": "7",
         "X-Content-Type": "image/jpeg", "X-Etag": "e" * 32}
    async with http.put(f"{base}/{name}", headers=h) as r:
        return r.status


async def _update_all(http: aiohttp.ClientSession, base: str, names: list[str]) -> None:
    for name in names:
        assert await _update(http, base, name) == 201


async def _listing(http: aiohttp.ClientSession, base: str) -> tuple[set[str], int]:
    async with http.get(base, params={"format": "json"}) as r:
        assert r.status == 200
        names = {row["name"] for row in json.loads(await r.read())}
    async with http.head(base) as r:
        return names, int(r.headers["X-Container-Object-Count"])


async def test_acknowledged_updates_come_back_from_the_log_when_the_db_lost_them(tmp_path):
    """A power loss can drop the WAL frames a commit round wrote without flushing; the log
    holds them. Stand-in: kill -9 the server, put back the DB as it was before the updates
    (flushed, holding none of them), restart: every acknowledged update is listed again."""
    # Every round logged, even of this one DB (else it flushes its own WAL: nothing to lose).
    srv, devices, base, path = _server(tmp_path, "db_update_log_seconds = 600\n"
                                       "db_update_log_min_dbs = 1")
    srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            await _put_container(http, base)
        srv.stop()  # a clean stop: the DB file alone holds everything, the WAL is gone
        snapshot = str(tmp_path / "before.db")
        shutil.copy(path, snapshot)
        assert not _rows_on_disk(snapshot)

        srv.start()
        acked: list[str] = []
        async with aiohttp.ClientSession() as http:
            async def writer(w: int) -> None:
                for i in range(40):
                    name = f"img/{w:02d}/{i:03d}.jpg"
                    if await _update(http, base, name) == 201:
                        acked.append(name)
            await asyncio.gather(*(writer(w) for w in range(8)))
        assert len(acked) == 320
        assert _segments(devices), "the updates should be in a live segment"
        srv.kill()  # SIGKILL: the segment stays, unretired

        for suffix in ("-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
        shutil.copy(snapshot, path)
        assert not _rows_on_disk(path)  # what the DB holds now: none of the 320

        # Restarted with the log turned off: what the crash left is replayed all the same.
        with open(srv.conf_path, "a") as f:
            f.write("db_update_log = false\n")
        srv.start()  # replays the dead worker's segment before it serves
        async with aiohttp.ClientSession() as http:
            names, count = await _listing(http, base)
        assert set(acked) <= names, f"{len(set(acked) - names)} acknowledged updates lost"
        assert count == len(names) == 320
        assert not _segments(devices)  # replayed, its DB flushed, then deleted
        assert "replayed update log segment" in srv.log_text()
    finally:
        srv.stop()


async def test_held_updates_survive_a_kill_9(tmp_path):
    """Rows a round logged and held for a later apply (db_update_log_apply_delay) are in no
    DB when the server dies; its segment brings them back, and a read before the apply
    sees them all the same."""
    srv, devices, base, path = _server(tmp_path, "db_update_log_seconds = 600\n"
                                       "db_update_log_min_dbs = 1\n"
                                       "db_update_log_apply_delay = 600\n"
                                       "db_update_log_apply_rows = 100000\n"
                                       "account_update_interval = 600")
    srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            await _put_container(http, base)
            # The account reporter reads the DB (applying what it holds) on the first
            # update, then not for account_update_interval.
            assert await _update(http, base, "warm") == 201
            await async_wait_for(lambda: _rows_on_disk(path) == {"warm"}, 10,
                                 what="the reporter's read to apply the first row")
            await asyncio.gather(*(_update(http, base, f"h{i:03d}") for i in range(30)))
            assert _rows_on_disk(path) == {"warm"}  # held: in the log, not in the DB
            names, count = await _listing(http, base)  # a read applies them first
            assert count == len(names) == 31
            assert len(_rows_on_disk(path)) == 31
            statuses = await asyncio.gather(*(_update(http, base, f"k{i:03d}")
                                              for i in range(30)))
            assert set(statuses) == {201}
            assert len(_rows_on_disk(path)) == 31  # the next 30 are held again
        srv.kill()
        srv.start()  # replays the dead worker's segment before it serves
        async with aiohttp.ClientSession() as http:
            names, count = await _listing(http, base)
        assert count == len(names) == 61
        assert len(_rows_on_disk(path)) == 61
    finally:
        srv.stop()


async def test_clean_stop_and_rotation_leave_nothing_to_replay(tmp_path):
    srv, devices, base, path = _server(tmp_path, "db_update_log_seconds = 0.5\n"
                                       "db_update_log_min_dbs = 1")
    srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            await _put_container(http, base)
            await _update_all(http, base, [f"a{i:03d}" for i in range(20)])
            assert _segments(devices)
            # Idle: the aged segment is retired (its DB's WAL flushed, the segment deleted).
            await async_wait_for(lambda: not _segments(devices), 10,
                                 what="the idle segment to be retired")
            assert {f"a{i:03d}" for i in range(20)} <= _rows_on_disk(path)
            await _update_all(http, base, [f"b{i:03d}" for i in range(20)])
        srv.stop()
        assert not _segments(devices)  # the stop retired the live one
        assert len(_rows_on_disk(path)) == 40
    finally:
        srv.stop()


async def test_other_processes_see_every_update_after_segments_retire(tmp_path):
    """Retiring a segment flushes its DBs without disturbing SQLite's locks: another
    process that opens and closes the DB afterwards (the sharder, the replicator, the
    `swiftlite shards` command) must not take it for unused and delete its WAL, or the
    server's later commits would go to a deleted file. (An earlier version fsynced the DB
    file through a descriptor of its own, and closing it dropped the server's locks.)"""
    srv, devices, base, path = _server(tmp_path, "db_update_log_seconds = 0.3\n"
                                       "db_update_log_min_dbs = 1")
    srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            await _put_container(http, base)
            for rnd in range(3):
                await _update_all(http, base, [f"r{rnd}-{i}" for i in range(10)])
                await async_wait_for(lambda: not _segments(devices), 10,
                                     what="the segment to be retired")
                # Another process opens the DB and closes it (its close checkpoints and
                # deletes the WAL if it thinks it is the last connection).
                out = subprocess.run([sys.executable, "-c", (
                    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
                    "print(c.execute('SELECT count(*) FROM object').fetchone()[0]);"
                    "c.close()"), path], capture_output=True, text=True, check=True)
                assert int(out.stdout) == 10 * (rnd + 1)
            assert len(_rows_on_disk(path)) == 30
            names, count = await _listing(http, base)
            assert count == 30 and len(names) == 30
    finally:
        srv.stop()


async def test_a_db_held_by_another_writer_does_not_stall_the_device(tmp_path):
    """Another process holds container A's write lock: an update to A waits for it (and
    lands once it is free), while updates to B on the same device go through meanwhile.
    A's update may be answered before the lock is free: one that shared a round with B's is
    durable in the update log and held for A (device rounds). It is never applied early."""
    srv, devices, _, _ = _server(tmp_path)
    base_a = f"http://127.0.0.1:{srv.port}/sda/0/{ACCOUNT}/a"
    base_b = f"http://127.0.0.1:{srv.port}/sda/0/{ACCOUNT}/b"
    srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            await _put_container(http, base_a)
            await _put_container(http, base_b)
            assert await _update(http, base_a, "warm") == 201
            db_a = db_file(devices, "sda", "container", 0, ACCOUNT, "a")
            holder = sqlite3.connect(db_a, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # the replicator or another worker, say
            try:
                blocked = asyncio.create_task(_update(http, base_a, "waits"))
                t0 = time.monotonic()
                for i in range(10):
                    assert await _update(http, base_b, f"b{i}") == 201
                assert time.monotonic() - t0 < 5  # not held up by A's lock
                # A's own update is waiting for the lock (or held, logged, if answered).
                assert "waits" not in _rows_on_disk(db_a)
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert await asyncio.wait_for(blocked, 30) == 201
            names, count = await _listing(http, base_a)
            assert names == {"warm", "waits"} and count == 2
            names, _ = await _listing(http, base_b)
            assert names == {f"b{i}" for i in range(10)}
    finally:
        srv.stop()


@pytest.mark.parametrize("setting", ["db_update_log = false", "db_synchronous = NORMAL"])
async def test_without_the_log_updates_commit_as_before(tmp_path, setting):
    srv, devices, base, _ = _server(tmp_path, setting)
    srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            await _put_container(http, base)
            statuses = await asyncio.gather(*(_update(http, base, f"o{i}") for i in range(30)))
            assert set(statuses) == {201}
            names, count = await _listing(http, base)
            assert count == len(names) == 30
        assert not os.path.exists(os.path.join(devices, "sda", "containers_log"))
    finally:
        srv.stop()
