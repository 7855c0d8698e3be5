"""The container DB: one row per object name (live or tombstone), newest created_at wins."""

from __future__ import annotations

import sqlite3
from typing import Any

from swiftlite.container.shard_broker import ShardingMixin
from swiftlite.db.broker import DatabaseBroker
from swiftlite.db.listing import ListingParams

OBJECT_SCHEMA = """
CREATE TABLE object (
    ROWID INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    size INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    etag TEXT NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
"""
# The newest created_at of the rows this DB holds: the stamp of its account report, so a
# replica that lacks the newest rows loses to one that has them. A column of its own (not in
# the schema every DB shares); a DB made before it gets it when first opened.
STATS_TIMESTAMP = "stats_timestamp"
_ADD_STATS_TIMESTAMP = (f"ALTER TABLE stat ADD COLUMN {STATS_TIMESTAMP} TEXT NOT NULL"
                        " DEFAULT '0000000000.00000'")

_CHUNK = 500  # names per IN (...) lookup; well under SQLite's variable limit


class ContainerBroker(ShardingMixin, DatabaseBroker):
    ITEMS_TABLE = "object"
    ITEMS_SCHEMA = OBJECT_SCHEMA + _ADD_STATS_TIMESTAMP + ";\n"
    ITEM_COLUMNS = ("name", "created_at", "size", "content_type", "etag", "deleted")
    KIND = "container"
    LISTING_COLUMNS = ("name", "created_at", "size", "content_type", "etag")

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
        return conn

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
        # Newest per name within the batch first, so the table sees each name once.
        newest: dict[str, dict[str, Any]] = {}
        for r in rows:
            cur = newest.get(r["name"])
            if cur is None or r["created_at"] > cur["created_at"]:
                newest[r["name"]] = r
        names = list(newest)
        existing: dict[str, tuple[str, int, int]] = {}
        for i in range(0, len(names), _CHUNK):
            chunk = names[i:i + _CHUNK]
            q = ",".join("?" * len(chunk))
            for name, created_at, size, deleted in conn.execute(
                    f"SELECT name, created_at, size, deleted FROM object WHERE name IN ({q})",
                    chunk):
                existing[name] = (created_at, size, deleted)
        d_count = d_bytes = 0
        drop: list[tuple[str]] = []
        add: list[tuple] = []
        for name, r in newest.items():
            old = existing.get(name)
            if old is not None:
                if old[0] >= r["created_at"]:
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
                        r.get("etag") or "", deleted))
        if drop:
            # Delete + insert (not UPDATE) so a changed row gets a new ROWID for replication.
            conn.executemany("DELETE FROM object WHERE name = ?", drop)
        if add:
            conn.executemany(
                "INSERT INTO object (name, created_at, size, content_type, etag, deleted)"
                " VALUES (?, ?, ?, ?, ?, ?)", add)
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
