"""Device commit rounds (swiftlite.db.device_commit) on real container DBs and a real update
log: updates to many DBs share rounds and one log flush each, a failing or busy DB affects
only its own callers, and a failed log flush fails every caller of the round."""

from __future__ import annotations

import asyncio
import glob
import os
import sqlite3
import time

from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.broker import DatabaseNotFound
from swiftlite.db.cache import BrokerCache
from swiftlite.db.device_commit import DeviceCommitter
from swiftlite.db.group_commit import GroupCommitter
from swiftlite.db.paths import db_file
from swiftlite.db.update_log import DeviceLog, UpdateLog, decode, log_dir


def _row(name: str) -> dict:
    return {"name": name, "created_at": Timestamp.parse(time.time()).internal, "size": 1,
            "content_type": "t", "etag": "e", "deleted": 0}


def _broker(devices: str, name: str) -> ContainerBroker:
    b = ContainerBroker(os.path.join(devices, "sda", "containers", f"{name}.db"),
                        account="a", container=name)
    b.put_db(Timestamp.now().internal, {})
    b.committer = GroupCommitter(b.merge_items)  # type: ignore[attr-defined]
    return b


def _setup(tmp_path, log_class: type[DeviceLog] = DeviceLog, min_dbs: int = 1,
           max_age: float = 600, **hold) -> tuple[str, UpdateLog, DeviceCommitter]:
    devices = str(tmp_path)
    ulog = UpdateLog(devices, "container", max_age=max_age)
    dlog = ulog._logs["sda"] = log_class(os.path.join(devices, "sda"),
                                         log_dir(devices, "sda", "container"),
                                         ulog.token, ulog.max_bytes, ulog.max_age)
    return devices, ulog, DeviceCommitter(dlog, ulog, min_dbs=min_dbs, **hold)


def _on_disk(b: ContainerBroker) -> int:
    """Rows in the DB file as another process sees it."""
    conn = sqlite3.connect(b.db_file)
    try:
        return conn.execute("SELECT count(*) FROM object").fetchone()[0]
    finally:
        conn.close()


async def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _logged(devices: str) -> list[tuple[str, list]]:
    out = []
    for seg in glob.glob(os.path.join(devices, "sda", "containers_log", "*.log")):
        with open(seg, "rb") as f:
            out += list(decode(f.read()))
    return out


def _submit(dc: DeviceCommitter, b: ContainerBroker, names: list[str]):
    rel = os.path.join("containers", os.path.basename(b.db_file))  # as under the device
    return dc.submit(b, b.merge_items, rel, [_row(n) for n in names])


async def test_updates_to_many_dbs_share_rounds_and_are_logged_once_each(tmp_path):
    devices, ulog, dc = _setup(tmp_path)
    dbs = [_broker(devices, f"c{i}") for i in range(5)]
    await asyncio.gather(*(_submit(dc, dbs[i % 5], [f"o{i}"]) for i in range(40)))
    for b in dbs:
        assert b.get_info()["object_count"] == 8
        assert b.item_commits < 8  # batched within the DB too
    assert dc.items == 40
    assert dc.rounds < 40 and ulog.flushes == dc.rounds  # one log flush per round
    logged = _logged(devices)
    assert sorted(r["name"] for _, rows in logged for r in rows) == sorted(
        f"o{i}" for i in range(40))
    await ulog.close()
    assert _logged(devices) == []  # retired: the DBs flushed, the segment deleted


async def test_a_failing_db_fails_only_its_callers(tmp_path):
    devices, ulog, dc = _setup(tmp_path)
    good = _broker(devices, "good")
    bad = _broker(devices, "bad")
    bad.close()
    os.unlink(bad.db_file)  # deleted under the server (a retired shard, say)
    results = await asyncio.gather(_submit(dc, good, ["g1"]), _submit(dc, bad, ["b1"]),
                                   _submit(dc, good, ["g2"]), return_exceptions=True)
    assert not isinstance(results[0], Exception) and not isinstance(results[2], Exception)
    assert isinstance(results[1], DatabaseNotFound)
    assert good.get_info()["object_count"] == 2
    assert {rel for rel, _ in _logged(devices)} == {os.path.join("containers", "good.db")}
    await ulog.close()


async def test_a_busy_db_commits_on_its_own_without_holding_up_the_round(tmp_path):
    devices, ulog, dc = _setup(tmp_path)
    free = _broker(devices, "free")
    held = _broker(devices, "held")
    other = sqlite3.connect(held.db_file, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write lock, say
    blocked = asyncio.ensure_future(_submit(dc, held, ["h1"]))
    await _submit(dc, free, ["f1"])
    await asyncio.wait_for(_submit(dc, free, ["f2"]), 5)  # rounds go on meanwhile
    assert not blocked.done() and dc.deferred == 1
    other.execute("ROLLBACK")
    other.close()
    await asyncio.wait_for(blocked, 30)
    assert held.get_info()["object_count"] == 1
    assert held.committer.batches == 1  # type: ignore[attr-defined]  # its own commit
    await ulog.close()


class _FailingLog(DeviceLog):
    def write(self, records):
        raise OSError(28, "No space left on device")


async def test_a_failed_log_flush_fails_every_caller_of_the_round(tmp_path):
    devices, ulog, dc = _setup(tmp_path, _FailingLog)
    a, b = _broker(devices, "a"), _broker(devices, "b")
    results = await asyncio.gather(_submit(dc, a, ["x"]), _submit(dc, b, ["y"]),
                                   return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results)  # not durable: nobody gets a 2xx
    await ulog.close()


async def test_a_round_of_one_db_flushes_it_and_skips_the_log(tmp_path):
    devices, ulog, dc = _setup(tmp_path, min_dbs=2)
    b = _broker(devices, "solo")
    await asyncio.gather(*(_submit(dc, b, [f"o{i}"]) for i in range(10)))
    assert b.get_info()["object_count"] == 10
    assert ulog.flushes == 0 and _logged(devices) == []  # its own WAL flush instead
    await asyncio.gather(_submit(dc, b, ["x"]), _submit(dc, _broker(devices, "two"), ["y"]))
    assert ulog.flushes == 1  # two DBs in the round: logged
    await ulog.close()


async def test_held_rows_are_logged_and_applied_later_in_one_transaction(tmp_path):
    devices, ulog, dc = _setup(tmp_path, min_dbs=2, apply_delay=600, apply_rows=6)
    a, b = _broker(devices, "a"), _broker(devices, "b")
    commits = a.item_commits
    await asyncio.gather(*(_submit(dc, x, [f"{x.container}{i}"])
                           for i in range(3) for x in (a, b)))
    assert sorted(r["name"] for _, rows in _logged(devices) for r in rows) == [
        "a0", "a1", "a2", "b0", "b1", "b2"]  # durable: answered only once logged
    assert _on_disk(a) == 0 and a.item_commits == commits  # held, not applied yet
    assert b.get_info()["object_count"] == 3  # a read here applies them first
    assert _on_disk(b) == 3
    await asyncio.gather(*(_submit(dc, x, [f"{x.container}{i}"])
                           for i in range(3, 6) for x in (a, b)))
    # Six held: due, applied at once. The commit is visible to another connection a moment
    # before the pool thread counts it: wait for the count too.
    await _until(lambda: _on_disk(a) == 6 and a.item_commits > commits)
    assert a.item_commits == commits + 1
    assert a.get_info()["object_count"] == 6
    await dc.drain()
    await ulog.close()


async def test_held_rows_reach_the_db_after_the_delay(tmp_path):
    devices, ulog, dc = _setup(tmp_path, min_dbs=2, apply_delay=0.05, apply_rows=1000)
    a, b = _broker(devices, "a"), _broker(devices, "b")
    await asyncio.gather(_submit(dc, a, ["x"]), _submit(dc, b, ["y"]))
    await _until(lambda: _on_disk(a) == 1 and _on_disk(b) == 1)
    await asyncio.wait_for(dc.drain(), 10)  # nothing held: the committer stops
    assert dc._task is None
    await ulog.close()


async def test_a_segment_retires_only_after_every_held_row_is_applied(tmp_path):
    # max_age 0: each round starts a new segment and retires the one before.
    devices, ulog, dc = _setup(tmp_path, min_dbs=2, max_age=0, apply_delay=600,
                               apply_rows=1000)
    a, b = _broker(devices, "a"), _broker(devices, "b")
    await asyncio.gather(_submit(dc, a, ["a1"]), _submit(dc, b, ["b1"]))
    first = glob.glob(os.path.join(devices, "sda", "containers_log", "*.log"))
    assert len(first) == 1 and _on_disk(a) == 0
    other = sqlite3.connect(a.db_file, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a's rows cannot be applied while this holds it
    await asyncio.gather(_submit(dc, a, ["a2"]), _submit(dc, b, ["b2"]))
    await asyncio.sleep(0.1)  # the committer retries meanwhile, each time busy
    assert os.path.exists(first[0])  # its rows for a are not in a yet: kept
    assert _on_disk(b) == 2  # b was applied when the segment rotated
    other.execute("ROLLBACK")
    other.close()
    await _until(lambda: not os.path.exists(first[0]))
    assert _on_disk(a) == 2
    await asyncio.wait_for(dc.drain(), 10)
    await ulog.close()
    assert _logged(devices) == []


async def test_held_rows_of_a_damaged_db_do_not_stall_the_device(tmp_path):
    """A DB that turns out damaged while it holds rows is quarantined (its replicas
    elsewhere rebuild it) and its rows dropped: the device's other DBs and the log's
    segments go on."""
    devices, ulog, dc = _setup(tmp_path, min_dbs=2, apply_delay=600, apply_rows=1000)
    good = _broker(devices, "good")
    path = db_file(devices, "sda", "container", 0, "a", "bad")
    os.makedirs(os.path.dirname(path))
    bad = ContainerBroker(path, account="a", container="bad")
    bad.put_db(Timestamp.now().internal, {})
    await asyncio.gather(_submit(dc, good, ["g"]), _submit(dc, bad, ["b"]))
    bad.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    with open(path, "wb") as f:
        f.write(b"not a database at all" * 300)
    cache = BrokerCache(lambda p: bad)
    cache.get(path)  # as the server's cache holds it: the quarantine closes it
    await asyncio.wait_for(dc.drain(), 10)
    assert _on_disk(good) == 1
    assert not os.path.exists(path)
    assert glob.glob(os.path.join(devices, "sda", "quarantined", "containers", "*"))
    await ulog.close()
    assert _logged(devices) == []


async def test_a_cancel_arriving_as_the_pause_ends_is_kept(tmp_path):
    """Stopping the committer cancels its task; a cancel that lands in the same loop pass
    as an update's wake-up must still end the pause (Python 3.11's wait_for lost it, and the
    task went on as if never cancelled)."""
    _, _, committer = _setup(tmp_path)
    kept = 0
    for passes in range(6):  # the cancel lands 0..5 loop passes after the wake-up
        task = asyncio.ensure_future(committer._pause(30))
        await asyncio.sleep(0)  # it now waits on the wake-up
        committer._wake.set()
        for _ in range(passes):
            await asyncio.sleep(0)
        if task.cancel():  # accepted: the task had not finished
            kept += 1
            try:
                await task
            except asyncio.CancelledError:
                continue
            raise AssertionError(f"a cancel {passes} passes after the wake-up was lost")
        await task
    assert kept  # the window was really exercised
