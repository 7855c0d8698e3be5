"""Is a device usable? The check every storage server makes before it touches one.

`<devices>/<dev>` must be a directory, or, with `mount_check`, a mount point (an unmounted
device would otherwise fill the root filesystem). Both checks are stat calls, which can take
seconds on a sick disk, so they run in the thread pool and never on the event loop. Answers
are cached for `ttl` seconds; an expired answer keeps being used while one refresh runs in the
pool, so a request waits for a check only on the first use of a device.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any

from swiftlite.common.config import Section
from swiftlite.common.http import HTTPError
from swiftlite.common.threadpool import run_blocking

_MAX_CACHED = 4096
DEFAULT_DEVICES = "/srv/node"


def object_devices(conf: Mapping[str, Any]) -> str:
    """The devices root of objects (and of everything when there is no `meta_devices`)."""
    return str(conf.get("devices") or DEFAULT_DEVICES)


def meta_devices(conf: Mapping[str, Any]) -> str:
    """The devices root of container and account DBs: `meta_devices` when set (a faster
    device, as BlueStore's DB on SSD), else `devices`. The container and account rings name
    the devices under it; the object ring those under `devices`."""
    return str(conf.get("meta_devices") or object_devices(conf))


def device_roots(conf: Mapping[str, Any]) -> list[str]:
    """Every devices root of the host, objects' first (walkers of async_pendings, recon)."""
    roots = [object_devices(conf)]
    meta = meta_devices(conf)
    if os.path.abspath(meta) != os.path.abspath(roots[0]):
        roots.append(meta)
    return roots


def bad_device_name(device: str) -> bool:
    """A name that is no single directory entry (a 400, never looked up)."""
    return not device or device in (".", "..") or "/" in device or "\x00" in device


class DeviceChecker:
    """Answers a device's path, or HTTPError 400 (bad name) / 507 (missing or unmounted)."""

    def __init__(self, devices: str, mount_check: bool, ttl: float = 1.0) -> None:
        self.devices = devices
        self.mount_check = mount_check
        self.ttl = ttl
        self._cache: dict[str, tuple[bool, float]] = {}  # device -> (usable, expires)
        self._probing: dict[str, asyncio.Task[bool]] = {}

    def path(self, device: str) -> str:
        return os.path.join(self.devices, device)

    def usable(self, path: str) -> bool:
        """Blocking: is `path` a usable device (thread pool only)."""
        try:
            return os.path.ismount(path) if self.mount_check else os.path.isdir(path)
        except (OSError, ValueError):
            return False

    async def check(self, device: str) -> str:
        if bad_device_name(device):
            raise HTTPError(400, "Invalid device")
        hit = self._cache.get(device)
        if hit is None:
            # Shielded: a cancelled request must not cancel a probe others may be awaiting.
            ok = await asyncio.shield(self._probe(device))
        else:
            ok = hit[0]
            if hit[1] <= time.monotonic():
                self._probe(device)  # refreshed in the background; this request goes on
        if not ok:
            raise HTTPError(507, f"{device} is not mounted")
        return self.path(device)

    def _probe(self, device: str) -> asyncio.Task[bool]:
        """The one probe of `device` in flight on this loop (started if there is none)."""
        loop = asyncio.get_running_loop()
        task = self._probing.get(device)
        if task is None or task.get_loop() is not loop:  # a stale loop's (tests) is dropped
            task = loop.create_task(self._run_probe(device))
            self._probing[device] = task
        return task

    async def _run_probe(self, device: str) -> bool:
        try:
            ok = await run_blocking(self.usable, self.path(device))
            if len(self._cache) >= _MAX_CACHED and device not in self._cache:
                self._cache.clear()
            self._cache[device] = (ok, time.monotonic() + self.ttl)
            return ok
        finally:
            if self._probing.get(device) is asyncio.current_task():
                del self._probing[device]


def status_dir(conf: Section) -> str:
    """Where a node's daemons write their status files (`<daemon>.json`): `status_dir`, by
    default `run/` beside the devices root."""
    devices = conf.get_str("devices", "/srv/node")
    default = os.path.join(os.path.dirname(os.path.abspath(devices.rstrip("/"))), "run")
    return conf.get_str("status_dir", default)
