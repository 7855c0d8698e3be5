"""The shared broker: creation, newest-wins rows and metadata, sync points, reclaim."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest

from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.broker import DatabaseNotFound, merge_metadata


def ts(offset: float = 0.0) -> str:
    return Timestamp.parse(time.time() + offset).internal


def row(name, created_at, size=1, deleted=0):
    return {"name": name, "created_at": created_at, "size": size, "content_type": "t",
            "etag": "e", "deleted": deleted}


@pytest.fixture
def broker(tmp_path):
    b = ContainerBroker(str(tmp_path / "x" / "c.db"), account="a", container="c")
    created, info = b.put_db(ts(), {})
    assert created and info["object_count"] == 0
    return b


def test_missing_db_raises(tmp_path):
    b = ContainerBroker(str(tmp_path / "none.db"))
    with pytest.raises(DatabaseNotFound):
        b.get_info()
    assert not b.exists()


def test_wal_mode_and_tables(broker):
    conn = sqlite3.connect(broker.db_file)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"stat", "sync", "shard_range", "object"} <= tables
    assert broker.get_shard_ranges() == []
    # No temp file left behind by the atomic creation.
    assert [f for f in os.listdir(os.path.dirname(broker.db_file)) if f.endswith(".tmp")] == []


def test_newest_wins_and_counts(broker):
    t1, t2, t3 = ts(1), ts(2), ts(3)
    assert broker.merge_items([row("o", t2, size=10)]) == 1
    assert broker.merge_items([row("o", t1, size=99)]) == 0  # older: no change
    info = broker.get_info()
    assert (info["object_count"], info["bytes_used"]) == (1, 10)
    assert broker.merge_items([row("o", t3, deleted=1)]) == 1  # tombstone
    info = broker.get_info()
    assert (info["object_count"], info["bytes_used"]) == (0, 0)
    # The tombstone stays, so a late older PUT cannot resurrect the object.
    assert broker.merge_items([row("o", t2, size=10)]) == 0
    assert broker.get_info()["object_count"] == 0
    # Within one batch the newest row per name wins too.
    broker.merge_items([row("p", t1, size=1), row("p", t3, size=3), row("p", t2, size=2)])
    assert broker.get_info()["bytes_used"] == 3


def test_items_since_and_sync_points(broker):
    broker.merge_items([row("a", ts(1)), row("b", ts(1))])
    first = broker.get_items_since(-1, 10)
    assert [r["name"] for r in first] == ["a", "b"]
    point = first[-1]["ROWID"]
    assert broker.get_items_since(point, 10) == []
    broker.merge_items([row("a", ts(2), size=5)])  # a changed: new ROWID
    since = broker.get_items_since(point, 10)
    assert [(r["name"], r["size"]) for r in since] == [("a", 5)]
    assert broker.get_max_row() == since[-1]["ROWID"]
    assert broker.get_sync("peer") == -1
    broker.set_sync("peer", point)
    broker.set_sync("peer", point - 1)  # sync points only move forward
    assert broker.get_sync("peer") == point
    assert broker.get_syncs() == {"peer": point}


def test_merge_rows_from_peer(tmp_path, broker):
    broker.merge_items([row("a", ts(1)), row("b", ts(1), deleted=1)])
    other = ContainerBroker(str(tmp_path / "peer.db"), account="a", container="c")
    other.put_db(ts(), {})
    other.merge_items([row("b", ts(2), size=7)])
    other.merge_items(broker.get_items_since(-1, 100))
    info = other.get_info()
    assert (info["object_count"], info["bytes_used"]) == (2, 8)


def test_metadata_newest_wins(broker):
    t1, t2, t3 = ts(1), ts(2), ts(3)
    broker.update_metadata({"x-container-meta-k": ["v2", t2]})
    broker.update_metadata({"x-container-meta-k": ["v1", t1]})
    assert broker.get_metadata()["x-container-meta-k"] == ["v2", t2]
    broker.update_metadata({"x-container-meta-k": ["", t3]})
    assert broker.get_metadata()["x-container-meta-k"] == ["", t3]
    m = {"k": ["a", "2"]}
    assert not merge_metadata(m, {"k": ["b", "1"]}) and m == {"k": ["a", "2"]}


def test_reclaim_after_reclaim_age(broker):
    old, new = ts(-100), ts(-1)
    broker.merge_items([row("gone", old, deleted=1), row("recent", new, deleted=1),
                        row("live", old)])
    broker.update_metadata({"x-container-meta-old": ["", old], "x-container-meta-keep": ["v", old]})
    assert broker.reclaim(reclaim_age=50) == 2  # one row, one metadata key
    names = {r["name"] for r in broker.get_items_since(-1, 10)}
    assert names == {"recent", "live"}
    assert set(broker.get_metadata()) == {"x-container-meta-keep"}
    assert broker.reclaim(reclaim_age=0.0) == 1  # now "recent" too; live rows never go
    assert {r["name"] for r in broker.get_items_since(-1, 10)} == {"live"}


def test_delete_and_revive(broker):
    broker.merge_items([row("o", ts(1))])
    assert broker.delete_db(ts(2))[0] == "conflict"  # not empty
    broker.merge_items([row("o", ts(3), deleted=1)])
    outcome, info = broker.delete_db(ts(4))
    assert outcome == "deleted" and info["deleted"]
    assert broker.delete_db(ts(5))[0] == "notfound"
    created, info = broker.put_db(ts(6), {})
    assert created and not info["deleted"]
    created, info = broker.put_db(ts(7), {})
    assert not created


def test_survives_reopen(broker, tmp_path):
    broker.merge_items([row("o", ts(1), size=3)])
    broker.close()
    again = ContainerBroker(broker.db_file)
    assert again.get_info()["bytes_used"] == 3


def test_a_long_wait_for_the_write_lock_is_logged(broker, caplog):
    """Another writer (here another connection) holds the DB for 1.3 s: the update waits
    for it, lands, and the wait is logged with the DB's path; a short wait is not."""
    holder = sqlite3.connect(broker.db_file, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(1.3, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        with caplog.at_level("WARNING", logger="swiftlite.db.broker"):
            broker.merge_items([row("held", ts())])
            broker.merge_items([row("free", ts())])
    finally:
        release.join()
        holder.close()
    waits = [r.getMessage() for r in caplog.records if "write lock" in r.getMessage()]
    assert len(waits) == 1 and broker.db_file in waits[0], waits
    assert {r["name"] for r in broker.get_items_since(-1, 10)} == {"held", "free"}
