"""The container and account DB replicators.

For every local DB (``<dev>/containers|accounts/<part>/<suffix>/<hash>/<hash>.db``) and every
other primary of its partition (all primaries for a handoff DB): ask the peer for its sync
point for our DB id (``replication_server`` "sync", which also merges our put/delete
timestamps, metadata and shard ranges newest-wins), create the DB there if it has none,
then send the rows changed after that point in msgpack batches ("merge", one transaction
each on the peer, which records the new point). A handoff DB every primary took is
removed. Tombstone rows older than ``reclaim_age`` are reclaimed each pass. Rows sent are
paced by ``max_objects_per_second``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sqlite3
from typing import Any

import aiohttp
import msgpack

from swiftlite.common.clients.client import node_url, quote_path
from swiftlite.common.config import Section
from swiftlite.common.devices import meta_devices
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.db.broker import DatabaseBroker
from swiftlite.db.paths import DB_DIRS
from swiftlite.db.quarantine import is_corrupt, quarantine_db
from swiftlite.db.replication_server import METHOD
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.db-replicator")


class PeerError(Exception):
    pass


def local_dbs(device_path: str, kind: str) -> list[tuple[int, str, str]]:
    """(partition, hash, db path) of every DB on a device."""
    out = []
    root = os.path.join(device_path, DB_DIRS[kind])
    try:
        parts = [p for p in os.listdir(root) if p.isdigit()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    for p in parts:
        pdir = os.path.join(root, p)
        for s in _listdir(pdir):
            for h in _listdir(os.path.join(pdir, s)):
                path = os.path.join(pdir, s, h, h + ".db")
                if os.path.exists(path):
                    out.append((int(p), h, path))
    return out


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_db(path: str) -> None:
    """Drop a handoff DB (its hash dir: the .db and any -wal/-shm)."""
    hash_dir = os.path.dirname(path)
    shutil.rmtree(hash_dir, ignore_errors=True)
    # Then the suffix and partition dirs, once empty: a partition a rebalance moved away
    # leaves nothing behind for operators' tools (or the next pass) to mistake for data.
    suffix_dir = os.path.dirname(hash_dir)
    for d in (suffix_dir, os.path.dirname(suffix_dir)):
        try:
            os.rmdir(d)
        except OSError:
            break


class DBReplicator(daemon.PeerSession):
    limit_per_host = 8

    def __init__(self, conf: Section, broker_class: type[DatabaseBroker]) -> None:
        self.conf = conf
        self.cls = broker_class  # the role's broker: db/ knows no role (no import of them)
        self.kind = kind = broker_class.KIND
        self.name = f"{kind}-replicator"
        self.devices = meta_devices(conf)
        self.reclaim_age = conf.get_float("reclaim_age", 7 * 86400.0)
        self.concurrency = max(1, conf.get_int("concurrency", 4))
        self.batch = max(1, conf.get_int("per_diff", 1000))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 30.0)
        self.pacer = daemon.Pacer(conf.get_float("max_objects_per_second", 0.0))
        self.ring = Ring.from_conf(conf, kind)
        self.session: aiohttp.ClientSession | None = None

    async def _call(self, node: dict[str, Any], part: int, hexhash: str,
                    req: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        url = node_url(node, quote_path(node["device"], part, hexhash))
        try:
            async with self.session.request(METHOD, url,
                                            data=msgpack.packb(req, use_bin_type=True)) as r:
                body = await r.read()
                if r.status != 200:
                    raise PeerError(f"{node['ip']}:{node['port']}/{node['device']} -> {r.status}")
                return msgpack.unpackb(body, raw=False)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise PeerError(f"{node['ip']}:{node['port']}/{node['device']}: {exc!r}") from exc

    def _prepare(self, path: str) -> tuple[DatabaseBroker, dict[str, Any], dict[str, Any], int]:
        broker = self.cls(path)
        reclaimed = broker.reclaim(self.reclaim_age)
        info = broker.get_info()
        info["shard_ranges"] = broker.get_shard_ranges()
        return broker, info, broker.get_metadata(), reclaimed

    async def sync_peer(self, broker: DatabaseBroker, info: dict[str, Any],
                        metadata: dict[str, Any], node: dict[str, Any], part: int,
                        hexhash: str, stats: dict[str, Any]) -> None:
        head = {"id": info["id"], "metadata": metadata,
                "info": {k: info[k] for k in ("account", "container", "put_timestamp",
                                              "delete_timestamp")}}
        if info.get("shard_ranges"):  # a container's shard ranges travel with its stat
            head["shard_ranges"] = info["shard_ranges"]
        resp = await self._call(node, part, hexhash, {"op": "sync", **head})
        if not resp.get("exists"):
            resp = await self._call(node, part, hexhash, {"op": "create", **head})
            stats["created"] += 1
        point = int(resp.get("point", -1))
        if point >= info["max_row"]:
            return
        while True:
            rows = await run_blocking(broker.get_items_since, point, self.batch)
            if not rows:
                return
            await self.pacer.pace(len(rows))
            new_point = rows[-1]["ROWID"]
            await self._call(node, part, hexhash, {"op": "merge", "id": info["id"],
                                                   "rows": rows, "point": new_point})
            stats["synced"] += len(rows)
            point = new_point

    async def replicate_db(self, dev: dict[str, Any], part: int, hexhash: str, path: str,
                           stats: dict[str, Any]) -> None:
        stats["objects"] += 1
        try:
            broker, info, metadata, reclaimed = await run_blocking(self._prepare, path)
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            # Ours is damaged: move it aside; a peer's pass sends us a whole new copy.
            await run_blocking(quarantine_db, path, self.kind, exc)
            stats["quarantined"] = stats.get("quarantined", 0) + 1
            return
        stats["reclaimed"] += reclaimed
        primaries = self.ring.get_part_nodes(part)
        is_primary = any(n["id"] == dev["id"] for n in primaries)
        peers = [n for n in primaries if n["id"] != dev["id"]]
        ok = True
        try:
            for node in peers:
                try:
                    await self.sync_peer(broker, info, metadata, node, part, hexhash, stats)
                except PeerError as exc:
                    log.warning("%s %s/%s: %s", self.kind, part, hexhash, exc)
                    stats["failures"] += 1
                    ok = False
            if is_primary:
                await self.after_sync(broker, os.path.join(self.devices, dev["device"]),
                                      info, stats)
        finally:
            await run_blocking(broker.close)
        if not is_primary and ok and peers:
            await run_blocking(remove_db, path)
            stats["handoff_removed"] += 1

    async def after_sync(self, broker: DatabaseBroker, dev_path: str, info: dict[str, Any],
                         stats: dict[str, Any]) -> None:
        """A role's work on each primary DB after its sync (`info` as the pass read it)."""

    def _jobs(self) -> list[tuple[dict[str, Any], int, str, str]]:
        jobs = []
        for dev in self.ring.devices_on(*daemon.server_address(self.conf, self.kind)):
            for part, h, path in local_dbs(os.path.join(self.devices, dev["device"]),
                                           self.kind):
                jobs.append((dev, part, h, path))
        return jobs

    async def run_pass(self, stats: dict[str, Any]) -> None:
        for k in ("created", "reclaimed", "handoff_removed"):
            stats[k] = 0
        await self.ring.refresh()  # a changed ring file is read in the thread pool
        jobs = await run_blocking(self._jobs)
        stats["partitions"] = len({(d["id"], p) for d, p, _, _ in jobs})
        sem = asyncio.Semaphore(self.concurrency)

        async def one(dev: dict[str, Any], part: int, h: str, path: str) -> None:
            async with sem:
                try:
                    await self.replicate_db(dev, part, h, path, stats)
                except Exception:
                    log.exception("%s DB %s", self.kind, path)
                    stats["failures"] += 1

        await asyncio.gather(*(one(*j) for j in jobs))


def run(conf: Section, broker_class: type[DatabaseBroker], once: bool = False,
        replicator_class: type[DBReplicator] = DBReplicator) -> int:
    """The daemon's entry point body; each role's replicator module names its broker."""
    rep = replicator_class(conf, broker_class)
    return daemon.run(conf, rep.name, rep.run_pass, once, rep.setup, rep.teardown)
