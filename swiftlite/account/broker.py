"""The account DB: one row per container, merged newest-wins field by field.

put/delete timestamps each keep their maximum; a container's counts come from the newest
stat report (stats_timestamp: the newest row of the container replica that reported, so a
replica lagging behind never overrides one that has more); a row whose delete timestamp is
newer than its put timestamp is a tombstone (deleted=1), left out of listings and totals.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from swiftlite.db.broker import ZERO_TS, DatabaseBroker
from swiftlite.db.listing import ListingParams
from swiftlite.db.transactions import write_txn

CONTAINER_SCHEMA = """
CREATE TABLE container (
    ROWID INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    put_timestamp TEXT NOT NULL,
    delete_timestamp TEXT NOT NULL,
    stats_timestamp TEXT NOT NULL,
    object_count INTEGER NOT NULL,
    bytes_used INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    storage_policy_index INTEGER NOT NULL DEFAULT 0
);
""" + """
CREATE TABLE policy_stat (
    storage_policy_index INTEGER PRIMARY KEY,
    container_count INTEGER NOT NULL DEFAULT 0,
    object_count INTEGER NOT NULL DEFAULT 0,
    bytes_used INTEGER NOT NULL DEFAULT 0
);
"""
# A DB made before storage policies: its containers are all on policy 0.
_MIGRATE = """
ALTER TABLE container ADD COLUMN storage_policy_index INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS policy_stat (
    storage_policy_index INTEGER PRIMARY KEY,
    container_count INTEGER NOT NULL DEFAULT 0,
    object_count INTEGER NOT NULL DEFAULT 0,
    bytes_used INTEGER NOT NULL DEFAULT 0
);
INSERT OR REPLACE INTO policy_stat
    SELECT 0, COUNT(*), IFNULL(SUM(object_count), 0), IFNULL(SUM(bytes_used), 0)
    FROM container WHERE deleted = 0;
"""

_CHUNK = 500
_FIELDS = ("put_timestamp", "delete_timestamp", "stats_timestamp", "object_count",
           "bytes_used", "deleted", "storage_policy_index")


class AccountBroker(DatabaseBroker):
    ITEMS_TABLE = "container"
    ITEMS_SCHEMA = CONTAINER_SCHEMA
    ITEM_COLUMNS = ("name", *_FIELDS)
    KIND = "account"
    LISTING_COLUMNS = ("name", "object_count", "bytes_used", "put_timestamp",
                       "storage_policy_index")

    def _connect(self, path: str) -> sqlite3.Connection:
        conn = super()._connect(path)
        cols = [r[1] for r in conn.execute("PRAGMA table_info(container)")]
        if cols and "storage_policy_index" not in cols:
            with write_txn(conn, path):
                for stmt in _MIGRATE.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
        return conn

    def _info_locked(self, conn: sqlite3.Connection) -> dict[str, Any]:
        info = super()._info_locked(conn)
        info["policy_stats"] = {
            r[0]: {"container_count": r[1], "object_count": r[2], "bytes_used": r[3]}
            for r in conn.execute("SELECT storage_policy_index, container_count, object_count,"
                                  " bytes_used FROM policy_stat")}
        return info

    def _tombstone_column(self) -> str:
        return "delete_timestamp"

    def _empty_locked(self, conn: sqlite3.Connection) -> bool:
        return True  # an account is deleted regardless of its containers (reaping is later)

    @staticmethod
    def _combine(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
        if old is None:
            out = dict(new)
        else:
            out = dict(old)
            out["put_timestamp"] = max(old["put_timestamp"], new["put_timestamp"])
            out["delete_timestamp"] = max(old["delete_timestamp"], new["delete_timestamp"])
            # A container's own report with the same stamp replaces the counts too: its
            # replicas stamp a report with their newest row, so a replica that merged older
            # rows since reports again under the same stamp (replicated rows, merged in any
            # order, need the strict order to agree).
            if new["stats_timestamp"] > old["stats_timestamp"] or (
                    new.get("report") and new["stats_timestamp"] == old["stats_timestamp"]):
                out["stats_timestamp"] = new["stats_timestamp"]
                out["object_count"] = new["object_count"]
                out["bytes_used"] = new["bytes_used"]
            # The container's policy is the one its newest incarnation (PUT) reports.
            if new["put_timestamp"] >= old["put_timestamp"]:
                out["storage_policy_index"] = new["storage_policy_index"]
        out["deleted"] = 1 if out["delete_timestamp"] > out["put_timestamp"] else 0
        return out

    def _merge_items_locked(self, conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> int:
        norm: dict[str, dict[str, Any]] = {}
        for r in rows:
            rec = {"name": r["name"],
                   "put_timestamp": r.get("put_timestamp") or ZERO_TS,
                   "delete_timestamp": r.get("delete_timestamp") or ZERO_TS,
                   "stats_timestamp": r.get("stats_timestamp") or ZERO_TS,
                   "object_count": int(r.get("object_count") or 0),
                   "bytes_used": int(r.get("bytes_used") or 0),
                   "storage_policy_index": int(r.get("storage_policy_index") or 0),
                   "report": bool(r.get("report"))}
            norm[rec["name"]] = self._combine(norm.get(rec["name"]), rec)
        names = list(norm)
        existing: dict[str, dict[str, Any]] = {}
        for i in range(0, len(names), _CHUNK):
            chunk = names[i:i + _CHUNK]
            q = ",".join("?" * len(chunk))
            cur = conn.execute(f"SELECT name, {', '.join(_FIELDS)} FROM container"
                               f" WHERE name IN ({q})", chunk)
            for row in cur:
                existing[row[0]] = dict(zip(("name", *_FIELDS), row, strict=True))
        d_containers = d_objects = d_bytes = 0
        # policy index -> [containers, objects, bytes] deltas, kept in policy_stat
        d_policy: dict[int, list[int]] = {}
        drop: list[tuple[str]] = []
        add: list[tuple] = []
        for name, rec in norm.items():
            old = existing.get(name)
            merged = self._combine(old, rec)
            if old is not None:
                if all(merged[f] == old[f] for f in _FIELDS):
                    continue  # nothing newer: a stale report changes nothing
                drop.append((name,))
                if not old["deleted"]:
                    d_containers -= 1
                    d_objects -= old["object_count"]
                    d_bytes -= old["bytes_used"]
                    d = d_policy.setdefault(old["storage_policy_index"], [0, 0, 0])
                    d[0] -= 1
                    d[1] -= old["object_count"]
                    d[2] -= old["bytes_used"]
            if not merged["deleted"]:
                d_containers += 1
                d_objects += merged["object_count"]
                d_bytes += merged["bytes_used"]
                d = d_policy.setdefault(merged["storage_policy_index"], [0, 0, 0])
                d[0] += 1
                d[1] += merged["object_count"]
                d[2] += merged["bytes_used"]
            add.append((name, *(merged[f] for f in _FIELDS)))
        if drop:
            conn.executemany("DELETE FROM container WHERE name = ?", drop)
        if add:
            conn.executemany(
                f"INSERT INTO container (name, {', '.join(_FIELDS)})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", add)
        if d_containers or d_objects or d_bytes:
            conn.execute("UPDATE stat SET container_count = container_count + ?,"
                         " object_count = object_count + ?, bytes_used = bytes_used + ?",
                         (d_containers, d_objects, d_bytes))
        for index, (dc, do, db) in d_policy.items():
            if dc or do or db:
                conn.execute(
                    "INSERT INTO policy_stat VALUES (?, ?, ?, ?) ON CONFLICT"
                    " (storage_policy_index) DO UPDATE SET"
                    " container_count = container_count + excluded.container_count,"
                    " object_count = object_count + excluded.object_count,"
                    " bytes_used = bytes_used + excluded.bytes_used", (index, dc, do, db))
        return len(add)

    def list_containers(self, params: ListingParams) -> tuple[dict[str, Any], list[tuple]]:
        """(info, rows): rows are (name, object_count, bytes_used, put_timestamp) or (subdir,)."""
        return self.list_items(params)

    def list_containers_body(self, params: ListingParams) -> tuple[dict[str, Any], bytes, str]:
        return self.list_items_body(params)
