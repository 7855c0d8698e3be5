"""The object storage engine: how objects live on a device, below any HTTP.

What is here, lowest first: the file names and trailer format (`fileformat`), the body sums
(`bodysum`), O_DIRECT writes (`direct_io`) and the page-cache window (`page_cache`), group
durability (`durability`), the hash dir's locks, renames and journal (`hashdir`), the
incremental suffix digests (`digests`), the queue of expiring objects (`expiring`), writing
(`writing`, `batch_commit`), reading (`reading`, `read_plan`), and erasure-coded archives
(`ec_archive`, `pending_marks`, `ec_rebuild`). It loads no HTTP stack and imports nothing of
the object role above it (the server, the replication protocol, the daemons): layering
enforced by tests/unit/test_import_cycles.py.

Two faces:

- **For other roles** (the proxy's local reads and EC paths, the container-reconciler), the
  names below: they import `swiftlite.obj.engine`, never its modules.
- **For the object role itself** (`obj/server.py`, `obj/sync.py`, the replicator, auditor,
  reconstructor, expirer), the modules' public names: they drive the engine's internals
  (digests, journals, quarantine) and are its immediate clients. No module outside the
  engine uses a name of it that starts with `_`.
"""

from __future__ import annotations

from swiftlite.obj.engine.bodysum import Verifier
from swiftlite.obj.engine.ec_archive import COMMIT_HEADER, PENDING_HEADER, pack_footer
from swiftlite.obj.engine.fileformat import policy_part
from swiftlite.obj.engine.hashdir import DeviceMissing
from swiftlite.obj.engine.read_plan import (
    PASSED_HEADERS,
    CorruptCopy,
    ReadPlan,
    plan_read,
    span_chunks,
)
from swiftlite.obj.engine.reading import ObjectInfo, open_object, quarantine, read_chunk

__all__ = [
    # Where an object of a storage policy lives: its partition, naming its policy's dirs.
    "policy_part",
    # Reading a local copy (the proxy's local reads): open, plan the answer, read, verify.
    "open_object", "ObjectInfo", "plan_read", "ReadPlan", "span_chunks", "read_chunk",
    "Verifier", "CorruptCopy", "quarantine", "DeviceMissing", "PASSED_HEADERS",
    # Erasure-coded archives on the wire: the footer a PUT ends with, the commit phase.
    "pack_footer", "COMMIT_HEADER", "PENDING_HEADER",
]
