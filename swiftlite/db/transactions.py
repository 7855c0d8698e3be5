"""Write transactions on a DB's connection: take SQLite's write lock (BEGIN IMMEDIATE), log a
long wait for it, commit or roll back as the block ends.

Apart from the broker because every writer of a DB uses them the same way: the shared broker
(``db.broker``), the account broker's own updates and the container's shard-range tables
(``container.shard_broker``). The warning is logged as ``swiftlite.db.broker``, where it was
logged before these moved here, so log settings and filters that name it still apply.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("swiftlite.db.broker")

# A write that waited this long for a DB's lock is logged: another writer (a replicator, the
# sharder, a listing's held rows, another process) kept it from committing.
SLOW_LOCK_WAIT = 1.0


def begin_write(conn: sqlite3.Connection, db_file: str) -> None:
    """BEGIN IMMEDIATE (take the DB's write lock), logging a long wait for it."""
    started = time.monotonic()
    try:
        conn.execute("BEGIN IMMEDIATE")
    finally:
        waited = time.monotonic() - started
        if waited >= SLOW_LOCK_WAIT:
            log.warning("waited %.1fs for the write lock of %s", waited, db_file)


@contextmanager
def write_txn(conn: sqlite3.Connection, db_file: str) -> Iterator[None]:
    """BEGIN IMMEDIATE; COMMIT when the block ends, ROLLBACK if it (or the COMMIT) raises."""
    begin_write(conn, db_file)
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
