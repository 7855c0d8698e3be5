"""Where DB files live (the device checks are swiftlite.common.devices)."""

from __future__ import annotations

import os

from swiftlite.common.hashing import hash_path, suffix_of
from swiftlite.common.http import HTTPError

DB_DIRS = {"container": "containers", "account": "accounts"}


def db_file(devices: str, device: str, kind: str, partition: int | str, account: str,
            container: str | None = None) -> str:
    """<devices>/<dev>/containers|accounts/<part>/<suffix>/<hash>/<hash>.db"""
    h = hash_path(account, container)
    return os.path.join(devices, device, DB_DIRS[kind], str(partition), suffix_of(h), h,
                        h + ".db")


def split_device(devices: str, path: str) -> tuple[str, str]:
    """(device, path relative to the device) of a file under `devices`."""
    device, rel = os.path.relpath(path, devices).split(os.sep, 1)
    return device, rel


def parse_partition(value: str) -> int:
    """A partition number, as the object server takes it: at most 10 digits, below 2**32
    (a 40-digit one made a DB directory no ring can ever name)."""
    if not value.isdigit() or not value.isascii() or len(value) > 10 or int(value) >= 2**32:
        raise HTTPError(400, "Invalid partition")
    return int(value)
