"""The object-expirer: each storage node deletes its own replicas whose X-Delete-At has passed.

Readers get 404 for an object past its X-Delete-At at once (``fileformat.is_expired``); this
daemon takes the files off the disks and the object out of container listings. Every node
runs one, for the devices under its own ``devices`` root, from the queue each device keeps
(``expiring``; Swift's single ``.expiring_objects`` account is a cluster-wide bottleneck, a
per-device queue grows and spreads with the data).

A pass, for every local device that has a queue: fold the device's journal into its queue
DB, then take the entries due (``delete_at <= now``, paced by
``expiring_objects_per_second``, ``concurrency`` at once). For each:

1. Read the replica's current metadata (.data, and .meta over it). No live .data, or an
   X-Delete-At that is not the entry's (overwritten, POSTed to another time or none, deleted,
   pushed away as a handoff): the entry is stale, dropped (``skipped``).
2. Ask the other primaries of the partition (HEAD with X-Open-Expired) whether one holds a
   newer version with another X-Delete-At (see the caveat). If one does, or none answers,
   the entry waits for the next pass (``deferred``).
3. DELETE the replica through this node's own object server, signed like every backend
   request: ``X-Timestamp`` = the delete_at time and ``X-If-Delete-At`` = delete_at. So the
   tombstone is written, journaled into the suffix digests and reported to the container
   exactly as any DELETE's (a container server that is down gets it through async_pending
   and the object-updater), and every replica's tombstone has the same timestamp: the
   replicas converge without moving a byte. The object server re-checks X-If-Delete-At under
   the object's lock, so a POST or PUT racing the expirer wins: 412/409/404, nothing written.
   The container update names every replica of the container, not one as a proxy's PUT does:
   an expiry has no proxy to spread them, and so one pass on any node with a replica takes the
   object out of every listing even with other nodes down (rows carry the timestamp, repeats
   are no-ops, and updates to one container are batched).

The entry is removed after a 2xx (``expired``) or a definitive 404/409/412 (``skipped``); a
failure (the object server down, a 5xx, a timeout) keeps it for the next pass. A node that is
down when its objects expire expires them when it returns (its queue is on its own disks), and
a restart loses nothing: the queue is on disk before a PUT or POST is acknowledged.
Status counters (``swiftlite status``): devices, objects (due entries looked at), expired,
skipped, deferred, failures, queued (entries left, due or not), folded (journal records).

Caveat (Swift has the same one): a replica that missed a newer write can still expire the old
data. Say an object is PUT with X-Delete-At T, then overwritten without it (or POSTed to a
later time) while one node is down. That node still holds the old version. Its tombstone at T
is newer than the overwrite, so if it is written, replication spreads it and the new version
is lost too. Two things keep that from happening here. First, replication usually brings the
newer version to the stale replica before T, and then the entry no longer matches (step 1).
Second, step 2 asks the other primaries before the tombstone is written: if one of them holds
a newer version with another X-Delete-At, nothing is written until replication has fixed the
local copy. That check matters most for a node coming back after an outage, which expires
its backlog at once, before replication has caught up. The loss remains possible only when
no replica holding the newer version answers, yet some other one does: every such replica
unreachable, or not yet written there (a handoff). Turning ``check_peers`` off trades that
check (two HEADs per expired replica) for Swift's exposure.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from swiftlite.common import policies
from swiftlite.common.clients.client import node_path, node_url
from swiftlite.common.config import Section
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import expiring, fileformat
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.object-expirer")
NAME = "object-expirer"
DEFAULT_INTERVAL = 300.0
_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


@dataclass
class Replica:
    """A local replica's current state: its .data and .meta timestamps, merged metadata."""

    data_ts: str
    meta_ts: str
    metadata: dict[str, str]

    @property
    def newest(self) -> str:
        return max(self.data_ts, self.meta_ts)

    @property
    def delete_at(self) -> int | None:
        v = self.metadata.get("X-Delete-At")
        return int(v) if v and v.isdigit() else None


def local_replica(device_path: str, part: int, hexhash: str) -> Replica | None:
    """The replica's state, or None without a live .data (gone, deleted). Blocking."""
    hdir = fileformat.hash_dir(device_path, part, hexhash)
    for _ in range(3):  # a file replaced between the listing and the read: list again
        main, meta = fileformat.current_files(fileformat.listdir(hdir))
        if not main or not main.endswith(".data"):
            return None
        try:
            md = fileformat.read_file_metadata(os.path.join(hdir, main))[0]
            meta_md = fileformat.read_file_metadata(os.path.join(hdir, meta))[0] if meta \
                else None
        except FileNotFoundError:
            continue
        meta_stem = fileformat.split_name(meta)[0] if meta else ""
        return Replica(fileformat.split_name(main)[0], meta_stem,
                       fileformat.merge_metadata(md, meta_md))
    raise OSError(f"{hdir} keeps changing")


def split_name(name: str) -> tuple[str, str, str] | None:
    parts = name[1:].split("/", 2) if name.startswith("/") else []
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


class Expirer(daemon.PeerSession):
    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = conf.get_str("devices", "/srv/node")
        self.mount_check = conf.get_bool("mount_check", False)
        self.concurrency = max(1, conf.get_int("concurrency", 8))
        self.batch_size = max(1, conf.get_int("batch_size", 500))
        self.pacer = daemon.Pacer(conf.get_float("expiring_objects_per_second", 200.0))
        self.check_peers = conf.get_bool("check_peers", True)
        # Expired objects stay on disk this much longer: with allow_open_expired a client
        # can still read them (X-Open-Expired) until they are reaped.
        self.delay_reaping = max(0.0, conf.get_float("delay_reaping", 0.0))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 10.0)
        ip, port = daemon.server_address(conf, "object")
        self.bind = (ip, port)
        self.server = {"ip": _WILDCARD.get(ip, ip), "port": port}  # this node's object server
        self.policies = policies.load(conf.get_str("swift_dir", "/etc/swiftlite"))
        self.object_rings = {p.index: Ring.from_conf(conf, p.ring_name) for p in self.policies}
        for p in self.policies:  # an EC policy's ring: one replica per fragment archive
            p.check_ring(self.object_rings[p.index])
        self.object_ring = self.object_rings[0]
        self.container_ring = Ring.from_conf(conf, "container")
        self.queues: dict[str, expiring.Queue] = {}
        self.clock = time.time  # what "due" means (tests move it forward)

    async def teardown(self) -> None:
        await super().teardown()
        for q in self.queues.values():
            await run_blocking(q.close)
        self.queues.clear()

    # ---- a pass ---------------------------------------------------------------------------

    def _devices(self) -> list[str]:
        out = []
        for d in sorted(fileformat.listdir(self.devices)):
            path = os.path.join(self.devices, d)
            if not os.path.isdir(path) or (self.mount_check and not os.path.ismount(path)):
                continue
            if expiring.has_queue(path):
                out.append(path)
        return out

    async def run_pass(self, stats: dict[str, Any]) -> None:
        stats.pop("partitions", None)  # not this daemon's units: devices and entries are
        stats.pop("synced", None)
        for k in ("devices", "expired", "skipped", "deferred", "queued", "folded"):
            stats[k] = 0
        for ring in self.object_rings.values():
            await ring.refresh()
        await self.container_ring.refresh()
        now = self.clock() - self.delay_reaping
        for dev_path in await run_blocking(self._devices):
            try:
                await self.expire_device(dev_path, now, stats)
            except Exception:
                log.exception("expiring objects of %s", dev_path)
                stats["failures"] += 1

    async def expire_device(self, dev_path: str, now: float, stats: dict[str, Any]) -> None:
        q = self.queues.get(dev_path)
        if q is None:
            q = self.queues[dev_path] = expiring.Queue(dev_path)
        folded, _ = await run_blocking(q.fold)
        stats["folded"] += folded
        stats["devices"] += 1
        sem = asyncio.Semaphore(self.concurrency)

        async def one(e: expiring.Entry) -> bool:
            async with sem:
                try:
                    return await self.expire_one(dev_path, e, stats)
                except Exception:
                    log.exception("expiring %s/%s/%s (%s)", dev_path, e.part, e.hash, e.name)
                    stats["failures"] += 1
                    return False

        after = None
        while True:
            batch = await run_blocking(q.due, now, after, self.batch_size)
            if not batch:
                break
            after = batch[-1]
            done = await asyncio.gather(*(one(e) for e in batch))
            await run_blocking(q.remove, [e for e, ok in zip(batch, done, strict=True) if ok])
        stats["queued"] += await run_blocking(q.count)

    async def expire_one(self, dev_path: str, e: expiring.Entry,
                         stats: dict[str, Any]) -> bool:
        """Deal with one due entry; True when it can leave the queue."""
        stats["objects"] += 1
        await self.pacer.pace()
        replica = await run_blocking(local_replica, dev_path, e.partition, e.hash)
        names = split_name(replica.metadata.get("name", "")) if replica else None
        if replica is None or replica.delete_at != e.delete_at or names is None:
            stats["skipped"] += 1
            return True
        device = os.path.basename(dev_path)
        if self.check_peers and await self._newer_elsewhere(device, e, names, replica):
            stats["deferred"] += 1
            return False
        status = await self._delete(device, e, names)
        if 200 <= status < 300:
            stats["expired"] += 1
            return True
        if status in (404, 409, 412):
            stats["skipped"] += 1
            return True
        log.warning("expiring /%s/%s/%s on %s: status %s", *names, device, status or
                    "no answer")
        stats["failures"] += 1
        return False

    # ---- requests -------------------------------------------------------------------------

    def _container_headers(self, account: str, container: str) -> dict[str, str]:
        cpart, nodes = self.container_ring.get_nodes(account, container)
        hosts = [f"[{n['ip']}]:{n['port']}" if ":" in n["ip"] else f"{n['ip']}:{n['port']}"
                 for n in nodes]
        return {"X-Container-Host": ",".join(hosts),
                "X-Container-Device": ",".join(n["device"] for n in nodes),
                "X-Container-Partition": str(cpart)}

    async def _delete(self, device: str, e: expiring.Entry, names: tuple[str, str, str]) -> int:
        """DELETE the local replica through this node's object server; its status, or 0."""
        assert self.session is not None
        headers = {"X-Timestamp": Timestamp.parse(str(e.delete_at)).internal,
                   "X-If-Delete-At": str(e.delete_at),
                   "X-Trans-Id": f"tx-expirer-{os.urandom(8).hex()}",
                   **self._container_headers(names[0], names[1]), **_policy_header(e)}
        url = node_url(self.server, node_path({"device": device}, e.partition, *names))
        try:
            async with self.session.delete(url, headers=headers) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.debug("DELETE %s failed: %r", url, exc)
            return 0

    def _peers(self, device: str, e: expiring.Entry) -> list[dict[str, Any]]:
        ring = self.object_rings.get(e.policy)
        if ring is None:  # a policy this node's swiftlite.conf no longer lists
            return []
        mine = {d["id"] for d in ring.devices_on(*self.bind) if d["device"] == device}
        return [n for n in ring.get_part_nodes(e.partition) if n["id"] not in mine]

    async def _newer_elsewhere(self, device: str, e: expiring.Entry,
                               names: tuple[str, str, str], replica: Replica) -> bool:
        """True when a peer holds a newer version with another X-Delete-At (our replica is
        stale: let replication fix it), or when no peer answers (cannot tell yet)."""
        peers = self._peers(device, e)
        if not peers:
            return False
        answers = await asyncio.gather(*(self._peer_state(n, e, names) for n in peers))
        known = [a for a in answers if a is not None]
        if not known:
            return True
        for newest, delete_at in known:
            if newest > replica.newest and delete_at != e.delete_at:
                log.info("not expiring /%s/%s/%s on %s at %s: a peer holds a newer version "
                         "(%s)", *names, device, e.delete_at, newest)
                return True
        return False

    async def _peer_state(self, node: dict[str, Any], e: expiring.Entry,
                          names: tuple[str, str, str]) -> tuple[str, int | None] | None:
        """(newest timestamp, X-Delete-At) of a peer's replica; ("", None) when it has no
        live one; None when it did not answer."""
        assert self.session is not None
        url = node_url(node, node_path(node, e.partition, *names))
        try:
            async with self.session.head(url, headers={"X-Open-Expired": "true",
                                                       **_policy_header(e)}) as resp:
                await resp.read()
                if resp.status == 404:
                    return "", None
                if resp.status != 200:
                    return None
                h = resp.headers
                v = h.get("X-Delete-At", "")
                return (max(h.get("X-Backend-Timestamp", ""),
                            h.get("X-Backend-Meta-Timestamp", "")),
                        int(v) if v.isdigit() else None)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.debug("HEAD %s failed: %r", url, exc)
            return None


def _policy_header(e: expiring.Entry) -> dict[str, str]:
    return {policies.POLICY_INDEX_HEADER: str(e.policy)} if e.policy else {}


def run_daemon(conf: Section, once: bool = False) -> int:
    conf.setdefault("interval", str(DEFAULT_INTERVAL))
    exp = Expirer(conf)
    return daemon.run(conf, NAME, exp.run_pass, once, exp.setup, exp.teardown)
