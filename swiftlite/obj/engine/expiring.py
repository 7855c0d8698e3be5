"""The queue of expiring objects, kept per device by the node that stores them.

Swift keeps one cluster-wide queue (the hidden ``.expiring_objects`` account): every PUT or
POST with X-Delete-At costs a container update to a few DBs shared by the whole cluster, a
known bottleneck, and one expirer process has to walk it for everybody. Here each device
keeps the queue of its own objects, so the work spreads with the data, and the object-expirer
daemon of each node expires the replicas on its own devices (see ``expirer``).

On disk, in the device's root:

- ``expiring.journal``: what writers append, one record per object file committed with an
  X-Delete-At (client PUT or POST, a file received by replication: ``hashdir.renamed`` calls
  `note` for every one of them, the single point all those writes go through; the auditor
  re-adds what it meets, a safety net for a record lost in a crash). A record is
  ``"\\n" + JSON [delete_at, partition, hash, "/a/c/o" or ""]``: the leading newline keeps a
  record torn by a crash from swallowing the next one, and a torn record never parses.
  Each is one O_APPEND write under a shared flock; with ``sync_mode = batch`` the flush that
  makes the object durable covers it too (same filesystem), in file mode it is fsynced.
  An object without X-Delete-At costs nothing (one dict lookup).
- ``expiring.db``: SQLite (WAL) table ``entries(delete_at, part, hash, name)``, primary key
  ``(delete_at, part, hash)``, written only by the expirer. ``fold`` moves the journal in:
  under an exclusive flock it renames the journal to ``expiring.journal.taken-<pid>-<rnd>``
  (writers that were waiting see the name now points elsewhere and append to a new journal),
  then inserts the records in one transaction (fsynced) and unlinks the taken file. A crash
  in between leaves the taken file, folded again next time; duplicates collapse on the key.

Entries are hints, never the truth: a POST that moves or removes X-Delete-At, an overwrite,
a DELETE, a handoff copy pushed away leave their old entries behind, and the expirer re-reads
the object's current metadata (and the object server re-checks X-If-Delete-At under the
object's lock) before anything is deleted. So an entry is added whenever in doubt, and is
removed once it has been dealt with.

All of it is blocking (file and SQLite I/O): call it through the thread pool.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from swiftlite.obj.engine import fileformat

log = logging.getLogger("swiftlite.object.expiring")

JOURNAL = "expiring.journal"
TAKEN = JOURNAL + ".taken-"
DB = "expiring.db"
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, order=True)
class Entry:
    """One object replica due at `delete_at` (unix seconds); `name` is "/a/c/o" when known.

    `part` is the partition number plus its storage policy index times 2**32 (partitions are
    below 2**32): policy 0's entries are the pre-policy ones, and the queue's records and DB
    keep their format. `partition` is the part with its policy (fileformat.PolicyPart)."""

    delete_at: int
    part: int
    hash: str
    name: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[int, int, str]:
        return self.delete_at, self.part, self.hash

    @property
    def policy(self) -> int:
        return self.part >> 32

    @property
    def partition(self) -> int:
        return fileformat.policy_part(self.part & 0xFFFFFFFF, self.part >> 32)


def entry_for(part: int | str, hexhash: str, metadata: Mapping[str, str],
              current: Mapping[str, str] | None = None) -> Entry | None:
    """The entry an object file's metadata asks for; None without a valid X-Delete-At.
    `current` (the object's metadata before the write) supplies the name a .meta lacks."""
    value = metadata.get("X-Delete-At")
    if not value or not str(value).isdigit():
        return None
    name = metadata.get("name") or (current or {}).get("name") or ""
    return Entry(int(value), int(part) + (fileformat.policy_of(part) << 32), hexhash, name)


def _record(e: Entry) -> bytes:
    return b"\n" + json.dumps([e.delete_at, e.part, e.hash, e.name],
                              separators=(",", ":")).encode()


def parse_records(data: bytes) -> tuple[list[Entry], int]:
    """The entries of a journal's bytes, and how many lines were not records (torn ones)."""
    out: list[Entry] = []
    bad = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            d, p, h, n = json.loads(line)
            if (type(d) is int and type(p) is int and d >= 0 and p >= 0
                    and isinstance(h, str) and len(h) == 32 and _HEX.issuperset(h)
                    and isinstance(n, str)):
                out.append(Entry(d, p, h, n))
                continue
        except (ValueError, TypeError, UnicodeDecodeError):
            pass
        bad += 1
    return out, bad


def _same_file(fd: int, path: str) -> bool:
    st = os.fstat(fd)
    try:
        cur = os.stat(path)
    except FileNotFoundError:
        return False
    return (cur.st_dev, cur.st_ino) == (st.st_dev, st.st_ino)


def append(device_path: str, entries: Iterable[Entry], fsync: bool = False) -> None:
    """Append records to the device's journal (one write); `fsync` makes them durable now."""
    data = b"".join(_record(e) for e in entries)
    if not data:
        return
    path = os.path.join(device_path, JOURNAL)
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if not _same_file(fd, path):  # taken by a fold while we waited: use the new one
                continue
            mv = memoryview(data)
            while mv:
                mv = mv[os.write(fd, mv):]
            if fsync:
                os.fsync(fd)
            return
        finally:
            os.close(fd)


def note(device_path: str, part: int | str, hexhash: str, metadata: Mapping[str, str],
         current: Mapping[str, str] | None = None, fsync: bool = False) -> None:
    """Queue the object if the file just committed carries X-Delete-At; never raises (a
    record lost here is re-added by the auditor, and the write itself must stand)."""
    e = entry_for(part, hexhash, metadata, current)
    if e is None:
        return
    try:
        append(device_path, [e], fsync)
    except Exception:  # noqa: BLE001 - see the docstring
        log.exception("could not queue expiring object %s/%s/%s", device_path, part, hexhash)


def has_queue(device_path: str) -> bool:
    """Whether the device has a queue or journal at all (the expirer skips the rest)."""
    try:
        names = os.listdir(device_path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(n == DB or n == JOURNAL or n.startswith(TAKEN) for n in names)


class Queue:
    """One device's queue DB (opened, and created when missing, on first use)."""

    def __init__(self, device_path: str) -> None:
        self.device_path = device_path
        self.path = os.path.join(device_path, DB)
        self._conn: sqlite3.Connection | None = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = self._open()
            except sqlite3.DatabaseError as exc:
                # Unreadable: set it aside and start again; the auditor re-adds what it held.
                aside = f"{self.path}.corrupt-{int(time.time())}"
                log.error("expiring queue %s unreadable (%s); moved to %s", self.path, exc,
                          aside)
                os.replace(self.path, aside)
                for ext in ("-wal", "-shm"):
                    try:
                        os.unlink(self.path + ext)
                    except FileNotFoundError:
                        pass
                self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=25.0, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")  # a folded journal is unlinked after
            conn.execute("CREATE TABLE IF NOT EXISTS entries (delete_at INTEGER NOT NULL, "
                         "part INTEGER NOT NULL, hash TEXT NOT NULL, "
                         "name TEXT NOT NULL DEFAULT '', "
                         "PRIMARY KEY (delete_at, part, hash)) WITHOUT ROWID")
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def insert(self, entries: Iterable[Entry]) -> None:
        rows = [(e.delete_at, e.part, e.hash, e.name) for e in entries]
        if not rows:
            return
        with self._transaction() as c:
            c.executemany("INSERT INTO entries VALUES (?, ?, ?, ?) "
                          "ON CONFLICT DO UPDATE SET name = excluded.name "
                          "WHERE entries.name = '' AND excluded.name != ''", rows)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def fold(self) -> tuple[int, int]:
        """Move the journal (and any taken file a crashed fold left) into the DB.
        Returns (entries read, torn records skipped)."""
        got = bad = 0
        for name in sorted(os.listdir(self.device_path)):
            if name.startswith(TAKEN):
                g, b = self._fold_file(os.path.join(self.device_path, name))
                got, bad = got + g, bad + b
        path = os.path.join(self.device_path, JOURNAL)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return got, bad
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # every append in progress is done
            if not _same_file(fd, path):
                return got, bad  # another fold took it meanwhile
            taken = f"{self.device_path}/{TAKEN}{os.getpid()}-{os.urandom(4).hex()}"
            os.rename(path, taken)
        finally:
            os.close(fd)  # appends waiting for the lock find the name gone and start anew
        g, b = self._fold_file(taken)
        return got + g, bad + b

    def _fold_file(self, path: str) -> tuple[int, int]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0, 0  # folded by someone else
        entries, bad = parse_records(data)
        if bad:
            log.warning("%s: %d torn or unreadable records skipped", path, bad)
        self.insert(entries)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return len(entries), bad

    def due(self, now: float, after: Entry | None = None, limit: int = 1000) -> list[Entry]:
        """Entries with delete_at <= now, in key order, past `after` (keyset paging)."""
        if after is None:
            rows = self.conn.execute(
                "SELECT delete_at, part, hash, name FROM entries WHERE delete_at <= ? "
                "ORDER BY delete_at, part, hash LIMIT ?", (int(now), limit))
        else:
            rows = self.conn.execute(
                "SELECT delete_at, part, hash, name FROM entries WHERE delete_at <= ? "
                "AND (delete_at, part, hash) > (?, ?, ?) ORDER BY delete_at, part, hash "
                "LIMIT ?", (int(now), *after.key, limit))
        return [Entry(*r) for r in rows]

    def remove(self, entries: Iterable[Entry]) -> None:
        keys = [e.key for e in entries]
        if not keys:
            return
        with self._transaction() as c:
            c.executemany("DELETE FROM entries WHERE delete_at = ? AND part = ? AND hash = ?",
                          keys)

    def count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM entries").fetchone()[0]

    def entries(self) -> list[Entry]:
        """Every entry (tests, tools)."""
        return [Entry(*r) for r in self.conn.execute(
            "SELECT delete_at, part, hash, name FROM entries ORDER BY delete_at, part, hash")]
