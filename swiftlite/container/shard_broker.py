"""What a container DB adds for sharding: its shard ranges, its own state, cleave progress.

A mixin of ContainerBroker (which supplies the connection, lock and `object` table). Every
method blocks; callers run them through threadpool.run_blocking.

- `shard_range` rows merge newest-wins per field group (`shard_ranges.merge_range`); the
  DB's own row (name = its account/container) carries its sharding state (a root) or its
  bounds (a shard).
- `shard_progress` is local bookkeeping of the sharder on this replica only (cleave cursors,
  the forwarding point): it never replicates, so a replica that takes over starts again,
  which is safe because copying rows is idempotent.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from swiftlite.container.shard_ranges import (
    ShardRange,
    State,
    live,
    merge_range,
    split_points,
)
from swiftlite.db.transactions import write_txn

ROOT_KEY = "x-container-sysmeta-shard-root"  # a shard's root, quoted (set when made)
_PROGRESS_SCHEMA = ("CREATE TABLE IF NOT EXISTS shard_progress "
                    "(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
_RANGE_COLS = ("name", "timestamp", "lower", "upper", "object_count", "bytes_used",
               "meta_timestamp", "deleted", "state", "state_timestamp")


class ShardingMixin:
    # Provided by DatabaseBroker.
    _lock: Any
    account: str
    container: str | None

    _get_conn: Any
    get_metadata: Any

    # -- ranges --------------------------------------------------------------------------
    @staticmethod
    def _own_name(conn: sqlite3.Connection) -> str:
        account, container = conn.execute("SELECT account, container FROM stat").fetchone()
        return f"{account}/{container}"

    def _ranges_locked(self, conn: sqlite3.Connection) -> list[ShardRange]:
        cur = conn.execute(f"SELECT {', '.join(_RANGE_COLS)} FROM shard_range")
        return [ShardRange(*row) for row in cur]

    def get_ranges(self) -> tuple[ShardRange | None, list[ShardRange]]:
        """(own row or None, every other row, deleted ones included)."""
        with self._lock:
            conn = self._get_conn()
            own_name = self._own_name(conn)
            rows = self._ranges_locked(conn)
        own = next((r for r in rows if r.name == own_name), None)
        return own, [r for r in rows if r.name != own_name]

    def routing(self) -> tuple[int, list[ShardRange]]:
        """(own state, live ranges in order): what the server routes updates with. A shard
        merged back into its root routes everything there: [its root's range]."""
        own, ranges = self.get_ranges()
        if own is not None and own.state == State.SHRUNK:
            root = unquote(self.get_metadata().get(ROOT_KEY, [""])[0])
            return State.SHRUNK, ([ShardRange(name=root, timestamp=own.timestamp)]
                                  if "/" in root else [])
        return (own.state if own is not None else State.UNSHARDED), live(ranges)

    def _merge_ranges_locked(self, conn: sqlite3.Connection,
                             incoming: Iterable[ShardRange]) -> int:
        current = {r.name: r for r in self._ranges_locked(conn)}
        changed = 0
        for new in incoming:
            merged = merge_range(current.get(new.name), new)
            if merged is None:
                continue
            conn.execute(
                f"INSERT OR REPLACE INTO shard_range ({', '.join(_RANGE_COLS)})"
                f" VALUES ({', '.join('?' * len(_RANGE_COLS))})",
                tuple(getattr(merged, c) for c in _RANGE_COLS))
            current[new.name] = merged
            changed += 1
        return changed

    def merge_ranges(self, incoming: Iterable[ShardRange]) -> int:
        with self._lock:
            conn = self._get_conn()
            with write_txn(conn, self.db_file):
                changed = self._merge_ranges_locked(conn, incoming)
            return changed

    def merge_shard_ranges(self, rows: list[dict[str, Any]]) -> int:
        """The replicator's form: raw row dicts."""
        return self.merge_ranges(ShardRange.from_dict(r) for r in rows) if rows else 0

    def get_shard_ranges(self) -> list[dict[str, Any]]:
        own, ranges = self.get_ranges()
        return [r.to_dict() for r in ([own] if own else []) + ranges]

    # -- stats of a sharded root ---------------------------------------------------------
    def _sharded_totals_locked(self, conn: sqlite3.Connection) -> tuple[int, int, str] | None:
        """(objects, bytes, newest meta_timestamp) over the shards when this DB is a sharded
        root: its own object rows are then history, the shards hold the names."""
        own = conn.execute("SELECT state FROM shard_range WHERE name = ?",
                           (self._own_name(conn),)).fetchone()
        if own is None or own[0] not in (State.SHARDED, State.SHRINKING):
            return None
        row = conn.execute(
            "SELECT IFNULL(SUM(object_count), 0), IFNULL(SUM(bytes_used), 0),"
            " IFNULL(MAX(meta_timestamp), '') FROM shard_range"
            " WHERE deleted = 0 AND state IN (?, ?) AND name != ?",
            (int(State.ACTIVE), int(State.SHRINKING), self._own_name(conn))).fetchone()
        return int(row[0]), int(row[1]), row[2]

    def _retired_locked(self, conn: sqlite3.Connection) -> bool:
        """A shard merged back into its root or into a neighbour (own row SHRUNK): every
        row it holds was copied on, so it counts as empty for a DELETE."""
        own = conn.execute("SELECT state FROM shard_range WHERE name = ?",
                           (self._own_name(conn),)).fetchone()
        return own is not None and own[0] == State.SHRUNK

    def sharding_info_locked(self, conn: sqlite3.Connection, info: dict[str, Any]) -> None:
        own = conn.execute("SELECT state FROM shard_range WHERE name = ?",
                           (self._own_name(conn),)).fetchone()
        info["sharding_state"] = int(own[0]) if own else int(State.UNSHARDED)
        if info["sharding_state"] in (State.SHARDED, State.SHRINKING):
            totals = self._sharded_totals_locked(conn)
            if totals is not None:
                info["db_object_count"] = info["object_count"]
                info["object_count"], info["bytes_used"], newest = totals
                # The totals are the shards' as of their newest stat report to this root.
                info["stats_timestamp"] = max(info.get("stats_timestamp", ""), newest)

    # -- rows for the sharder ------------------------------------------------------------
    def find_split_points(self, rows_per_shard: int, min_last: int) -> list[str]:
        """Split points from the live names in order, streamed (never all in memory)."""
        with self._lock:
            cur = self._get_conn().execute(
                "SELECT name FROM object WHERE deleted = 0 ORDER BY name")
            return split_points((r[0] for r in cur), rows_per_shard, min_last)

    def holds_rows_outside(self, lower: str, upper: str) -> bool:
        """Whether a row's name lies outside (lower, upper] ('' upper: no bound): a merge's
        copy into this shard is under way (an acceptor keeps its donor's rows unlisted until
        its range has grown over them). Two lookups on the name index."""
        with self._lock:
            conn = self._get_conn()
            if conn.execute("SELECT 1 FROM object WHERE name <= ? LIMIT 1",
                            (lower,)).fetchone():
                return True
            return bool(upper) and conn.execute(
                "SELECT 1 FROM object WHERE name > ? LIMIT 1", (upper,)).fetchone() is not None

    def rows_in_range(self, after: str, upper: str, limit: int) -> list[dict[str, Any]]:
        """Rows (tombstones too) with after < name <= upper ('' upper: no bound), by name."""
        cols = ("ROWID", "name", "created_at", "size", "content_type", "etag", "deleted")
        sql = f"SELECT {', '.join(cols)} FROM object WHERE name > ?"
        args: list[Any] = [after]
        if upper:
            sql += " AND name <= ?"
            args.append(upper)
        sql += " ORDER BY name LIMIT ?"
        args.append(limit)
        with self._lock:
            return [dict(zip(cols, r, strict=True))
                    for r in self._get_conn().execute(sql, args)]

    def count_range(self, lower: str, upper: str) -> tuple[int, int]:
        """(live rows, bytes) with lower < name <= upper ('' unbounded)."""
        sql = "SELECT COUNT(*), IFNULL(SUM(size), 0) FROM object WHERE deleted = 0 AND name > ?"
        args = [lower]
        if upper:
            sql += " AND name <= ?"
            args.append(upper)
        with self._lock:
            n, b = self._get_conn().execute(sql, args).fetchone()
            return int(n), int(b)

    def root_of(self) -> str | None:
        """A shard's root ("account/container"); None for a root."""
        root = unquote(self.get_metadata().get(ROOT_KEY, [""])[0])
        return root if "/" in root else None

    def count_rows(self) -> int:
        """Live rows (the sharding trigger): the stat counter, no scan."""
        with self._lock:
            return int(self._get_conn().execute("SELECT object_count FROM stat").fetchone()[0])

    # -- local progress ------------------------------------------------------------------
    def get_progress(self) -> dict[str, Any]:
        with self._lock:
            conn = self._get_conn()
            try:
                row = conn.execute(
                    "SELECT value FROM shard_progress WHERE key = 'progress'").fetchone()
            except sqlite3.OperationalError:  # no table yet: nothing recorded
                return {}
            return json.loads(row[0]) if row else {}

    def set_progress(self, progress: dict[str, Any],
                     ranges: Iterable[ShardRange] = ()) -> None:
        """Record progress (and merge range changes) in one transaction, so a kill -9
        never leaves a range's state ahead of or behind the cursor that justifies it."""
        with self._lock:
            conn = self._get_conn()
            conn.execute(_PROGRESS_SCHEMA)
            with write_txn(conn, self.db_file):
                conn.execute("INSERT OR REPLACE INTO shard_progress (key, value) VALUES"
                             " ('progress', ?)", (json.dumps(progress),))
                self._merge_ranges_locked(conn, ranges)
