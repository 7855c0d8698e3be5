"""The updater: replays saved container/account updates (``async_pending``) until they land.

Every device under ``devices`` and ``meta_devices`` is walked (object servers save object ->
container updates, container servers container -> account reports on their DB devices; the
records say where they go). A record is sent to each of its remaining targets; 2xx means
landed. The file is removed once every target took it, or rewritten with the targets still
owed. A 404 (the DB is not on that node yet) is retried like any failure until the record is
older than ``reclaim_age``, then dropped with a warning. A 301 from a sharded container's
server names the shard holding the object's name: the update goes on to the shard's replica
standing in for the target (see ``shard_routes``), and counts as landed once that took it.
In continuous mode a record that
failed waits an exponentially growing delay (``retry_min`` doubling up to ``retry_max``)
before its next try; ``--once`` tries each once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any
from urllib.parse import unquote

import aiohttp

from swiftlite.common.async_pending import iter_updates, remove_update, save_update
from swiftlite.common.clients.client import node_url, quote_path
from swiftlite.common.config import Section
from swiftlite.common.devices import device_roots
from swiftlite.common.runtime import daemon
from swiftlite.common.shard_redirect import parse_redirect
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.obj.container_updates import MAX_HOPS
from swiftlite.obj.shard_routes import ShardRoutes

log = logging.getLogger("swiftlite.object-updater")
NAME = "object-updater"


def pending(roots: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(device path, file, record) of every saved update on every device of the roots."""
    out = []
    for devices in roots:
        try:
            devs = sorted(os.listdir(devices))
        except FileNotFoundError:
            continue
        for d in devs:
            dev_path = os.path.join(devices, d)
            if os.path.isdir(dev_path):
                out.extend((dev_path, path, rec) for path, rec in iter_updates(dev_path))
    return out


def record_age(record: dict[str, Any], now: float) -> float:
    try:
        return now - float(Timestamp.parse(record.get("timestamp", "0")))
    except (TimestampError, ValueError):
        return 0.0


class Updater(daemon.PeerSession):
    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.roots = device_roots(conf)
        self.reclaim_age = conf.get_float("reclaim_age", 7 * 86400.0)
        self.concurrency = max(1, conf.get_int("concurrency", 8))
        self.retry_min = conf.get_float("retry_min", 10.0)
        self.retry_max = conf.get_float("retry_max", 600.0)
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 10.0)
        self.pacer = daemon.Pacer(conf.get_float("max_objects_per_second", 0.0))
        self.session: aiohttp.ClientSession | None = None
        self.backoff: dict[str, tuple[float, float]] = {}  # file -> (next try, delay)
        self.once = False
        self.routes = ShardRoutes(conf)

    async def send(self, record: dict[str, Any], target: dict[str, Any],
                   hops: int = MAX_HOPS) -> int:
        """The target's status, or 0 when it could not be reached; a redirect to a shard is
        followed `hops` times (a shard that split in turn redirects again)."""
        assert self.session is not None
        path = quote_path(target["device"], target["partition"]) + record["path"]
        try:
            async with self.session.request(record["method"], node_url(target, path),
                                            headers=record.get("headers") or {},
                                            data=record.get("body")) as resp:
                await resp.read()
                shard = parse_redirect(resp.headers) if resp.status == 301 else None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.debug("update %s %s failed: %r", record["method"], path, exc)
            return 0
        if shard is None or hops <= 0:
            return resp.status
        return await self._follow(record, target, hops, *shard)

    async def _follow(self, record: dict[str, Any], target: dict[str, Any], hops: int,
                      shard_account: str, shard_container: str, lower: str, upper: str) -> int:
        """Send an object update a root redirected on to its shard: 2xx once it landed."""
        account, container, obj = unquote(record["path"][1:]).split("/", 2)
        root = record.get("root") or (account, container)
        self.routes.learn(*root, shard_account, shard_container, lower, upper)
        targets = self.routes.targets(account, container, shard_account, shard_container,
                                      target)
        moved = dict(record, path=quote_path(shard_account, shard_container, obj), root=root)
        statuses = [await self.send(moved, t, hops - 1) for t in targets]
        return 202 if statuses and all(200 <= s < 300 for s in statuses) else 0

    async def update_one(self, dev_path: str, path: str, record: dict[str, Any],
                         stats: dict[str, Any]) -> None:
        stats["objects"] += 1
        await self.pacer.pace()
        targets = record.get("targets") or []
        statuses = await asyncio.gather(*(self.send(record, t) for t in targets))
        left = [t for t, st in zip(targets, statuses, strict=True) if not 200 <= st < 300]
        if not left:
            await run_blocking(remove_update, path)
            self.backoff.pop(path, None)
            stats["synced"] += 1
            return
        if record_age(record, time.time()) > self.reclaim_age:
            log.warning("dropping update %s %s older than reclaim_age: %s still failing",
                        record["method"], record["path"], left)
            await run_blocking(remove_update, path)
            self.backoff.pop(path, None)
            stats["dropped"] += 1
            return
        stats["failures"] += 1
        if len(left) < len(targets):
            await run_blocking(save_update, dev_path, dict(record, targets=left))
        _, delay = self.backoff.get(path, (0.0, self.retry_min / 2))
        delay = min(self.retry_max, delay * 2)
        self.backoff[path] = (time.monotonic() + delay, delay)

    async def run_pass(self, stats: dict[str, Any]) -> None:
        stats["dropped"] = stats["deferred"] = 0
        work = await run_blocking(pending, self.roots)
        now = time.monotonic()
        live = {p for _, p, _ in work}
        for p in list(self.backoff):
            if p not in live:
                del self.backoff[p]
        sem = asyncio.Semaphore(self.concurrency)

        async def one(dev_path: str, path: str, record: dict[str, Any]) -> None:
            if not self.once and self.backoff.get(path, (0.0, 0.0))[0] > now:
                stats["deferred"] += 1
                return
            async with sem:
                try:
                    await self.update_one(dev_path, path, record, stats)
                except Exception:
                    log.exception("update %s", path)
                    stats["failures"] += 1

        await asyncio.gather(*(one(*w) for w in work))


def run_daemon(conf: Section, once: bool = False) -> int:
    up = Updater(conf)
    up.once = once
    return daemon.run(conf, NAME, up.run_pass, once, up.setup, up.teardown)
