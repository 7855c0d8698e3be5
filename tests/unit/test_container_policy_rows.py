"""Container rows record their object's policy; replicas' policies converge on the first one.

Issue 39's container reconciler, the broker side: the convergence rule (merge_metadata's
first-wins keys), rows keeping their policy through merges and replication, the misplaced
rows query, and the migration of a DB made before rows had a policy.
"""

from __future__ import annotations

import itertools
import sqlite3

from swiftlite.common.policies import CONTAINER_POLICY_KEY as KEY
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.account_reporter import needs_report
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.listing import ListingParams
from swiftlite.db.metadata import merge_metadata
from swiftlite.db.replication_server import item_rows


def t(n: int) -> str:
    return Timestamp(1_700_000_000_00000 + n).internal


def make(tmp_path, name: str, put: str, policy: str | None) -> ContainerBroker:
    b = ContainerBroker(str(tmp_path / name / "c.db"), account="a", container="c")
    b.put_db(put, {KEY: [policy, put]} if policy is not None else {})
    return b


def row(name: str, created_at: str, policy: int | None, deleted: int = 0) -> dict:
    r = {"name": name, "created_at": created_at, "size": 0 if deleted else 3,
         "content_type": "t", "etag": "e", "deleted": deleted}
    if policy is not None:
        r["storage_policy_index"] = policy
    return r


# -- the convergence rule ------------------------------------------------------------------

def test_first_wins_keeps_the_oldest_live_value_in_any_order():
    pairs = [["1", t(20)], ["0", t(10)], ["2", t(30)]]
    for order in itertools.permutations(pairs):
        meta: dict = {}
        for p in order:
            merge_metadata(meta, {KEY: p}, (KEY,))
        assert meta[KEY] == ["0", t(10)]
    # Other keys stay newest-wins.
    meta = {"x-container-meta-a": ["old", t(1)]}
    merge_metadata(meta, {"x-container-meta-a": ["new", t(2)]}, (KEY,))
    assert meta["x-container-meta-a"] == ["new", t(2)]


def test_first_wins_tie_is_the_lower_value():
    for order in (["1", "0"], ["0", "1"]):
        meta: dict = {}
        for v in order:
            merge_metadata(meta, {KEY: [v, t(5)]}, (KEY,))
        assert meta[KEY] == ["0", t(5)]


def test_a_delete_clears_and_a_recreation_takes_its_new_policy():
    meta = {KEY: ["0", t(10)]}
    assert merge_metadata(meta, {KEY: ["", t(20)]}, (KEY,), dead_before=t(20))  # deleted
    assert meta[KEY] == ["", t(20)]
    # An old incarnation's value never comes back once the delete is known.
    assert not merge_metadata(meta, {KEY: ["0", t(10)]}, (KEY,), dead_before=t(20))
    # Created again, on another policy: newer than the delete, it wins.
    assert merge_metadata(meta, {KEY: ["1", t(30)]}, (KEY,), dead_before=t(20))
    assert meta[KEY] == ["1", t(30)]
    # A replica that missed the delete and the re-creation sends its old value: dead here.
    assert not merge_metadata(meta, {KEY: ["0", t(10)]}, (KEY,), dead_before=t(20))
    assert meta[KEY] == ["1", t(30)]


def test_replicas_created_at_once_converge_on_the_first(tmp_path):
    """Three replicas, three policies; every replica pushes its metadata to every other (as
    the replicator's sync does) in every order: all end on the first-created one's."""
    brokers = [make(tmp_path, "r0", t(20), "1"), make(tmp_path, "r1", t(10), "2"),
               make(tmp_path, "r2", t(30), "0")]
    for src, dst in itertools.permutations(brokers, 2):
        dst.merge_timestamps(src.get_info()["put_timestamp"])
        dst.update_metadata(src.get_metadata())
    assert {b.get_policy() for b in brokers} == {2}
    # The replicas that changed policy report themselves to the account again (it keeps
    # stats per policy); the first-created one did not change.
    for b in brokers:
        info = b.get_info()
        b.set_reported(info["put_timestamp"], info["delete_timestamp"], 0, 0)
    brokers[0].update_metadata(brokers[1].get_metadata())
    assert needs_report(brokers[0].get_info()) is False  # nothing changed this time
    c = make(tmp_path, "r3", t(40), "0")
    info = c.get_info()
    c.set_reported(info["put_timestamp"], info["delete_timestamp"], 0, 0)
    c.update_metadata(brokers[1].get_metadata())
    assert c.get_policy() == 2 and needs_report(c.get_info())


def test_recreating_a_deleted_container_with_another_policy(tmp_path):
    a = make(tmp_path, "a", t(10), "0")
    b = make(tmp_path, "b", t(10), "0")
    assert a.delete_db(t(20))[0] == "deleted"
    a.put_db(t(30), {KEY: ["1", t(30)]})
    assert a.get_policy() == 1
    # b missed both; the sync (timestamps first, then metadata) brings it along ...
    info = a.get_info()
    b.merge_timestamps(info["put_timestamp"], info["delete_timestamp"])
    b.update_metadata(a.get_metadata())
    assert b.get_policy() == 1
    # ... and b's push of its stale state back changes nothing on a.
    a.update_metadata({KEY: ["0", t(10)]})
    assert a.get_policy() == 1


# -- rows ------------------------------------------------------------------------------------

def test_rows_keep_their_policy_and_a_missing_one_is_the_containers(tmp_path):
    b = make(tmp_path, "c", t(1), "1")
    b.merge_items([row("a", t(2), 0), row("b", t(2), None), row("c", t(2), 1)])
    rows = {r["name"]: r["storage_policy_index"] for r in b.get_items_since(-1, 10)}
    assert rows == {"a": 0, "b": 1, "c": 1}
    policy, misplaced = b.get_misplaced(-1, 10)
    assert policy == 1 and [r["name"] for r in misplaced] == ["a"]
    # Listings are as before: no policy column.
    _, listed = b.list_items(_params())
    assert [len(r) for r in listed] == [5, 5, 5]


def test_same_time_row_of_the_containers_policy_wins(tmp_path):
    b = make(tmp_path, "c", t(1), "1")
    b.merge_items([row("o", t(5), 0)])
    before = b.get_max_row()
    # The reconciler's copy: same timestamp, the container's policy: it replaces the row
    # (a new ROWID, so replication carries it) ...
    assert b.merge_items([row("o", t(5), 1)]) == 1
    assert b.get_max_row() > before
    assert b.get_misplaced(-1, 10)[1] == []
    # ... and the misplaced one at that time never comes back; a newer write still wins.
    assert b.merge_items([row("o", t(5), 0)]) == 0
    assert b.merge_items([row("o", t(6), 0)]) == 1
    assert [r["name"] for r in b.get_misplaced(-1, 10)[1]] == ["o"]
    # Within one batch too.
    assert b.merge_items([row("p", t(7), 1), row("p", t(7), 0)]) == 1
    assert b.get_items_since(-1, 10)[-1]["storage_policy_index"] == 1


def test_replication_carries_the_policy(tmp_path):
    src = make(tmp_path, "s", t(1), "1")
    dst = make(tmp_path, "d", t(1), "1")
    src.merge_items([row("x", t(2), 0), row("y", t(3), 1)])
    dst.merge_items(item_rows(src.get_items_since(-1, 10), dst.ITEM_COLUMNS))
    got = {r["name"]: r["storage_policy_index"] for r in dst.get_items_since(-1, 10)}
    assert got == {"x": 0, "y": 1}


def test_db_made_before_row_policies_is_migrated(tmp_path):
    path = tmp_path / "old" / "c.db"
    b = make(tmp_path, "old", t(1), "1")
    b.merge_items([row("o", t(2), 1)])
    b.close()
    # Make it look like an old DB: the object table without the column.
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE object2 (ROWID INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL, size INTEGER NOT NULL,
            content_type TEXT NOT NULL, etag TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0);
        INSERT INTO object2 SELECT ROWID, name, created_at, size, content_type, etag, deleted
            FROM object;
        DROP TABLE object; ALTER TABLE object2 RENAME TO object;""")
    conn.close()
    b2 = ContainerBroker(str(path))
    assert b2.get_items_since(-1, 10)[0]["storage_policy_index"] == 1  # the container's
    assert b2.get_misplaced(-1, 10) == (1, [])


def _params() -> ListingParams:
    return ListingParams(100, None, None, None, None, False, "json")


def test_a_container_naming_no_policy_has_no_misplaced_rows(tmp_path):
    """A DB that names no policy (made before policies, or a shard) is never reconciled."""
    b = make(tmp_path, "n", t(1), None)
    b.merge_items([row("o", t(2), 1)])
    assert b.get_misplaced(-1, 10) == (None, [])
    c = make(tmp_path, "z", t(1), "0")
    c.merge_items([row("o", t(2), 1)])
    assert [r["name"] for r in c.get_misplaced(-1, 10)[1]] == ["o"]
