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
