"""Account server: account PUT/POST/DELETE/HEAD/GET and the container-update route.

/{dev}/{part}/{a}       account operations
/{dev}/{part}/{a}/{c}   PUT: a container's stat report (from container servers)
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from swiftlite.account.broker import AccountBroker
from swiftlite.common.config import Section
from swiftlite.common.constraints import ACCOUNT_LISTING_LIMIT, check_account, check_container
from swiftlite.common.http import HTTPError, error, split_path
from swiftlite.common.server import make_app
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.db.broker import ZERO_TS, DatabaseNotFound
from swiftlite.db.cache import BrokerCache
from swiftlite.db.group_commit import GroupCommitter
from swiftlite.db.headers import meta_headers, req_int, req_metadata, req_timestamp
from swiftlite.db.listing import parse_params, response
from swiftlite.db.paths import DeviceChecker, db_file, parse_partition
from swiftlite.db.reclaimer import reclaim_loop
from swiftlite.db.replication_server import register_db_replication_routes

KEY = web.AppKey("account_server", object)


def info_headers(info: dict[str, Any]) -> dict[str, str]:
    h = {
        "X-Account-Container-Count": str(info["container_count"]),
        "X-Account-Object-Count": str(info["object_count"]),
        "X-Account-Bytes-Used": str(info["bytes_used"]),
        "X-Timestamp": Timestamp.parse(info["created_at"]).normal,
        "X-Put-Timestamp": Timestamp.parse(info["put_timestamp"]).normal,
        "X-Backend-Timestamp": info["created_at"],
        "X-Backend-Put-Timestamp": info["put_timestamp"],
        "X-Backend-Delete-Timestamp": info["delete_timestamp"],
        "X-Backend-Status-Changed-At": info["status_changed_at"],
    }
    h.update(meta_headers(info["metadata"]))
    return h


def _backend_ts(info: dict[str, Any]) -> dict[str, str]:
    return {"X-Backend-Timestamp": info["created_at"],
            "X-Backend-Put-Timestamp": info["put_timestamp"],
            "X-Backend-Delete-Timestamp": info["delete_timestamp"],
            "X-Backend-Status-Changed-At": info["status_changed_at"]}


class AccountServer:
    def __init__(self, conf: Section) -> None:
        self.devices = DeviceChecker(conf.get_str("devices", "/srv/node"),
                                     conf.get_bool("mount_check", False))
        self.reclaim_age = conf.get_float("reclaim_age", 604800.0)
        self.reclaim_interval = conf.get_float("reclaim_interval", 3600.0)
        synchronous = conf.get_str("db_synchronous", "FULL").upper()
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError("db_synchronous must be FULL, NORMAL or EXTRA")
        max_batch = conf.get_int("db_max_batch", 1000)
        busy = conf.get_float("db_busy_timeout", 25.0)

        def new_broker(path: str) -> AccountBroker:
            b = AccountBroker(path, synchronous=synchronous, busy_timeout=busy)
            b.committer = GroupCommitter(self._merge_live(b), max_batch)  # type: ignore
            return b

        self.brokers: BrokerCache[AccountBroker] = BrokerCache(
            new_broker, conf.get_int("db_cache_size", 1024))

    @staticmethod
    def _merge_live(broker: AccountBroker):
        """Container reports only land in a live account: a deleted one answers 404."""
        def merge(rows: list[dict[str, Any]]) -> int:
            if broker.is_deleted():
                raise DatabaseNotFound(broker.db_file)
            return broker.merge_items(rows)
        return merge

    async def on_startup(self, app: web.Application) -> None:
        self.reclaimer = asyncio.create_task(reclaim_loop(
            self.brokers.values, self.reclaim_age, self.reclaim_interval))

    async def on_cleanup(self, app: web.Application) -> None:
        self.reclaimer.cancel()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        dev, part_s, account, container = split_path(request, 3, 4)
        assert dev and part_s and account
        part = parse_partition(part_s)
        for bad in (check_account(account),
                    check_container(container) if container is not None else None):
            if bad:
                raise HTTPError(400, bad)
        self.devices.check(dev)
        broker = self.brokers.get(db_file(self.devices.devices, dev, "account", part, account))
        if not broker.account:
            broker.account = account
        method = request.method
        if container is not None:
            if method == "PUT":
                return await self.container_update(request, broker, container)
            return error(405, "Method Not Allowed")
        handler = {"PUT": self.put, "POST": self.post, "DELETE": self.delete,
                   "HEAD": self.head, "GET": self.get}.get(method)
        if handler is None:
            return error(405, "Method Not Allowed")
        return await handler(request, broker)

    async def put(self, request: web.Request, broker: AccountBroker) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, "account", ts)
        created, info = await run_blocking(broker.put_db, ts, meta, None)
        if info["deleted"]:
            return error(409, "Account was deleted more recently", _backend_ts(info))
        return web.Response(status=201 if created else 202)

    async def post(self, request: web.Request, broker: AccountBroker) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, "account", ts)

        def do() -> dict[str, Any] | None:
            if broker.is_deleted():
                return None
            return broker.update_metadata(meta)

        try:
            info = await run_blocking(do)
        except DatabaseNotFound:
            info = None
        if info is None:
            return error(404, "Not Found")
        return web.Response(status=204)

    async def delete(self, request: web.Request, broker: AccountBroker) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        try:
            outcome, info = await run_blocking(broker.delete_db, ts)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if outcome == "notfound":
            return error(404, "Not Found", _backend_ts(info))
        if outcome == "conflict":
            return error(409, "Conflict: a newer PUT exists")
        return web.Response(status=204)

    async def head(self, request: web.Request, broker: AccountBroker) -> web.StreamResponse:
        try:
            info = await run_blocking(broker.get_info)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", _backend_ts(info))
        return web.Response(status=204, headers=info_headers(info))

    async def get(self, request: web.Request, broker: AccountBroker) -> web.StreamResponse:
        params = parse_params(request, ACCOUNT_LISTING_LIMIT)
        try:
            info, body, ctype = await run_blocking(broker.list_containers_body, params)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", _backend_ts(info))
        return response(body, ctype, info_headers(info))

    async def container_update(self, request: web.Request, broker: AccountBroker,
                               container: str) -> web.StreamResponse:
        put_ts = req_timestamp(request, "X-Put-Timestamp", required=False) or ZERO_TS
        del_ts = req_timestamp(request, "X-Delete-Timestamp", required=False) or ZERO_TS
        stats_ts = req_timestamp(request, "X-Timestamp", required=False) or max(put_ts, del_ts)
        if put_ts == ZERO_TS and del_ts == ZERO_TS:
            raise HTTPError(400, "Missing X-Put-Timestamp or X-Delete-Timestamp")
        row = {"name": container, "put_timestamp": put_ts, "delete_timestamp": del_ts,
               "stats_timestamp": stats_ts,
               "object_count": req_int(request, "X-Object-Count", 0),
               "bytes_used": req_int(request, "X-Bytes-Used", 0)}
        try:
            await broker.committer.submit([row])  # type: ignore[attr-defined]
        except DatabaseNotFound:
            return error(404, "Account Not Found")
        return web.Response(status=201)


def create_app(conf: Section) -> web.Application:
    server = AccountServer(conf)
    app = make_app()
    app[KEY] = server
    app.on_startup.append(server.on_startup)
    app.on_cleanup.append(server.on_cleanup)
    app.router.add_route("*", "/{tail:.*}", server.handle)
    register_db_replication_routes(app, "account", conf)  # the DB replicator's MERGE endpoint
    return app
