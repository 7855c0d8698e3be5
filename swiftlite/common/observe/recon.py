"""What a storage host knows about itself: `GET /recon` on every storage server.

One JSON document per host view: devices (size, use, whether mounted, async_pendings,
quarantined items; the DB devices under `meta_devices` apart, when the host has them), the
md5 of each ring file in `swift_dir` (so a cluster-wide check sees a host running an old
ring), and the status of every daemon of the host's config (its last
pass, whether its process is alive, how late its next pass is). `swiftlite status --cluster`
(swiftlite/ops/recon.py) asks every server in the rings and flags what is wrong; the
Prometheus collector (common/observe/metrics.py) reads the same device and daemon facts.

Like every storage request, `/recon` must be signed by the cluster (it names paths and
devices). The walking happens in the server's thread pool.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import time
from typing import Any

from aiohttp import web

from swiftlite.common.config import Section, load_sections
from swiftlite.common.devices import device_roots
from swiftlite.common.threadpool import run_blocking

RING_KINDS = ("object", "container", "account")
QUARANTINE_KINDS = ("objects", "containers", "accounts", "async_pending")
# Sections of a host's config that are daemons, with their default pass interval.
DAEMON_SECTIONS = ("object-replicator", "object-reconstructor", "object-updater",
                   "object-auditor", "object-expirer", "container-replicator",
                   "container-sharder", "container-reconciler", "account-replicator")


def _count_files(top: str) -> int:
    n = 0
    for _, _, files in os.walk(top):
        n += len(files)
    return n


def _journals(device_root: str) -> tuple[int, int]:
    """(bytes, partitions) of digest journals not yet folded on one device: the incremental
    digests' backlog (obj/engine/digests.py; a journal is folded past journal_fold_bytes)."""
    total = parts = 0
    top = os.path.join(device_root, "objects")
    try:
        names = os.listdir(top)
    except OSError:
        return 0, 0
    for part in names:
        try:
            size = os.stat(os.path.join(top, part, "hashes.journal")).st_size
        except OSError:
            continue
        total += size
        parts += 1
    return total, parts


def device_usage(devices: str, mount_check: bool = False) -> dict[str, dict[str, Any]]:
    """device -> size, use, mounted, async_pendings, unfolded digest journals and
    quarantined counts (blocking)."""
    out: dict[str, dict[str, Any]] = {}
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return out
    for dev in names:
        root = os.path.join(devices, dev)
        if not os.path.isdir(root):
            continue
        entry: dict[str, Any] = {"mounted": os.path.ismount(root) if mount_check else True}
        try:
            st = os.statvfs(root)
            total = st.f_blocks * st.f_frsize
            entry.update(total=total, free=st.f_bavail * st.f_frsize,
                         used=total - st.f_bfree * st.f_frsize)
        except OSError as exc:
            entry.update(mounted=False, error=exc.strerror)
        entry["async_pending"] = sum(_count_files(d) for d in
                                     glob.glob(os.path.join(root, "async_pending*")))
        entry["journal_bytes"], entry["journal_partitions"] = _journals(root)
        qroot = os.path.join(root, "quarantined")
        entry["quarantined"] = {k: len(os.listdir(os.path.join(qroot, k)))
                                for k in QUARANTINE_KINDS
                                if os.path.isdir(os.path.join(qroot, k))}
        out[dev] = entry
    return out


def daemon_statuses(status_dir: str) -> dict[str, dict[str, Any]]:
    """daemon -> its status file (`<status_dir>/<daemon>.json`, see common.daemon)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(status_dir, "*.json"))):
        try:
            with open(path) as f:
                status = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(status, dict):
            out[status.get("daemon") or os.path.basename(path)[:-5]] = status
    return out


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def file_md5(path: str) -> str | None:
    """The md5 of a ring file (None if unreadable): what hosts compare to spot a missed
    ring push (blocking)."""
    try:
        with open(path, "rb") as f:
            return hashlib.md5(f.read()).hexdigest()
    except OSError:
        return None


def ring_md5s(swift_dir: str) -> dict[str, str | None]:
    return {kind: file_md5(os.path.join(swift_dir, f"{kind}.ring.gz")) for kind in RING_KINDS}


def host_report(conf: Section, role: str) -> dict[str, Any]:
    """The whole /recon document for the server of `role` (blocking)."""
    from swiftlite.common.devices import status_dir

    now = time.time()
    sections: dict[str, Any] = {}
    if conf.get("__file__"):
        try:
            sections = load_sections(str(conf["__file__"]))
        except OSError:
            sections = {}
    sdir = status_dir(conf)
    statuses = daemon_statuses(sdir)
    daemons = {}
    # The daemons this host's config runs, and any other that left a status file.
    for name in sorted({*(d for d in DAEMON_SECTIONS if d in sections), *statuses}):
        st = statuses.get(name)
        interval = float(sections[name].get("interval", 30)) if name in sections else 30.0
        entry: dict[str, Any] = {"configured": name in sections, "interval": interval}
        if st is not None:
            running = st.get("running_since")
            end = float(st.get("start", 0)) + float(st.get("duration", 0))
            try:
                status_age: float | None = now - os.stat(
                    os.path.join(sdir, f"{name}.json")).st_mtime
            except OSError:
                status_age = None
            pid_ok = pid_alive(st.get("pid"))
            # A daemon writes its status at the start and end of every pass, so a file
            # touched within two intervals means it is alive even when its pid is not
            # visible from here (another pid namespace sharing the status dir).
            recent = status_age is not None and status_age <= 2 * interval
            entry.update(
                last_pass=st, alive=pid_ok or recent, pid_alive=pid_ok,
                status_age=round(status_age, 3) if status_age is not None else None,
                last_pass_age=round(now - end, 3) if st.get("start") else None,
                running_for=round(now - running, 3) if running else None)
        daemons[name] = entry
    mount_check = conf.get_bool("mount_check", False)
    roots = device_roots(conf)
    # A separate DB root (meta_devices) is reported apart: its device names may repeat the
    # object devices' (d1 under /srv/node and d1 under /srv/meta).
    usage = [device_usage(root, mount_check) for root in roots]
    quarantined: dict[str, int] = {}
    for d in (d for u in usage for d in u.values()):
        for kind, n in d.get("quarantined", {}).items():
            quarantined[kind] = quarantined.get(kind, 0) + n
    meta = {"meta_devices_root": os.path.abspath(roots[1]), "meta_devices": usage[1]} \
        if len(roots) > 1 else {}
    return {"role": role, "time": now,
            "ip": conf.get_str("bind_ip", ""), "port": conf.get_int("bind_port", 0),
            # The servers of one host share these: the cluster view shows a host once.
            "devices_root": os.path.abspath(roots[0]),
            "status_dir": os.path.abspath(sdir),
            "devices": usage[0],
            **meta,
            "totals": {"async_pending": sum(d.get("async_pending", 0)
                                            for u in usage for d in u.values()),
                       "quarantined": quarantined},
            "rings": ring_md5s(conf.get_str("swift_dir", "/etc/swiftlite")),
            "daemons": daemons,
            # now - end of each replicator's last completed pass (None: none completed
            # yet): how stale this host's replicas may be at worst.
            "replication_lag": {name: st.get("last_pass_age")
                                for name, st in daemons.items()
                                if name.endswith("-replicator")}}


def register(app: web.Application, conf: Section, role: str) -> None:
    """Add `GET /recon` (before the app's catch-all route)."""

    async def recon(request: web.Request) -> web.Response:
        report = await run_blocking(host_report, conf, role)
        return web.json_response(report, headers={"Cache-Control": "no-store"})

    app.router.add_get("/recon", recon)
