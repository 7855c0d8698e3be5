"""What the account and container servers share: config, broker cache, dispatch, POST/HEAD/GET.

A role subclasses `DBServer`, names its `kind`, broker class and listing limit, and supplies
PUT (and the routes of its sub-items: container reports for accounts, object rows for
containers). Handlers take (request, broker, dev_path); sub-item handlers also the item name.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from aiohttp import web

from swiftlite.common.config import Section
from swiftlite.common.constraints import check_account, check_container, check_object
from swiftlite.common.devices import DeviceChecker, meta_devices
from swiftlite.common.http import HTTPError, error, split_path
from swiftlite.common.observe import metrics, recon
from swiftlite.common.reserved import ALLOW_RESERVED_HEADER
from swiftlite.common.runtime.server import ANY_PATH, make_app
from swiftlite.common.threadpool import run_blocking
from swiftlite.db.broker import DatabaseBroker, DatabaseNotFound, MetadataLimit
from swiftlite.db.cache import BrokerCache
from swiftlite.db.device_commit import DeviceCommitter
from swiftlite.db.group_commit import GroupCommitter
from swiftlite.db.headers import req_metadata, req_timestamp
from swiftlite.db.listing_http import parse_format, parse_params, response
from swiftlite.db.paths import db_file, parse_partition, split_device
from swiftlite.db.quarantine import is_corrupt, quarantine_db
from swiftlite.db.reclaimer import reclaim_loop
from swiftlite.db.replication_server import register_db_replication_routes
from swiftlite.db.update_log import UpdateLog

log = logging.getLogger("swiftlite.db.server")


Handler = Callable[[web.Request, Any, str], Awaitable[web.StreamResponse]]
ItemHandler = Callable[[web.Request, Any, str, str], Awaitable[web.StreamResponse]]

# Path names after /dev/part, in order, and the check each must pass.
_NAME_CHECKS = (check_account, check_container, check_object)


def backend_ts(info: dict[str, Any]) -> dict[str, str]:
    """On a 404 for a deleted DB, say when it was deleted (the proxy merges replicas)."""
    return {"X-Backend-Timestamp": info["created_at"],
            "X-Backend-Put-Timestamp": info["put_timestamp"],
            "X-Backend-Delete-Timestamp": info["delete_timestamp"],
            "X-Backend-Status-Changed-At": info["status_changed_at"]}


class DBServer:
    kind: ClassVar[str]  # "account" or "container": DB dir, metadata headers
    # Whether a device round may hold logged rows for a later apply (db_update_log_apply_*).
    HOLDS_ROWS: ClassVar[bool] = True
    broker_class: ClassVar[type[DatabaseBroker]]
    listing_limit: ClassVar[int]
    saved_headers: ClassVar[tuple[str, ...]] = ()  # stored beside X-<Kind>-Meta-*
    delete_conflict: ClassVar[str] = "Conflict"  # the 409 text of a refused DELETE
    post_moves_put: ClassVar[bool] = False  # a POST also advances put_timestamp

    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = DeviceChecker(meta_devices(conf),
                                     conf.get_bool("mount_check", False))
        self.reclaim_age = conf.get_float("reclaim_age", 604800.0)
        self.reclaim_interval = conf.get_float("reclaim_interval", 3600.0)
        synchronous = conf.get_str("db_synchronous", "FULL").upper()
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError("db_synchronous must be FULL, NORMAL or EXTRA")
        self.synchronous = synchronous
        self.max_batch = conf.get_int("db_max_batch", 1000)
        # Commits in flight per device across its DBs (0: no bound); see GroupCommitter.
        self.commit_concurrency = conf.get_int("db_commit_concurrency", 0)
        self.commit_gate_wait = conf.get_float("db_commit_gate_wait", 0.05)
        self._gates: dict[str, asyncio.Semaphore] = {}
        # Item updates of every DB of a device committed in rounds, flushed once per round
        # in the device's update log instead of once per DB per commit.
        self.update_log: UpdateLog | None = None
        self.device_commits: dict[str, DeviceCommitter] = {}
        self.commit_lock_wait = conf.get_float("db_commit_lock_wait", 0.02)
        self.update_log_min_dbs = conf.get_int("db_update_log_min_dbs", 2)
        # Logged rows held in memory for a later, bigger apply (swiftlite.db.device_commit).
        self.apply_delay = (conf.get_float("db_update_log_apply_delay", 0.05)
                            if self.HOLDS_ROWS else 0.0)
        self.apply_rows = conf.get_int("db_update_log_apply_rows", 64)
        self.wal_autocheckpoint: int | None = None
        if conf.get_bool("db_update_log", True) and synchronous != "NORMAL":
            self.update_log = UpdateLog(
                self.devices.devices, self.kind,
                conf.get_int("db_update_log_bytes", 16 << 20),
                conf.get_float("db_update_log_seconds", 10.0))
            # Small commits spread over many DBs would otherwise checkpoint each WAL every
            # few hundred rows, inside the commit round.
            self.wal_autocheckpoint = conf.get_int("db_wal_autocheckpoint", 10000)
        self.busy_timeout = conf.get_float("db_busy_timeout", 25.0)
        self.brokers: BrokerCache[Any] = BrokerCache(
            self.new_broker, conf.get_int("db_cache_size", 1024))
        # The DB's path length after the kind's names: account (a), container (a, c).
        self._names = 1 if self.kind == "account" else 2
        self.handlers: dict[str, Handler] = {
            "PUT": self.put, "POST": self.post, "DELETE": self.delete,
            "HEAD": self.head, "GET": self.get}
        self.item_handlers: dict[str, ItemHandler] = {}

    # -- brokers -----------------------------------------------------------------------------
    def new_broker(self, path: str) -> Any:
        b = self.broker_class(path, synchronous=self.synchronous,
                              busy_timeout=self.busy_timeout,
                              wal_autocheckpoint=self.wal_autocheckpoint)
        b.committer = GroupCommitter(  # type: ignore[attr-defined]
            self.merge_function(b), self.commit_batch(), self._gate(path),
            self.commit_gate_wait)
        b.log_place = None  # type: ignore[attr-defined]  # see commit_items
        return b

    async def commit_items(self, broker: Any, rows: list[dict[str, Any]]) -> Any:
        """Merge item rows into `broker`'s DB; returns once they are durable."""
        if self.update_log is None or self.commit_batch() <= 1:
            return await broker.committer.submit(rows)
        where = broker.log_place  # type: ignore[attr-defined]
        if where is None:
            device, rel = split_device(self.devices.devices, broker.db_file)
            dc = self.device_commits.get(device)
            if dc is None:
                dc = self.device_commits[device] = DeviceCommitter(
                    self.update_log.device_log(device), self.update_log, self.max_batch,
                    self.commit_lock_wait, self.update_log_min_dbs, self.apply_delay,
                    self.apply_rows)
            where = broker.log_place = (dc, rel)  # type: ignore[attr-defined]
        dc, rel = where
        return await dc.submit(broker, broker.committer.merge, rel, rows)

    def _gate(self, path: str) -> asyncio.Semaphore | None:
        if self.commit_concurrency <= 0:
            return None
        device = split_device(self.devices.devices, path)[0]
        gate = self._gates.get(device)
        if gate is None:
            gate = self._gates[device] = asyncio.Semaphore(self.commit_concurrency)
        return gate

    def merge_function(self, broker: Any) -> Callable[..., int]:
        """What the group committer runs on a batch of rows (blocking); takes `durable`
        (False: the update log flushes them) as DatabaseBroker.merge_items does."""
        return broker.merge_items

    def commit_batch(self) -> int:
        return self.max_batch

    # -- lifecycle ---------------------------------------------------------------------------
    async def on_startup(self, app: web.Application) -> None:
        self.reclaimer = asyncio.create_task(reclaim_loop(
            self.brokers.values, self.reclaim_age, self.reclaim_interval))
        self.log_keeper: asyncio.Task | None = None
        # Before serving: what a crash left in the logs is back in the DBs first (also when
        # the log has since been turned off, or its segments would never be replayed).
        replayer = self.update_log or UpdateLog(self.devices.devices, self.kind)
        metrics.update_log_replayed(await replayer.replay_orphans(self._replay))
        if self.update_log is not None:
            self.log_keeper = asyncio.create_task(self._keep_log(self.update_log))

    async def on_cleanup(self, app: web.Application) -> None:
        self.reclaimer.cancel()
        if self.log_keeper is not None:
            self.log_keeper.cancel()
        for dc in self.device_commits.values():
            await dc.drain()
        if self.update_log is not None:
            await self.update_log.close()

    async def _keep_log(self, ulog: UpdateLog) -> None:
        """Retire idle segments; replay those of workers that died since start-up."""
        while True:
            await asyncio.sleep(ulog.max_age / 2)
            try:
                for dc in self.device_commits.values():
                    dc.tick()
                metrics.update_log_replayed(await ulog.replay_orphans(self._replay))
            except Exception:
                log.exception("update log upkeep")

    async def _replay(self, db_path: str, rows: list[dict[str, Any]]) -> None:
        await run_blocking(self.merge_function(self.brokers.get(db_path)), rows)

    # -- dispatch ----------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        if method not in self.handlers and method not in self.item_handlers:
            return error(405, "Method Not Allowed")  # first, as the object server does
        n = self._names
        segs = split_path(request, n + 2, n + 3)
        dev, part_s, names, item = segs[0], segs[1], segs[2:n + 2], segs[n + 2]
        assert dev and part_s and all(names)
        part = parse_partition(part_s)
        for name, check in zip(segs[2:], _NAME_CHECKS):  # noqa: B905 (account: 2 names)
            # Only the cluster reaches this server: reserved names (the proxy's features'
            # hidden containers and objects) are fine here.
            bad = check(name, True) if name is not None else None
            if bad:
                raise HTTPError(400, bad)
        dev_path = await self.devices.check(dev)  # stat calls in the thread pool, cached
        broker = self.brokers.get(db_file(self.devices.devices, dev, self.kind, part, *names))
        if not broker.account:
            broker.account = names[0]
            if n > 1:
                broker.container = names[1]
        try:
            if item is not None:
                item_handler = self.item_handlers.get(method)
                if item_handler is None:
                    return error(405, "Method Not Allowed")
                return await item_handler(request, broker, dev_path, item)
            handler = self.handlers.get(method)
            if handler is None:
                return error(405, "Method Not Allowed")
            return await handler(request, broker, dev_path)
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            await run_blocking(quarantine_db, broker.db_file, self.kind, exc)
            # Missing here now: readers ask another replica, writers retry (an object
            # server keeps its update for the updater) once replication has rebuilt it.
            if method in ("GET", "HEAD"):
                return error(404, "Not Found")
            return error(503, "DB quarantined; retry later")

    # -- shared verbs ------------------------------------------------------------------------
    def info_headers(self, info: dict[str, Any]) -> dict[str, str]:
        raise NotImplementedError

    async def after_change(self, broker: Any, dev_path: str,
                           info: dict[str, Any]) -> web.StreamResponse | None:
        """Hook after a PUT/DELETE of the DB; a response here replaces the success answer."""
        return None

    async def after_post(self, broker: Any, dev_path: str, info: dict[str, Any]) -> None:
        """Hook after a POST changed the DB."""

    async def put(self, request: web.Request, broker: Any,
                  dev_path: str) -> web.StreamResponse:
        raise NotImplementedError

    async def post(self, request: web.Request, broker: Any,
                   dev_path: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, self.kind, ts, self.saved_headers)

        def do() -> dict[str, Any] | None:
            if broker.is_deleted():
                return None
            return broker.update_metadata(meta, validate=True,
                                          put_timestamp=ts if self.post_moves_put else None)

        try:
            info = await run_blocking(do)
        except DatabaseNotFound:
            info = None
        except MetadataLimit as exc:
            return error(400, str(exc))
        if info is None:
            return error(404, "Not Found")
        await self.after_post(broker, dev_path, info)
        return web.Response(status=204)

    async def delete(self, request: web.Request, broker: Any,
                     dev_path: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        try:
            outcome, info = await run_blocking(broker.delete_db, ts)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if outcome == "notfound":
            return error(404, "Not Found", backend_ts(info))
        if outcome == "conflict":
            return error(409, self.delete_conflict)
        return await self.after_change(broker, dev_path, info) or web.Response(status=204)

    async def head(self, request: web.Request, broker: Any,
                   dev_path: str) -> web.StreamResponse:
        _, ctype = parse_format(request)  # HEAD names the type a GET would send
        try:
            info = await run_blocking(broker.get_info)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", backend_ts(info))
        headers = self.info_headers(info)
        headers["Content-Type"] = f"{ctype}; charset=utf-8"
        return web.Response(status=204, headers=headers)

    async def get(self, request: web.Request, broker: Any,
                  dev_path: str) -> web.StreamResponse:
        params = parse_params(request, self.listing_limit)
        # Names of the reserved namespace are listed only to features that ask for them.
        params.hide_reserved = request.headers.get(ALLOW_RESERVED_HEADER) != "true"
        try:
            info, body, ctype = await run_blocking(broker.list_items_body, params)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", backend_ts(info))
        return response(body, params.ctype or ctype, self.info_headers(info))


def make_db_app(server: DBServer, key: web.AppKey, conf: Section) -> web.Application:
    """The app of a DB server: every path to `server.handle`, plus the replicator's MERGE."""
    app = make_app(backend=True)  # answers only signed requests from the cluster
    app[key] = server
    app.on_startup.append(server.on_startup)
    app.on_cleanup.append(server.on_cleanup)
    recon.register(app, conf, server.broker_class.KIND)  # before the catch-all route
    app.router.add_route("*", ANY_PATH, server.handle)
    register_db_replication_routes(app, server.broker_class, conf)
    return app
