"""The update log's records, segments and replay (swiftlite.db.update_log)."""

from __future__ import annotations

import os

import pytest

from swiftlite.db.update_log import UpdateLog, decode, encode

ROWS = [{"name": "a", "created_at": "1.00000", "size": 1}, {"name": "b", "deleted": 1}]


def test_records_round_trip_and_a_torn_tail_ends_the_segment():
    recs = [encode(f"containers/{i}/x.db", ROWS) for i in range(3)]
    data = b"".join(recs)
    assert list(decode(data)) == [(f"containers/{i}/x.db", ROWS) for i in range(3)]
    whole = len(recs[0]) + len(recs[1])
    for cut in range(whole, len(data)):  # the crash came anywhere in the third record
        assert [rel for rel, _ in decode(data[:cut])] == ["containers/0/x.db",
                                                          "containers/1/x.db"]
    flipped = bytearray(data)
    flipped[whole + 12] ^= 0xFF  # a bit rot in the third payload: its CRC fails
    assert len(list(decode(bytes(flipped)))) == 2


async def test_a_live_workers_segment_is_never_replayed_and_a_dead_ones_is(tmp_path):
    devices = str(tmp_path)
    os.makedirs(tmp_path / "sda")
    live = UpdateLog(devices, "container", max_age=600)
    dl = live.device_log("sda")
    dl.write([("containers/1/x.db", encode("containers/1/x.db", ROWS))])
    seg_dir = tmp_path / "sda" / "containers_log"
    assert len(os.listdir(seg_dir)) == 1

    seen: list[tuple[str, list]] = []

    async def replay(path: str, rows: list) -> None:
        seen.append((path, rows))

    other = UpdateLog(devices, "container")
    assert await other.replay_orphans(replay) == 0  # its writer holds the flock
    assert not seen and len(os.listdir(seg_dir)) == 1

    seg = dl.take()  # the writer dies: its fd (and flock) goes without a retirement
    assert seg is not None
    os.close(seg.fd)
    assert await other.replay_orphans(replay) == 1
    assert seen == [(os.path.join(devices, "sda", "containers/1/x.db"), ROWS)]
    assert os.listdir(seg_dir) == []


async def test_replay_drops_rows_of_a_db_that_is_gone_and_paths_outside_the_device(tmp_path):
    devices = str(tmp_path)
    os.makedirs(tmp_path / "sda" / "containers_log")
    seg = tmp_path / "sda" / "containers_log" / "1-dead-000001.log"
    seg.write_bytes(encode("containers/1/gone.db", ROWS) + encode("../../etc/x.db", ROWS)
                    + encode("containers/2/ok.db", ROWS))
    calls: list[str] = []

    async def replay(path: str, rows: list) -> None:
        calls.append(path)
        if path.endswith("gone.db"):
            raise FileNotFoundError(path)

    ulog = UpdateLog(devices, "container")
    assert await ulog.replay_orphans(replay) == 1
    assert [os.path.basename(p) for p in calls] == ["gone.db", "ok.db"]
    assert not seg.exists()
    assert ulog.replayed_records == 3


def test_the_log_never_recreates_a_device_that_is_gone(tmp_path):
    """A failed disk renamed or unmounted away: writing the log must fail, not make an
    empty directory where the device was (the object server would take it for the disk
    and put objects on it)."""
    ulog = UpdateLog(str(tmp_path), "container")
    dl = ulog.device_log("d1")  # tmp_path/d1 does not exist
    with pytest.raises(FileNotFoundError):
        dl.write([("containers/1/x.db", encode("containers/1/x.db", ROWS))])
    assert not (tmp_path / "d1").exists()
