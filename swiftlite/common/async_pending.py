"""Saved updates a server could not deliver (object -> container, container -> account).

A failed update is written durably under `<devices>/<dev>/async_pending/<suffix>/` as a
msgpack record and replayed later by the updater daemon, until it lands. Records are
self-describing so one updater serves every kind of sender.

Record: {"method": str, "path": str (quoted, without device/partition: "/a/c[/o]"),
         "headers": {str: str}, "body": bytes | None,
         "targets": [{"ip": str, "port": int, "device": str, "partition": int}, ...],
         "timestamp": str}

A file that cannot be read or decoded into a record is never skipped in silence nor deleted:
it is logged and moved to `<devices>/<dev>/quarantined/async_pending/` for an operator.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import msgpack
import xxhash

from swiftlite.common.fsutil import atomic_write

ASYNC_DIR = "async_pending"
QUARANTINE = os.path.join("quarantined", ASYNC_DIR)

log = logging.getLogger("swiftlite.async_pending")


def save_update(device_path: str, record: dict[str, Any]) -> str:
    """Durably save one update; returns its file path. Blocking: call from the thread pool."""
    key = (record["path"] + record.get("timestamp", "")).encode("utf-8", "surrogateescape")
    name_hash = xxhash.xxh3_128_hexdigest(key + record["method"].encode())
    d = os.path.join(device_path, ASYNC_DIR, name_hash[-3:])
    os.makedirs(d, exist_ok=True)
    tmp_dir = os.path.join(device_path, "tmp")
    os.makedirs(tmp_dir, exist_ok=True)
    final = os.path.join(d, f"{name_hash}-{record.get('timestamp', '0')}")
    # mode=None keeps mkstemp's 0600: records are read only by the updater of this node
    atomic_write(final, msgpack.packb(record, use_bin_type=True), mode=None,
                 tmp_dir=tmp_dir, prefix="async-", sync_dir=True)
    return final


def iter_updates(device_path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(file path, record) for every saved update on a device; a file that is not a record
    is logged and quarantined."""
    root = os.path.join(device_path, ASYNC_DIR)
    try:
        suffixes = sorted(os.listdir(root))
    except FileNotFoundError:
        return
    for suffix in suffixes:
        sdir = os.path.join(root, suffix)
        try:
            names = sorted(os.listdir(sdir))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            path = os.path.join(sdir, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue  # sent and removed by another updater meanwhile
            except OSError as exc:
                _quarantine(device_path, path, f"unreadable: {exc!r}")
                continue
            try:
                record = msgpack.unpackb(data, raw=False)
                if not isinstance(record, dict) or not all(
                        isinstance(record.get(k), t) for k, t in _REQUIRED):
                    raise ValueError("not an update record")
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                _quarantine(device_path, path, f"{len(data)} bytes, not a record: {exc!r}")
                continue
            yield path, record


_REQUIRED = (("method", str), ("path", str), ("targets", list))


def _quarantine(device_path: str, path: str, why: str) -> None:
    """Move a saved update nobody can send aside, keeping its bytes for an operator."""
    qdir = os.path.join(device_path, QUARANTINE)
    dest = os.path.join(qdir, f"{os.path.basename(path)}-{os.urandom(4).hex()}")
    try:
        os.makedirs(qdir, exist_ok=True)
        os.rename(path, dest)
    except FileNotFoundError:
        return  # gone meanwhile
    except OSError as exc:
        log.error("async update %s %s; could not quarantine it: %r", path, why, exc)
        return
    log.error("async update %s %s; quarantined to %s", path, why, dest)


def remove_update(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    try:
        os.rmdir(os.path.dirname(path))  # drop the suffix dir once empty
    except OSError:
        pass
