"""A damaged DB replica is moved aside, so the replicators make it anew from its peers.

A DB whose file SQLite calls corrupt would otherwise answer 500 to every request and every
replication attempt for ever, and the updates meant for it would wait in async_pending
without end. Moved to `<device>/quarantined/<containers|accounts>/<hash>-<random>` (kept
for the operator to look at), the replica is simply missing: reads go to the other replicas
(404 here), writes are retried later (503 here), and the next replication pass of a peer
creates it again and sends it every row.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import uuid

from swiftlite.common.fsutil import fsync_dir
from swiftlite.db.cache import forget
from swiftlite.db.paths import DB_DIRS

log = logging.getLogger("swiftlite.db")

# What SQLite says of a file that is damaged, as opposed to busy or full.
_CORRUPT = ("database disk image is malformed", "file is not a database",
            "malformed database schema", "no such table", "file is encrypted")


def is_corrupt(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and \
        any(m in str(exc) for m in _CORRUPT)


def quarantine_db(db_file: str, kind: str, reason: BaseException | str) -> str | None:
    """Move the DB's hash dir (the .db with its -wal and -shm) aside; the new path, or None
    when it is already gone (another request quarantined it first). Blocking."""
    hash_dir = os.path.dirname(db_file)
    # <device>/<containers>/<part>/<suffix>/<hash>/<hash>.db
    device = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(hash_dir))))
    dest_dir = os.path.join(device, "quarantined", DB_DIRS[kind])
    os.makedirs(dest_dir, exist_ok=True)
    dest = os.path.join(dest_dir, f"{os.path.basename(hash_dir)}-{uuid.uuid4().hex[:8]}")
    forget(db_file)  # no cached broker keeps writing into the moved file
    try:
        os.rename(hash_dir, dest)
    except FileNotFoundError:
        return None
    fsync_dir(os.path.dirname(hash_dir))
    fsync_dir(dest_dir)
    log.error("quarantined %s DB %s to %s: %s", kind, db_file, dest, reason)
    return dest
