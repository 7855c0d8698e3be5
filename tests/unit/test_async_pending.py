"""Saved updates: written durably, read back, and never lost in silence when unreadable."""

from __future__ import annotations

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
    assert [p for _, p, _ in pending(str(devices))] == [good]
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
