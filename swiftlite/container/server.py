"""Container server: container PUT/POST/DELETE/HEAD/GET and the object-update routes.

/{dev}/{part}/{a}/{c}      container operations; MERGE (or UPDATE): msgpack batch of object rows
/{dev}/{part}/{a}/{c}/{o}  PUT/DELETE object rows from object servers

aiohttp's C HTTP parser (llhttp) only knows registered methods and answers 400 to
"UPDATE", so the batch form is also served as MERGE (a WebDAV method llhttp accepts);
UPDATE still works behind a parser that passes it through.

Every SQLite access is one run_blocking hop; object updates go through the DB's group
committer so concurrent updates share a transaction.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
from aiohttp import web

from swiftlite.common.client import make_session
from swiftlite.common.config import Section
from swiftlite.common.constraints import (
    CONTAINER_LISTING_LIMIT,
    check_account,
    check_container,
    check_object,
    check_utf8,
)
from swiftlite.common.http import HTTPError, error, split_path
from swiftlite.common.server import make_app
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.account_reporter import AccountReporter, parse_account_nodes
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.broker import DatabaseNotFound
from swiftlite.db.cache import BrokerCache
from swiftlite.db.group_commit import GroupCommitter
from swiftlite.db.headers import (
    meta_headers,
    parse_timestamp,
    req_int,
    req_metadata,
    req_timestamp,
)
from swiftlite.db.listing import parse_params, response
from swiftlite.db.paths import DeviceChecker, db_file, parse_partition
from swiftlite.db.reclaimer import reclaim_loop
from swiftlite.db.replication_server import register_db_replication_routes

# Stored alongside X-Container-Meta-*; the proxy and middlewares read them back.
SAVED_HEADERS = ("x-container-read", "x-container-write", "x-versions-location",
                 "x-history-location", "x-container-sync-key", "x-container-sync-to")

KEY = web.AppKey("container_server", object)


def _ts_normal(ts: str) -> str:
    return Timestamp.parse(ts).normal


def info_headers(info: dict[str, Any]) -> dict[str, str]:
    h = {
        "X-Container-Object-Count": str(info["object_count"]),
        "X-Container-Bytes-Used": str(info["bytes_used"]),
        "X-Timestamp": _ts_normal(info["created_at"]),
        "X-Put-Timestamp": _ts_normal(info["put_timestamp"]),
        "X-Backend-Timestamp": info["created_at"],
        "X-Backend-Put-Timestamp": info["put_timestamp"],
        "X-Backend-Delete-Timestamp": info["delete_timestamp"],
        "X-Backend-Status-Changed-At": info["status_changed_at"],
        # Group-commit evidence (this process): transactions vs object updates merged.
        "X-Backend-Update-Commits": str(info["item_commits"]),
        "X-Backend-Updates-Merged": str(info["items_merged"]),
    }
    h.update(meta_headers(info["metadata"]))
    return h


def _clean_str(value: str | None, what: str, max_len: int = 1024) -> str:
    if value is None:
        raise HTTPError(400, f"Missing {what}")
    if check_utf8(value) or len(value) > max_len:
        raise HTTPError(400, f"Invalid {what}")
    return value


def _update_row(raw: Any) -> dict[str, Any]:
    """One row of an UPDATE batch, validated and normalised (400 on anything odd)."""
    if not isinstance(raw, dict):
        raise HTTPError(400, "update rows must be maps")
    name = raw.get("name")
    if not isinstance(name, str):
        raise HTTPError(400, "Invalid object name: not a string")
    bad = check_object(name)
    if bad:
        raise HTTPError(400, f"Invalid object name: {bad}")
    size = raw.get("size", 0)
    deleted = raw.get("deleted", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise HTTPError(400, "Invalid size")
    if deleted not in (0, 1, True, False):
        raise HTTPError(400, "Invalid deleted flag")
    ctype, etag = raw.get("content_type", ""), raw.get("etag", "")
    if not isinstance(ctype, str) or not isinstance(etag, str):
        raise HTTPError(400, "Invalid content_type or etag")
    return {"name": name, "created_at": parse_timestamp(str(raw.get("created_at", "")),
                                                           "created_at"),
            "size": 0 if deleted else size, "deleted": int(bool(deleted)),
            "content_type": _clean_str(ctype, "content_type"), "etag": _clean_str(etag, "etag")}


class ContainerServer:
    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = DeviceChecker(conf.get_str("devices", "/srv/node"),
                                     conf.get_bool("mount_check", False))
        self.reclaim_age = conf.get_float("reclaim_age", 604800.0)
        self.reclaim_interval = conf.get_float("reclaim_interval", 3600.0)
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 3.0)
        synchronous = conf.get_str("db_synchronous", "FULL").upper()
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError("db_synchronous must be FULL, NORMAL or EXTRA")
        self.group_commit = conf.get_bool("group_commit", True)
        max_batch = conf.get_int("db_max_batch", 1000)

        def new_broker(path: str) -> ContainerBroker:
            b = ContainerBroker(path, synchronous=synchronous,
                                busy_timeout=conf.get_float("db_busy_timeout", 25.0))
            b.committer = GroupCommitter(  # type: ignore[attr-defined]
                b.merge_items, max_batch if self.group_commit else 1)
            return b

        self.brokers: BrokerCache[ContainerBroker] = BrokerCache(
            new_broker, conf.get_int("db_cache_size", 1024))
        self.reporter = AccountReporter(conf.get_float("account_update_interval", 1.0))

    async def on_startup(self, app: web.Application) -> None:
        self.session = make_session(self.conn_timeout, self.node_timeout)
        self.reporter.start(self.session)
        self.reclaimer = asyncio.create_task(reclaim_loop(
            self.brokers.values, self.reclaim_age, self.reclaim_interval))

    async def on_cleanup(self, app: web.Application) -> None:
        self.reclaimer.cancel()
        await self.reporter.stop()
        await self.session.close()

    # -- dispatch ------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        dev, part_s, account, container, obj = split_path(request, 4, 5)
        assert dev and part_s and account and container
        part = parse_partition(part_s)
        for bad in (check_account(account), check_container(container),
                    check_object(obj) if obj is not None else None):
            if bad:
                raise HTTPError(400, bad)
        dev_path = self.devices.check(dev)
        broker = self.brokers.get(db_file(self.devices.devices, dev, "container", part,
                                          account, container))
        if not broker.account:
            broker.account, broker.container = account, container
        method = request.method
        if obj is not None:
            if method == "PUT":
                return await self.object_put(request, broker, dev_path, obj)
            if method == "DELETE":
                return await self.object_delete(request, broker, dev_path, obj)
            return error(405, "Method Not Allowed")
        handler = {"PUT": self.put, "POST": self.post, "DELETE": self.delete,
                   "HEAD": self.head, "GET": self.get, "MERGE": self.update,
                   "UPDATE": self.update}.get(method)
        if handler is None:
            return error(405, "Method Not Allowed")
        return await handler(request, broker, dev_path)

    # -- container -----------------------------------------------------------------------
    async def put(self, request: web.Request, broker: ContainerBroker,
                  dev_path: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, "container", ts, SAVED_HEADERS)
        nodes = parse_account_nodes(request.headers)
        created, info = await run_blocking(broker.put_db, ts, meta, nodes)
        if info["account_nodes"].get("nodes"):
            status = await self.reporter.report(broker, dev_path, info)
            if status == 404:
                return error(404, "Account not found")
        return web.Response(status=201 if created else 202)

    async def post(self, request: web.Request, broker: ContainerBroker,
                   dev_path: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, "container", ts, SAVED_HEADERS)

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

    async def delete(self, request: web.Request, broker: ContainerBroker,
                     dev_path: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        try:
            outcome, info = await run_blocking(broker.delete_db, ts)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if outcome == "notfound":
            return error(404, "Not Found", _backend_ts(info))
        if outcome == "conflict":
            return error(409, "Conflict: container not empty or newer PUT")
        if info["account_nodes"].get("nodes"):
            status = await self.reporter.report(broker, dev_path, info)
            if status == 404:
                return error(404, "Account not found")
        return web.Response(status=204)

    async def head(self, request: web.Request, broker: ContainerBroker,
                   dev_path: str) -> web.StreamResponse:
        try:
            info = await run_blocking(broker.get_info)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", _backend_ts(info))
        return web.Response(status=204, headers=info_headers(info))

    async def get(self, request: web.Request, broker: ContainerBroker,
                  dev_path: str) -> web.StreamResponse:
        params = parse_params(request, CONTAINER_LISTING_LIMIT)
        try:
            info, body, ctype = await run_blocking(broker.list_objects_body, params)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", _backend_ts(info))
        return response(body, ctype, info_headers(info))

    # -- object rows ---------------------------------------------------------------------
    async def _commit(self, broker: ContainerBroker, dev_path: str,
                      rows: list[dict[str, Any]]) -> web.Response | None:
        try:
            await broker.committer.submit(rows)  # type: ignore[attr-defined]
        except DatabaseNotFound:
            return error(404, "Container Not Found")
        self.reporter.mark_dirty(broker, dev_path)
        return None

    async def object_put(self, request: web.Request, broker: ContainerBroker, dev_path: str,
                         obj: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        size = req_int(request, "X-Size")
        row = {"name": obj, "created_at": ts, "size": size, "deleted": 0,
               "content_type": _clean_str(request.headers.get("X-Content-Type"),
                                          "X-Content-Type"),
               "etag": _clean_str(request.headers.get("X-Etag"), "X-Etag")}
        return await self._commit(broker, dev_path, [row]) or web.Response(status=201)

    async def object_delete(self, request: web.Request, broker: ContainerBroker,
                            dev_path: str, obj: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        row = {"name": obj, "created_at": ts, "size": 0, "deleted": 1, "content_type": "",
               "etag": ""}
        return await self._commit(broker, dev_path, [row]) or web.Response(status=204)

    async def update(self, request: web.Request, broker: ContainerBroker,
                     dev_path: str) -> web.StreamResponse:
        body = await request.read()
        try:
            raw = msgpack.unpackb(body, raw=False)
        except Exception:
            return error(400, "UPDATE body must be a msgpack list")
        if not isinstance(raw, list):
            return error(400, "UPDATE body must be a msgpack list")
        rows = [_update_row(r) for r in raw]
        if not rows:
            return web.Response(status=202)
        return await self._commit(broker, dev_path, rows) or web.Response(status=202)


def _backend_ts(info: dict[str, Any]) -> dict[str, str]:
    """On a 404 for a deleted DB, say when it was deleted (the proxy merges replicas)."""
    return {"X-Backend-Timestamp": info["created_at"],
            "X-Backend-Put-Timestamp": info["put_timestamp"],
            "X-Backend-Delete-Timestamp": info["delete_timestamp"],
            "X-Backend-Status-Changed-At": info["status_changed_at"]}


def create_app(conf: Section) -> web.Application:
    server = ContainerServer(conf)
    app = make_app()
    app[KEY] = server
    app.on_startup.append(server.on_startup)
    app.on_cleanup.append(server.on_cleanup)
    app.router.add_route("*", "/{tail:.*}", server.handle)
    register_db_replication_routes(app, "container", conf)  # the DB replicator's MERGE endpoint
    return app
