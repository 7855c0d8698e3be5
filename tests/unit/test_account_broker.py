"""Account DB rows: per-field newest-wins, deleted containers leave listings and totals."""

from __future__ import annotations

import pytest

from swiftlite.account.broker import AccountBroker
from swiftlite.db.listing import ListingParams

T = [f"17000000{i:02d}.00000" for i in range(10)]


def rep(name, put=T[0], delete="0000000000.00000", stats=T[0], count=0, nbytes=0):
    return {"name": name, "put_timestamp": put, "delete_timestamp": delete,
            "stats_timestamp": stats, "object_count": count, "bytes_used": nbytes}


@pytest.fixture
def broker(tmp_path):
    b = AccountBroker(str(tmp_path / "a.db"), account="AUTH_t")
    b.put_db(T[0], {})
    return b


def totals(b):
    i = b.get_info()
    return i["container_count"], i["object_count"], i["bytes_used"]


def test_stats_follow_newest_report(broker):
    broker.merge_items([rep("c", put=T[1], stats=T[2], count=5, nbytes=50)])
    assert totals(broker) == (1, 5, 50)
    broker.merge_items([rep("c", put=T[1], stats=T[1], count=1, nbytes=1)])  # stale report
    assert totals(broker) == (1, 5, 50)
    broker.merge_items([rep("c", put=T[1], stats=T[3], count=2, nbytes=20)])
    assert totals(broker) == (1, 2, 20)
    assert broker.merge_items([rep("c", put=T[1], stats=T[3], count=2, nbytes=20)]) == 0


def test_delete_newer_than_put_removes_container(broker):
    broker.merge_items([rep("c", put=T[1], stats=T[1]), rep("d", put=T[1], count=1, nbytes=3)])
    assert totals(broker) == (2, 1, 3)
    broker.merge_items([rep("d", put=T[0], delete=T[2], stats=T[2])])
    assert totals(broker) == (1, 0, 0)
    _, rows = broker.list_containers(ListingParams(10, None, None, None, None, False, "json"))
    assert [r[0] for r in rows] == ["c"]
    # A re-PUT newer than the delete brings it back.
    broker.merge_items([rep("d", put=T[3], stats=T[3])])
    assert totals(broker) == (2, 0, 0)
    rows = broker.get_items_since(-1, 10)
    assert {r["name"]: r["deleted"] for r in rows} == {"c": 0, "d": 0}


def _container(tmp_path, name: str):
    from swiftlite.container.broker import ContainerBroker

    c = ContainerBroker(str(tmp_path / f"container-{name}.db"), account="AUTH_t", container="c")
    c.put_db(T[0], {})
    return c


def _obj(name: str, ts: str, size: int = 10, deleted: int = 0) -> dict:
    return {"name": name, "created_at": ts, "size": size, "content_type": "x/y",
            "etag": "e", "deleted": deleted}


def _report(container) -> dict:
    """What the container server sends (account_reporter) as the account server stores it."""
    from swiftlite.container.account_reporter import report_timestamp

    info = container.get_info()
    return {**rep("c", put=info["put_timestamp"], stats=report_timestamp(info),
                  count=info["object_count"], nbytes=info["bytes_used"]), "report": True}


def test_a_lagging_replica_never_overrides_one_with_newer_rows(tmp_path, broker):
    a, b = _container(tmp_path, "a"), _container(tmp_path, "b")
    a.merge_items([_obj("o1", T[1]), _obj("o2", T[2]), _obj("o3", T[3])])
    b.merge_items([_obj("o1", T[1]), _obj("o2", T[2])])  # lags: no o3 yet
    broker.merge_items([_report(a)])
    broker.merge_items([_report(b)])  # sent later, but carries older totals
    assert totals(broker) == (1, 3, 30)
    # Replicas that each lack a row the other has: the newest row wins for now...
    b.merge_items([_obj("o4", T[4])])
    broker.merge_items([_report(b)])
    assert totals(broker) == (1, 3, 30)  # b: o1 o2 o4
    # ...and once replication evens them out, their equal stamps carry the full totals.
    a.merge_items([_obj("o4", T[4])])
    b.merge_items([_obj("o3", T[3])])
    broker.merge_items([_report(a)])
    assert totals(broker) == (1, 4, 40)
    # A delete is a row too: it stamps the report that drops it from the totals.
    a.merge_items([_obj("o1", T[5], deleted=1)])
    broker.merge_items([_report(b)])
    broker.merge_items([_report(a)])
    broker.merge_items([_report(b)])
    assert totals(broker) == (1, 3, 30)


def test_replicated_account_rows_keep_the_strict_order(broker):
    """Between account replicas (no report flag) an equal stamp changes nothing, so replicas
    merging each other's rows in any order agree."""
    broker.merge_items([rep("c", stats=T[2], count=5, nbytes=50)])
    assert broker.merge_items([rep("c", stats=T[2], count=4, nbytes=40)]) == 0
    assert totals(broker) == (1, 5, 50)


def test_a_container_db_made_before_the_stats_stamp_gets_it(tmp_path):
    import sqlite3

    from swiftlite.container.broker import ContainerBroker

    old = _container(tmp_path, "old")
    old.merge_items([_obj("o1", T[1])])
    path = old.db_file
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE stat DROP COLUMN stats_timestamp")
    conn.close()
    again = ContainerBroker(path, account="AUTH_t", container="c")
    assert again.get_info()["stats_timestamp"] == "0000000000.00000"
    again.merge_items([_obj("o2", T[2])])
    assert again.get_info()["stats_timestamp"] == T[2]


def test_stats_per_policy(broker):
    broker.merge_items([{**rep("g", count=2, nbytes=20)},
                        {**rep("s", count=3, nbytes=30), "storage_policy_index": 1}])
    ps = broker.get_info()["policy_stats"]
    assert ps[0] == {"container_count": 1, "object_count": 2, "bytes_used": 20}
    assert ps[1] == {"container_count": 1, "object_count": 3, "bytes_used": 30}
    # Deleted, then made again on policy 0: its stats move with it.
    broker.merge_items([rep("s", put=T[0], delete=T[1], stats=T[1])])
    broker.merge_items([rep("s", put=T[2], stats=T[2], count=1, nbytes=5)])
    ps = broker.get_info()["policy_stats"]
    assert ps[1] == {"container_count": 0, "object_count": 0, "bytes_used": 0}
    assert ps[0] == {"container_count": 2, "object_count": 3, "bytes_used": 25}


def test_db_from_before_policies_is_migrated(tmp_path):
    path = str(tmp_path / "old.db")

    class Old(AccountBroker):  # the container table as it was before storage policies
        ITEMS_SCHEMA = """
CREATE TABLE container (
    ROWID INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
    put_timestamp TEXT NOT NULL, delete_timestamp TEXT NOT NULL,
    stats_timestamp TEXT NOT NULL, object_count INTEGER NOT NULL,
    bytes_used INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0);
"""

        def _connect(self, p):
            return super(AccountBroker, self)._connect(p)

        def _info_locked(self, conn):
            return super(AccountBroker, self)._info_locked(conn)

    old = Old(path, account="AUTH_t")
    old.put_db(T[0], {})
    old._get_conn().execute(
        "INSERT INTO container (name, put_timestamp, delete_timestamp, stats_timestamp,"
        " object_count, bytes_used) VALUES ('c', ?, '0', ?, 4, 40)", (T[1], T[1]))
    old.close()
    b = AccountBroker(path, account="AUTH_t")
    assert b.get_info()["policy_stats"] == {
        0: {"container_count": 1, "object_count": 4, "bytes_used": 40}}
    _, rows = b.list_containers(ListingParams(10, None, None, None, None, False, "json"))
    assert rows == [("c", 4, 40, T[1], 0)]
