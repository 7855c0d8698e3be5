"""Where DB files live, and the device checks (507) every DB server makes."""

from __future__ import annotations

import os
import time

from swiftlite.common.hashing import hash_path, suffix_of
from swiftlite.common.http import HTTPError

DB_DIRS = {"container": "containers", "account": "accounts"}


def db_file(devices: str, device: str, kind: str, partition: int | str, account: str,
            container: str | None = None) -> str:
    """<devices>/<dev>/containers|accounts/<part>/<suffix>/<hash>/<hash>.db"""
    h = hash_path(account, container)
    return os.path.join(devices, device, DB_DIRS[kind], str(partition), suffix_of(h), h,
                        h + ".db")


class DeviceChecker:
    """Answers 507 for a missing (or, with mount_check, unmounted) device.

    The result is cached for a second so the event loop does at most one stat per device per
    second, not one per request.
    """

    def __init__(self, devices: str, mount_check: bool, ttl: float = 1.0) -> None:
        self.devices = devices
        self.mount_check = mount_check
        self.ttl = ttl
        self._cache: dict[str, tuple[bool, float]] = {}

    def path(self, device: str) -> str:
        return os.path.join(self.devices, device)

    def check(self, device: str) -> str:
        """The device's path, or HTTPError(507)."""
        if "/" in device or device in (".", ".."):
            raise HTTPError(400, "Invalid device")
        now = time.monotonic()
        hit = self._cache.get(device)
        if hit is None or hit[1] < now:
            path = self.path(device)
            ok = os.path.ismount(path) if self.mount_check else os.path.isdir(path)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[device] = (ok, now + self.ttl)
            hit = self._cache[device]
        if not hit[0]:
            raise HTTPError(507, f"{device} is not mounted")
        return self.path(device)


def parse_partition(value: str) -> int:
    if not value.isdigit() or not value.isascii():
        raise HTTPError(400, "Invalid partition")
    return int(value)
