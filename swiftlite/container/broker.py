"""The container DB: one row per object name (live or tombstone), newest created_at wins.

Each row records the storage policy its object was written under (`storage_policy_index`,
sent by the object server with its update). Normally that is the container's policy; a row
of another policy (a split brain: replicas created at once with different policies, see
`policy_merge`) is misplaced, and the container-reconciler moves its object. Between two
rows of one name with the same created_at, the one of the container's policy wins: the
reconciler's copy of an object keeps the original's timestamp (newer writes still win) and
its row must still replace the misplaced one.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from swiftlite.common.policies import CONTAINER_POLICY_KEY
from swiftlite.container.shard_broker import ShardingMixin
from swiftlite.db.broker import DatabaseBroker
from swiftlite.db.listing import ListingParams
from swiftlite.db.transactions import write_txn

OBJECT_SCHEMA = """
CREATE TABLE object (
    ROWID INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    size INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    etag TEXT NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    storage_policy_index INTEGER NOT NULL DEFAULT 0
);
"""
# The newest created_at of the rows this DB holds: the stamp of its account report, so a
# replica that lacks the newest rows loses to one that has them. A column of its own (not in
# the schema every DB shares); a DB made before it gets it when first opened.
STATS_TIMESTAMP = "stats_timestamp"
_ADD_STATS_TIMESTAMP = (f"ALTER TABLE stat ADD COLUMN {STATS_TIMESTAMP} TEXT NOT NULL"
                        " DEFAULT '0000000000.00000'")

# A DB made before rows recorded their policy: its rows were all written under the
# container's own policy (the only one a container could have then).
_ADD_ROW_POLICY = "ALTER TABLE object ADD COLUMN storage_policy_index INTEGER NOT NULL DEFAULT 0"

_CHUNK = 500  # names per IN (...) lookup; well under SQLite's variable limit


def container_policy(metadata: dict[str, Any]) -> int | None:
    """The policy index a container's metadata names; None when it names none (a DB made
    before policies, or a shard: their rows are on policy 0 or their root's)."""
    pair = metadata.get(CONTAINER_POLICY_KEY)
    if not pair or not pair[0]:
        return None
    try:
        return int(pair[0])
    except ValueError:
        return None


class ContainerBroker(ShardingMixin, DatabaseBroker):
    ITEMS_TABLE = "object"
    ITEMS_SCHEMA = OBJECT_SCHEMA + _ADD_STATS_TIMESTAMP + ";\n"
    ITEM_COLUMNS = ("name", "created_at", "size", "content_type", "etag", "deleted",
                    "storage_policy_index")
    KIND = "container"
    LISTING_COLUMNS = ("name", "created_at", "size", "content_type", "etag")
    FIRST_WINS_KEYS = (CONTAINER_POLICY_KEY,)  # see db.broker.merge_metadata

    def _tombstone_column(self) -> str:
        return "created_at"

    def _connect(self, path: str) -> sqlite3.Connection:
        conn = super()._connect(path)
        cols = {row[1] for row in conn.execute("PRAGMA table_info(stat)")}
        if cols and STATS_TIMESTAMP not in cols:  # made before the column: add it once
            try:
                conn.execute(_ADD_STATS_TIMESTAMP)
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another worker added it meanwhile
                    raise
        cols = {row[1] for row in conn.execute("PRAGMA table_info(object)")}
        if cols and "storage_policy_index" not in cols:
            self._add_row_policy(conn, path)
        return conn

    @staticmethod
    def _add_row_policy(conn: sqlite3.Connection, path: str) -> None:
        try:
            with write_txn(conn, path):
                conn.execute(_ADD_ROW_POLICY)
                meta = json.loads(conn.execute("SELECT metadata FROM stat").fetchone()[0])
                policy = container_policy(meta) or 0
                if policy:  # the column's default is 0: only another policy rewrites rows
                    conn.execute("UPDATE object SET storage_policy_index = ?", (policy,))
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):  # another worker migrated it meanwhile
                raise

    @staticmethod
    def _policy_locked(conn: sqlite3.Connection) -> int | None:
        return container_policy(
            json.loads(conn.execute("SELECT metadata FROM stat").fetchone()[0]))

    def get_policy(self) -> int | None:
        """The container's policy index as stored (None: it names none)."""
        with self._lock:
            return self._policy_locked(self._get_conn())

    def get_misplaced(self, since: int, limit: int) -> tuple[int | None, list[dict[str, Any]]]:
        """(the container's policy, rows after ROWID `since` written under another policy,
        oldest change first, at most `limit`): the container-reconciler's queue. A scan of
        the rows after the cursor (the reconciler's sync point), not an index: a row that
        changes gets a new ROWID, so each pass reads only what changed since the last."""
        cols = ", ".join(("ROWID", *self.ITEM_COLUMNS))
        with self._lock:
            conn = self._get_conn()
            policy = self._policy_locked(conn)
            if policy is None:
                return None, []
            cur = conn.execute(f"SELECT {cols} FROM object WHERE ROWID > ? AND"
                               " storage_policy_index != ? ORDER BY ROWID LIMIT ?",
                               (since, policy, limit))
            names = ["ROWID", *self.ITEM_COLUMNS]
            return policy, [dict(zip(names, r, strict=True)) for r in cur]

    def _info_locked(self, conn: sqlite3.Connection) -> dict[str, Any]:
        info = super()._info_locked(conn)
        self.sharding_info_locked(conn, info)  # a sharded root counts its shards' rows
        return info

    def _empty_locked(self, conn: sqlite3.Connection) -> bool:
        if self._retired_locked(conn):
            return True  # a merged-away shard: its rows were handed on, it can go
        totals = self._sharded_totals_locked(conn)
        return super()._empty_locked(conn) if totals is None else totals[0] == 0

    def _merge_items_locked(self, conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> int:
        own = self._policy_locked(conn)
        own_or_0 = own or 0

        def key(r: dict[str, Any]) -> tuple[str, bool]:
            # Newest wins; at the same time, the row of the container's own policy.
            return r["created_at"], r["storage_policy_index"] == own
        # Newest per name within the batch first, so the table sees each name once.
        newest: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r.get("storage_policy_index") is None:  # a sender that does not say
                r = {**r, "storage_policy_index": own_or_0}
            cur = newest.get(r["name"])
            if cur is None or key(r) > key(cur):
                newest[r["name"]] = r
        names = list(newest)
        existing: dict[str, tuple[str, int, int, int]] = {}
        for i in range(0, len(names), _CHUNK):
            chunk = names[i:i + _CHUNK]
            q = ",".join("?" * len(chunk))
            for name, created_at, size, deleted, policy in conn.execute(
                    "SELECT name, created_at, size, deleted, storage_policy_index FROM object"
                    f" WHERE name IN ({q})", chunk):
                existing[name] = (created_at, size, deleted, policy)
        d_count = d_bytes = 0
        drop: list[tuple[str]] = []
        add: list[tuple] = []
        for name, r in newest.items():
            old = existing.get(name)
            if old is not None:
                if (old[0], old[3] == own) >= key(r):
                    continue  # ours is as new or newer: a stale row changes nothing
                drop.append((name,))
                if not old[2]:
                    d_count -= 1
                    d_bytes -= old[1]
            deleted = 1 if r.get("deleted") else 0
            size = 0 if deleted else int(r.get("size") or 0)
            if not deleted:
                d_count += 1
                d_bytes += size
            add.append((name, r["created_at"], size, r.get("content_type") or "",
                        r.get("etag") or "", deleted, int(r["storage_policy_index"])))
        if drop:
            # Delete + insert (not UPDATE) so a changed row gets a new ROWID for replication.
            conn.executemany("DELETE FROM object WHERE name = ?", drop)
        if add:
            conn.executemany(
                "INSERT INTO object (name, created_at, size, content_type, etag, deleted,"
                " storage_policy_index) VALUES (?, ?, ?, ?, ?, ?, ?)", add)
        if d_count or d_bytes:
            conn.execute("UPDATE stat SET object_count = object_count + ?,"
                         " bytes_used = bytes_used + ?", (d_count, d_bytes))
        if add:
            conn.execute(f"UPDATE stat SET {STATS_TIMESTAMP} = MAX({STATS_TIMESTAMP}, ?)",
                         (max(r[1] for r in add),))
        return len(add)

    def list_objects(self, params: ListingParams) -> tuple[dict[str, Any], list[tuple]]:
        """(info, rows): rows are (name, created_at, size, content_type, etag) or (subdir,)."""
        return self.list_items(params)

    def list_objects_body(self, params: ListingParams) -> tuple[dict[str, Any], bytes, str]:
        return self.list_items_body(params)
