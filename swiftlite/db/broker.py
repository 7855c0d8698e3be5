"""The SQLite broker containers and accounts share: one WAL-mode file per DB.

Every method here blocks; servers call them through threadpool.run_blocking, and a
server-side operation is one method so it costs one thread hop. One connection per broker,
serialised by a lock (SQLite serialises writers anyway; the lock keeps the connection
single-threaded).

Shape kept for the DB replicator and the sharder:
- item rows (objects or containers) carry timestamps and merge newest-wins; a changed row is
  deleted and re-inserted so it gets a new ROWID, and `get_items_since(row_id)` is exactly
  "what changed after the peer's sync point";
- deleted rows stay as tombstones (deleted=1) until `reclaim(age)`;
- `sync` holds per-peer sync points, `shard_range` the sharder's ranges (containers only;
  the replicator carries them with `get_shard_ranges`/`merge_shard_ranges`);
- metadata is {key: [value, timestamp]} merged per key; value "" is a deletion.

Fault injection (tests only): `SWIFTLITE_DB_COMMIT_DELAY_MS="500"` in a server's
environment makes each of its item-row transactions take that much longer, the way a slow
disk's do, so a test can see the updates that arrive meanwhile share the next one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from swiftlite.common.constraints import check_stored_metadata
from swiftlite.common.fsutil import fsync_dir
from swiftlite.common.timestamp import Timestamp
from swiftlite.db.listing import Bounds, ListingParams, bounds_sql, render_body, walk
from swiftlite.db.metadata import Metadata, merge_metadata
from swiftlite.db.transactions import begin_write, write_txn

ZERO_TS = Timestamp(0).internal

COMMIT_DELAY_ENV = "SWIFTLITE_DB_COMMIT_DELAY_MS"
_commit_delay = float(os.environ.get(COMMIT_DELAY_ENV) or 0) / 1000  # tests only

COMMON_SCHEMA = """
CREATE TABLE stat (
    account TEXT NOT NULL,
    container TEXT,
    id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    put_timestamp TEXT NOT NULL,
    delete_timestamp TEXT NOT NULL DEFAULT '0000000000.00000',
    status_changed_at TEXT NOT NULL,
    object_count INTEGER NOT NULL DEFAULT 0,
    bytes_used INTEGER NOT NULL DEFAULT 0,
    container_count INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}',
    -- Containers: where and what was last reported to the account (coalesced updates).
    account_nodes TEXT NOT NULL DEFAULT '{}',
    reported_put_timestamp TEXT NOT NULL DEFAULT '0000000000.00000',
    reported_delete_timestamp TEXT NOT NULL DEFAULT '0000000000.00000',
    reported_object_count INTEGER NOT NULL DEFAULT -1,
    reported_bytes_used INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE sync (
    remote_id TEXT PRIMARY KEY,
    sync_point INTEGER NOT NULL,
    updated_at TEXT NOT NULL
);
-- Filled by the sharder later: the namespace of a container split into ranges.
CREATE TABLE shard_range (
    ROWID INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    timestamp TEXT NOT NULL,
    lower TEXT NOT NULL DEFAULT '',
    upper TEXT NOT NULL DEFAULT '',
    object_count INTEGER NOT NULL DEFAULT 0,
    bytes_used INTEGER NOT NULL DEFAULT 0,
    meta_timestamp TEXT NOT NULL DEFAULT '0000000000.00000',
    deleted INTEGER NOT NULL DEFAULT 0,
    state INTEGER NOT NULL DEFAULT 0,
    state_timestamp TEXT NOT NULL DEFAULT '0000000000.00000'
);
"""

STAT_KEYS = ("account", "container", "id", "created_at", "put_timestamp", "delete_timestamp",
             "status_changed_at", "object_count", "bytes_used", "container_count")


class DatabaseNotFound(Exception):
    pass


class MetadataLimit(ValueError):
    """A change would take the DB's stored metadata past Swift's limits (a 400)."""


class Busy(Exception):
    """Another writer held the DB past the caller's `wait`; nothing was applied."""


class DatabaseBroker:
    """Base broker; subclasses define the item table and how its rows merge."""

    ITEMS_TABLE = ""
    ITEMS_SCHEMA = ""
    ITEM_COLUMNS: tuple[str, ...] = ()
    KIND = ""  # "account" | "container": names the listing's XML and its owner in info
    LISTING_COLUMNS: tuple[str, ...] = ()  # a listing row (of live items), name first
    FIRST_WINS_KEYS: tuple[str, ...] = ()  # metadata keys whose first value wins (merge_metadata)

    def __init__(self, db_file: str, synchronous: str = "FULL", busy_timeout: float = 25.0,
                 account: str = "", container: str | None = None,
                 wal_autocheckpoint: int | None = None) -> None:
        """`wal_autocheckpoint`: WAL pages after which a commit checkpoints (None: SQLite's
        1000). An update-log server raises it (small commits over many DBs)."""
        self.db_file = db_file
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.wal_autocheckpoint = wal_autocheckpoint
        self.account = account
        self.container = container
        self._conn: sqlite3.Connection | None = None
        self._round_mode: tuple[str, float] | None = None  # see _set_round_mode
        self._lock = threading.Lock()
        # Rows a device round logged durably but has not applied yet (see add_pending);
        # their own lock, so a round can add to them while a listing holds self._lock.
        self._pending: list[dict[str, Any]] = []
        self._pending_since = 0.0
        self._pending_lock = threading.Lock()
        # In-process counters: how many item transactions merged how many updates.
        self.item_commits = 0
        self.items_merged = 0

    # -- connection ----------------------------------------------------------------------
    def _connect(self, path: str) -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit fsyncs the WAL, so an acknowledged update survives power loss.
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA temp_store=MEMORY")
        if self.wal_autocheckpoint is not None:
            conn.execute(f"PRAGMA wal_autocheckpoint={int(self.wal_autocheckpoint)}")
        return conn

    def _open(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            if not os.path.exists(self.db_file):
                raise DatabaseNotFound(self.db_file)
            conn = self._conn = self._connect(self.db_file)
        return conn

    def _get_conn(self) -> sqlite3.Connection:
        """The connection, for any use but a device round's merge: rows still held are
        applied first (every read sees every acknowledged update), and the connection is
        back in the server's own mode. Caller holds self._lock."""
        conn = self._open()
        if self._pending:
            self._apply_pending_locked(conn, self.busy_timeout)
        self._set_round_mode(conn, None)  # this write must flush and may wait its turn
        return conn

    def _set_round_mode(self, conn: sqlite3.Connection, mode: tuple[str, float] | None,
                        ) -> None:
        """Switch the connection between the server's settings (None) and those of a device
        commit round, (synchronous, wait): NORMAL when the update log flushes the rows,
        and SQLite's lock waited for `wait` seconds at most. A round leaves the connection
        so (rounds come one after another on a busy DB); any other use switches it back
        first. Caller holds self._lock."""
        if mode == self._round_mode:
            return
        sync, wait = mode if mode is not None else (self.synchronous, self.busy_timeout)
        conn.execute(f"PRAGMA synchronous={sync}")
        conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
        self._round_mode = mode

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._round_mode = None

    def exists(self) -> bool:
        return self._conn is not None or os.path.exists(self.db_file)

    # -- creation ------------------------------------------------------------------------
    def _create_file(self, put_timestamp: str) -> None:
        """Build the schema under a temp name and rename it in: no half-made DB is visible."""
        d = os.path.dirname(self.db_file)
        os.makedirs(d, exist_ok=True)
        tmp = f"{self.db_file}.{uuid.uuid4().hex}.tmp"
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(COMMON_SCHEMA + self.ITEMS_SCHEMA)
            now = Timestamp.now().internal
            conn.execute(
                "INSERT INTO stat (account, container, id, created_at, put_timestamp,"
                " status_changed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (self.account, self.container, str(uuid.uuid4()), now, put_timestamp, now))
        finally:
            conn.close()
        try:
            os.link(tmp, self.db_file)  # never replaces: another worker's DB wins a race
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        fsync_dir(d)

    def put_db(self, put_timestamp: str, metadata: Mapping[str, Any] | None = None,
               account_nodes: Mapping[str, Any] | None = None,
               validate: bool = False) -> tuple[bool, dict[str, Any]]:
        """Create or re-PUT the DB in one go; returns (created_or_revived, info).

        `validate`: refuse (MetadataLimit, nothing changed) metadata that would take the
        stored total past the limits."""
        with self._lock:
            created = False
            if self._conn is None and not os.path.exists(self.db_file):
                self._create_file(put_timestamp)
                created = True
            conn = self._get_conn()
            with write_txn(conn, self.db_file):
                was_deleted = self._is_deleted_locked(conn)
                row = conn.execute("SELECT put_timestamp, metadata, delete_timestamp"
                                   " FROM stat").fetchone()
                if put_timestamp > row[0]:
                    conn.execute("UPDATE stat SET put_timestamp = ?", (put_timestamp,))
                meta = json.loads(row[1])
                if metadata and merge_metadata(meta, metadata, self.FIRST_WINS_KEYS, row[2]):
                    if validate:
                        self._check_limits(meta)
                    conn.execute("UPDATE stat SET metadata = ?", (json.dumps(meta),))
                if account_nodes:
                    conn.execute("UPDATE stat SET account_nodes = ?", (json.dumps(account_nodes),))
                now_deleted = self._is_deleted_locked(conn)
                if was_deleted != now_deleted:
                    conn.execute("UPDATE stat SET status_changed_at = ?", (put_timestamp,))
            created = created or (was_deleted and not now_deleted)
            return created, self._info_locked(conn)

    # -- state ---------------------------------------------------------------------------
    def _is_deleted_locked(self, conn: sqlite3.Connection) -> bool:
        put, delete, count = conn.execute(
            "SELECT put_timestamp, delete_timestamp, object_count FROM stat").fetchone()
        return delete > put

    def _info_locked(self, conn: sqlite3.Connection) -> dict[str, Any]:
        cur = conn.execute("SELECT * FROM stat")
        cols = [c[0] for c in cur.description]
        info = dict(zip(cols, cur.fetchone(), strict=True))
        info["metadata"] = json.loads(info["metadata"])
        info["account_nodes"] = json.loads(info["account_nodes"])
        info["deleted"] = info["delete_timestamp"] > info["put_timestamp"]
        info["max_row"] = conn.execute(
            f"SELECT IFNULL(MAX(ROWID), -1) FROM {self.ITEMS_TABLE}").fetchone()[0]
        info["db_file"] = self.db_file
        info["item_commits"] = self.item_commits
        info["items_merged"] = self.items_merged
        return info

    def get_info(self) -> dict[str, Any]:
        with self._lock:
            return self._info_locked(self._get_conn())

    def is_deleted(self) -> bool:
        with self._lock:
            return self._is_deleted_locked(self._get_conn())

    def get_metadata(self) -> Metadata:
        with self._lock:
            return json.loads(self._get_conn().execute("SELECT metadata FROM stat").fetchone()[0])

    def _check_limits(self, meta: Metadata) -> None:
        bad = check_stored_metadata(meta, self.KIND)
        if bad:
            raise MetadataLimit(bad)

    def update_metadata(self, metadata: Mapping[str, Any], validate: bool = False,
                        put_timestamp: str | None = None) -> dict[str, Any]:
        """Merge {key: (value, timestamp)} newest-wins; returns the info after the merge.
        `validate` as for put_db (replication merges whatever a peer has); `put_timestamp`
        advances the DB's put timestamp in the same transaction (a container POST: Swift's
        Last-Modified follows it)."""
        with self._lock:
            conn = self._get_conn()
            with write_txn(conn, self.db_file):
                if put_timestamp:  # never revives a deleted DB
                    conn.execute("UPDATE stat SET put_timestamp = ? WHERE put_timestamp < ?"
                                 " AND delete_timestamp <= put_timestamp",
                                 (put_timestamp, put_timestamp))
                raw, deleted_at = conn.execute(
                    "SELECT metadata, delete_timestamp FROM stat").fetchone()
                meta = json.loads(raw)
                before = [meta.get(k) for k in self.FIRST_WINS_KEYS]
                if merge_metadata(meta, metadata, self.FIRST_WINS_KEYS, deleted_at):
                    if validate:
                        self._check_limits(meta)
                    conn.execute("UPDATE stat SET metadata = ?", (json.dumps(meta),))
                    if before != [meta.get(k) for k in self.FIRST_WINS_KEYS]:
                        # A container's policy settled on another one: the account keeps
                        # stats per policy, so this replica reports itself again.
                        conn.execute("UPDATE stat SET reported_put_timestamp = ?", (ZERO_TS,))
            return self._info_locked(conn)

    def merge_timestamps(self, put_timestamp: str | None = None,
                         delete_timestamp: str | None = None) -> dict[str, Any]:
        """Newest-wins merge of the DB's own put/delete timestamps (replication, DELETE)."""
        with self._lock:
            conn = self._get_conn()
            with write_txn(conn, self.db_file):
                was = self._is_deleted_locked(conn)
                if put_timestamp:
                    conn.execute("UPDATE stat SET put_timestamp = ? WHERE put_timestamp < ?",
                                 (put_timestamp, put_timestamp))
                if delete_timestamp:
                    conn.execute("UPDATE stat SET delete_timestamp = ? WHERE delete_timestamp < ?",
                                 (delete_timestamp, delete_timestamp))
                if self._is_deleted_locked(conn) != was:
                    conn.execute("UPDATE stat SET status_changed_at = ?",
                                 (Timestamp.now().internal,))
            return self._info_locked(conn)

    def delete_db(self, delete_timestamp: str) -> tuple[str, dict[str, Any]]:
        """Mark deleted if empty: returns ("notfound"|"conflict"|"deleted", info)."""
        with self._lock:
            conn = self._get_conn()
            begin_write(conn, self.db_file)
            try:
                if self._is_deleted_locked(conn):
                    conn.execute("ROLLBACK")
                    return "notfound", self._info_locked(conn)
                if not self._empty_locked(conn):
                    conn.execute("ROLLBACK")
                    return "conflict", self._info_locked(conn)
                conn.execute("UPDATE stat SET delete_timestamp = ? WHERE delete_timestamp < ?",
                             (delete_timestamp, delete_timestamp))
                deleted = self._is_deleted_locked(conn)
                if deleted:
                    conn.execute("UPDATE stat SET status_changed_at = ?", (delete_timestamp,))
                    # A deleted DB keeps no metadata (ACLs, keys, quotas, sysmeta), as in
                    # Swift: a container created again under the name starts clean. The
                    # clears carry the delete's time, so replication spreads them too.
                    meta = json.loads(conn.execute("SELECT metadata FROM stat").fetchone()[0])
                    if merge_metadata(meta, {k: ["", delete_timestamp] for k, v in meta.items()
                                             if v[0] != ""}):
                        conn.execute("UPDATE stat SET metadata = ?", (json.dumps(meta),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return ("deleted" if deleted else "conflict"), self._info_locked(conn)

    def _empty_locked(self, conn: sqlite3.Connection) -> bool:
        return conn.execute("SELECT object_count FROM stat").fetchone()[0] == 0

    def set_reported(self, put_timestamp: str, delete_timestamp: str, object_count: int,
                     bytes_used: int) -> None:
        with self._lock:
            self._get_conn().execute(
                "UPDATE stat SET reported_put_timestamp = ?, reported_delete_timestamp = ?,"
                " reported_object_count = ?, reported_bytes_used = ?",
                (put_timestamp, delete_timestamp, object_count, bytes_used))

    # -- items ---------------------------------------------------------------------------
    def _merge_items_locked(self, conn: sqlite3.Connection,
                            rows: list[dict[str, Any]]) -> int:
        """Subclass: apply rows newest-wins inside the open transaction; returns rows changed."""
        raise NotImplementedError

    # -- rows held for a later apply (swiftlite.db.device_commit) ---------------------------
    def add_pending(self, rows: list[dict[str, Any]]) -> None:
        """Hold rows the device's update log already made durable, to apply with others
        later: many rows in one transaction cost little more than one. Any other use of
        this broker applies them first; apply_pending applies them."""
        with self._pending_lock:
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.extend(rows)

    def pending_due(self, now: float, rows: int, delay: float) -> bool:
        """Held rows are `rows` or more, or the oldest waited `delay` seconds."""
        return bool(self._pending) and (len(self._pending) >= rows
                                        or now - self._pending_since >= delay)

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def _take_pending(self) -> list[dict[str, Any]]:
        with self._pending_lock:
            rows, self._pending = self._pending, []
            return rows

    def _restore_pending(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            with self._pending_lock:
                self._pending[:0] = rows
                self._pending_since = time.monotonic() - 3600.0  # overdue: retried first

    def _apply_pending_locked(self, conn: sqlite3.Connection, wait: float) -> None:
        """Apply the held rows in one transaction without a WAL flush (the update log has
        them until its segment retires, which flushes this WAL). Busy when SQLite's lock
        was not had within `wait`; nothing is lost then, the rows stay held."""
        if self._pending:
            self._set_round_mode(conn, ("NORMAL", wait))
            self._commit_items_locked(conn, [], busy_on_lock=True)

    def _commit_items_locked(self, conn: sqlite3.Connection, rows: list[dict[str, Any]],
                             busy_on_lock: bool) -> int:
        """One transaction of the held rows and `rows`, newest wins; returns rows changed.
        The held rows stay held if it fails; SQLite's lock not had in time is Busy when
        `busy_on_lock` (a bounded wait), rolled back with nothing applied."""
        held = self._take_pending()
        done = False
        try:
            with write_txn(conn, self.db_file):
                changed = self._merge_items_locked(conn, held + rows)
                if _commit_delay:
                    time.sleep(_commit_delay)
            done = True
        except sqlite3.OperationalError as exc:
            if busy_on_lock and "locked" in str(exc):
                raise Busy(self.db_file) from exc
            raise
        finally:
            if not done:
                self._restore_pending(held)
        self.item_commits += 1
        self.items_merged += len(held) + len(rows)
        return changed

    def apply_pending(self, wait: float) -> int | None:
        """(blocking) Apply the held rows now; returns how many, or None if this DB stayed
        busy for `wait`. Rows for a DB that is gone are dropped, as the update log's replay
        drops them."""
        if not self._lock.acquire(timeout=wait):
            return None
        try:
            n = len(self._pending)
            if n:
                self._apply_pending_locked(self._open(), wait)
            return n
        except Busy:
            return None
        except DatabaseNotFound:
            self._take_pending()
            return 0
        finally:
            self._lock.release()

    def merge_items(self, rows: Iterable[Mapping[str, Any]], durable: bool = True,
                    wait: float | None = None, require_live: bool = False) -> int:
        """Apply a batch of item rows in ONE transaction (one fsync); returns rows changed.

        `wait` (a device commit round, swiftlite.db.device_commit): wait at most that many
        seconds for this DB's locks (this process's and SQLite's), else raise Busy with
        nothing applied; with `durable=False`, commit without flushing the WAL (the round's
        update log makes the rows durable). `require_live`: a deleted DB takes nothing
        (DatabaseNotFound)."""
        rows = [dict(r) for r in rows]
        if not durable and wait is None:
            raise ValueError("an unflushed merge needs a bound on its wait")
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            raise Busy(self.db_file)
        try:
            if wait is not None:
                conn = self._open()
                self._set_round_mode(conn, (self.synchronous if durable else "NORMAL", wait))
            else:
                conn = self._get_conn()
            if require_live and self._is_deleted_locked(conn):
                raise DatabaseNotFound(self.db_file)
            # Rows held for this DB go in the same transaction (flushed with it, if durable).
            return self._commit_items_locked(conn, rows, busy_on_lock=wait is not None)
        finally:
            self._lock.release()

    def get_items_since(self, row_id: int, limit: int) -> list[dict[str, Any]]:
        """Rows changed after `row_id` (a peer's sync point), oldest change first."""
        cols = ", ".join(self.ITEM_COLUMNS)
        with self._lock:
            cur = self._get_conn().execute(
                f"SELECT ROWID, {cols} FROM {self.ITEMS_TABLE} WHERE ROWID > ?"
                " ORDER BY ROWID LIMIT ?", (row_id, limit))
            names = ["ROWID", *self.ITEM_COLUMNS]
            return [dict(zip(names, r, strict=True)) for r in cur]

    def get_max_row(self) -> int:
        with self._lock:
            return self._get_conn().execute(
                f"SELECT IFNULL(MAX(ROWID), -1) FROM {self.ITEMS_TABLE}").fetchone()[0]

    def get_sync(self, peer_id: str) -> int:
        with self._lock:
            row = self._get_conn().execute(
                "SELECT sync_point FROM sync WHERE remote_id = ?", (peer_id,)).fetchone()
            return row[0] if row else -1

    def get_syncs(self) -> dict[str, int]:
        with self._lock:
            return dict(self._get_conn().execute("SELECT remote_id, sync_point FROM sync"))

    def set_sync(self, peer_id: str, row_id: int) -> None:
        """Sync points only move forward."""
        with self._lock:
            self._get_conn().execute(
                "INSERT INTO sync (remote_id, sync_point, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT(remote_id) DO UPDATE SET sync_point = excluded.sync_point,"
                " updated_at = excluded.updated_at WHERE excluded.sync_point > sync_point",
                (peer_id, row_id, Timestamp.now().internal))

    def get_shard_ranges(self) -> list[dict[str, Any]]:
        """Shard range rows as dicts (the replicator sends them to peers)."""
        return []

    def merge_shard_ranges(self, rows: list[dict[str, Any]]) -> int:
        """Merge a peer's shard range rows; a kind that does not shard keeps none."""
        return 0

    # -- reclaim -------------------------------------------------------------------------
    # -- listing -------------------------------------------------------------------------
    def list_items(self, params: ListingParams) -> tuple[dict[str, Any], list[tuple]]:
        """(info, rows) in one hop: rows are LISTING_COLUMNS tuples or (subdir,)."""
        select = (f"SELECT {', '.join(self.LISTING_COLUMNS)} FROM {self.ITEMS_TABLE}"
                  " WHERE deleted = 0 AND ")
        with self._lock:
            conn = self._get_conn()

            def fetch(b: Bounds, prefix: str | None, limit: int, reverse: bool) -> Iterable[tuple]:
                where, args = bounds_sql(b, prefix)
                order = "DESC" if reverse else "ASC"
                return conn.execute(f"{select}{where} ORDER BY name {order} LIMIT ?",
                                    (*args, limit))

            # One read transaction so info and rows are a consistent snapshot.
            conn.execute("BEGIN")
            try:
                info = self._info_locked(conn)
                rows = walk(fetch, params) if not info["deleted"] else []
            finally:
                conn.execute("COMMIT")
            return info, rows

    def list_items_body(self, params: ListingParams) -> tuple[dict[str, Any], bytes, str]:
        """(info, body, content type): query and rendering in one thread hop."""
        info, rows = self.list_items(params)
        body, ctype = render_body(rows, params.out_format, self.KIND, info[self.KIND] or "")
        return info, body, ctype

    def _tombstone_column(self) -> str:
        """Subclass: the timestamp column compared against reclaim_age for tombstones."""
        raise NotImplementedError

    def reclaim(self, reclaim_age: float, now: float | None = None) -> int:
        """Drop tombstone rows and deleted metadata keys older than reclaim_age seconds."""
        cutoff = Timestamp.parse((now if now is not None else time.time()) - reclaim_age)
        cut = cutoff.internal
        with self._lock:
            conn = self._get_conn()
            with write_txn(conn, self.db_file):
                cur = conn.execute(
                    f"DELETE FROM {self.ITEMS_TABLE} WHERE deleted = 1 AND "
                    f"{self._tombstone_column()} < ?", (cut,))
                removed = cur.rowcount
                meta = json.loads(conn.execute("SELECT metadata FROM stat").fetchone()[0])
                keep = {k: v for k, v in meta.items() if v[0] != "" or v[1] >= cut}
                if len(keep) != len(meta):
                    conn.execute("UPDATE stat SET metadata = ?", (json.dumps(keep),))
                    removed += len(meta) - len(keep)
            return removed
