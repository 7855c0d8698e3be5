"""Saved updates: written durably, read back, and never lost in silence when unreadable."""

from __future__ import annotations

import asyncio
import os

import msgpack

from swiftlite.common.async_pending import ASYNC_DIR, QUARANTINE, iter_updates, save_update
from swiftlite.obj.updater import pending


def _record(obj: str) -> dict:
    return {"method": "PUT", "path": f"/a/c/{obj}", "headers": {"X-Size": "1"}, "body": None,
            "targets": [{"ip": "127.0.0.1", "port": 1, "device": "sdb", "partition": 3}],
            "timestamp": "0000000001.00000"}


def test_saved_updates_read_back(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    paths = {save_update(dev, _record(f"o{i}")) for i in range(3)}
    got = dict(iter_updates(dev))
    assert set(got) == paths
    assert sorted(r["path"] for r in got.values()) == ["/a/c/o0", "/a/c/o1", "/a/c/o2"]


def test_unreadable_updates_are_logged_and_quarantined_not_skipped(tmp_path, caplog):
    """A damaged record, one that is not an update, and one that cannot be read: each is
    logged with its path and moved (bytes intact) to quarantined/async_pending; the good
    ones are still served, and the bad ones are not offered again."""
    devices = tmp_path / "devices"
    dev = str(devices / "sda")
    os.makedirs(dev)
    good = save_update(dev, _record("good"))
    sdir = os.path.join(dev, ASYNC_DIR, "abc")
    os.makedirs(sdir)
    bad = {
        "torn": msgpack.packb(_record("torn"))[:-7],
        "notarecord": msgpack.packb(["PUT", "/a/c/x"]),
        "nomethod": msgpack.packb({"path": "/a/c/y", "targets": []}),
    }
    for name, data in bad.items():
        with open(os.path.join(sdir, name), "wb") as f:
            f.write(data)
    os.mkdir(os.path.join(sdir, "adir"))  # open() fails: EISDIR
    caplog.set_level("ERROR", logger="swiftlite.async_pending")
    assert [p for _, p, _ in pending([str(devices)])] == [good]
    qdir = os.path.join(dev, QUARANTINE)
    moved = sorted(os.listdir(qdir))
    assert [m.rsplit("-", 1)[0] for m in moved] == ["adir", "nomethod", "notarecord", "torn"]
    for m in moved:
        name = m.rsplit("-", 1)[0]
        if name in bad:
            with open(os.path.join(qdir, m), "rb") as f:
                assert f.read() == bad[name]
        assert any(os.path.join(sdir, name) in r.getMessage() and "quarantined" in
                   r.getMessage() for r in caplog.records), (name, caplog.text)
    assert os.listdir(sdir) == []
    assert [p for p, _ in iter_updates(dev)] == [good]


async def test_an_update_failing_unexpectedly_is_logged_and_saved_not_lost(tmp_path, caplog):
    """A container update that fails in a way the sender did not expect (here a target
    port no socket takes: OverflowError, not a network error) is logged with its object and
    saved for the updater; with batching on, an update queued behind it is saved too."""
    from swiftlite.common.config import Section
    from swiftlite.obj.container_updates import ContainerUpdater, parse_targets

    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    targets = parse_targets({"X-Container-Host": "127.0.0.1:70000",
                             "X-Container-Device": "sdb", "X-Container-Partition": "3"})
    assert targets and targets[0]["port"] == 70000  # passes the header checks
    up = ContainerUpdater(Section(container_update_timeout="5"))
    await up.start()
    caplog.set_level("ERROR", logger="swiftlite.object.updates")
    try:
        await asyncio.gather(*(
            up.update(dev, "PUT", "a", "c", f"o{i}",
                      {"X-Timestamp": f"000000000{i}.00000", "X-Size": "1",
                       "X-Content-Type": "text/plain", "X-Etag": "e"}, targets)
            for i in (1, 2)))
        await asyncio.wait_for(asyncio.gather(*list(up.tasks)), 10)
    finally:
        await up.close()
    saved = sorted(r["path"] for _, r in iter_updates(dev))
    assert saved == ["/a/c/o1", "/a/c/o2"]
    assert "/a/c/o1" in caplog.text and "OverflowError" in caplog.text
