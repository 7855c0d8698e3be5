"""The DB servers' replication endpoint: `MERGE /{dev}/{part}/{hash}` with a msgpack body.

MERGE is a method aiohttp's C parser knows natively and the DB servers do not otherwise use.
Ops (request -> answer, all msgpack maps; each op is one thread hop on this side):

- ``{"op": "sync", "id", "info": {put_timestamp, delete_timestamp}, "metadata",
  "shard_ranges"?}``: merge the sender's DB timestamps, metadata and shard ranges (newest
  wins) and answer ``{"exists": true, "point":
  our sync point for the sender's id, "id": our DB id}``, or ``{"exists": false}``.
- ``{"op": "create", "info": {account, container, put_timestamp, delete_timestamp},
  "metadata"}``: make the DB (we had none), answer as "sync" with point -1.
- ``{"op": "merge", "id", "rows": [...], "point": int}``: merge item rows newest-wins in one
  transaction, then record ``point`` (the sender's last ROWID sent) as its sync point.
"""

from __future__ import annotations

import os
import re
import sqlite3
from typing import Any

import msgpack
from aiohttp import web

from swiftlite.common.config import Section
from swiftlite.common.devices import DeviceChecker, meta_devices
from swiftlite.common.http import HTTPError, error
from swiftlite.common.threadpool import run_blocking
from swiftlite.db.broker import DatabaseBroker
from swiftlite.db.cache import BrokerCache
from swiftlite.db.paths import DB_DIRS
from swiftlite.db.quarantine import is_corrupt, quarantine_db

METHOD = "MERGE"
_ROUTE_RE = re.compile(r"/([^/]+)/([0-9]+)/([0-9a-f]{32})")


def hash_db_file(device_path: str, kind: str, part: int | str, hexhash: str) -> str:
    return os.path.join(device_path, DB_DIRS[kind], str(part), hexhash[-3:], hexhash,
                        hexhash + ".db")


def item_rows(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in columns if k in r} for r in rows]


class ReplicationReceiver:
    def __init__(self, broker_class: type[DatabaseBroker], conf: Section) -> None:
        self.kind = broker_class.KIND
        self.cls = broker_class
        self.devices = DeviceChecker(meta_devices(conf),
                                     conf.get_bool("mount_check", False))
        synchronous = conf.get_str("db_synchronous", "FULL").upper()
        self.brokers: BrokerCache[DatabaseBroker] = BrokerCache(
            lambda p: self.cls(p, synchronous=synchronous), 64)

    def _sync(self, broker: DatabaseBroker, req: dict[str, Any]) -> dict[str, Any]:
        info = req.get("info") or {}
        broker.merge_timestamps(info.get("put_timestamp"), info.get("delete_timestamp"))
        if req.get("metadata"):
            broker.update_metadata(req["metadata"])
        if req.get("shard_ranges"):
            broker.merge_shard_ranges(req["shard_ranges"])
        return {"exists": True, "point": broker.get_sync(str(req["id"])),
                "id": broker.get_info()["id"]}

    def _create(self, broker: DatabaseBroker, req: dict[str, Any]) -> dict[str, Any]:
        info = req["info"]
        broker.account = info["account"]
        broker.container = info.get("container")
        broker.put_db(info["put_timestamp"], req.get("metadata") or None)
        return self._sync(broker, req)

    def _merge(self, broker: DatabaseBroker, req: dict[str, Any]) -> dict[str, Any]:
        changed = broker.merge_items(item_rows(req["rows"], broker.ITEM_COLUMNS))
        broker.set_sync(str(req["id"]), int(req["point"]))
        return {"changed": changed}

    def handle_blocking(self, path: str, req: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._handle_blocking(path, req)
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            quarantine_db(path, self.kind, exc)
            return {"exists": False}  # the sender creates it anew on its next pass

    def _handle_blocking(self, path: str, req: dict[str, Any]) -> dict[str, Any]:
        broker = self.brokers.get(path)
        op = req.get("op")
        if op == "create":
            return self._create(broker, req)
        if not os.path.exists(path):
            return {"exists": False}
        if op == "sync":
            return self._sync(broker, req)
        if op == "merge":
            return self._merge(broker, req)
        raise HTTPError(400, f"unknown op {op!r}")

    async def handle(self, request: web.Request, dev: str, part: str,
                     hexhash: str) -> web.Response:
        dev_path = await self.devices.check(dev)
        try:
            req = msgpack.unpackb(await request.read(), raw=False)
            if not isinstance(req, dict):
                raise ValueError("not a map")
        except Exception:
            return error(400, "body must be a msgpack map")
        path = hash_db_file(dev_path, self.kind, int(part), hexhash)
        try:
            result = await run_blocking(self.handle_blocking, path, req)
        except (KeyError, TypeError, ValueError) as exc:
            return error(400, f"bad replication request: {exc!r}")
        return web.Response(body=msgpack.packb(result, use_bin_type=True),
                            content_type="application/x-msgpack")


def register_db_replication_routes(app: web.Application, broker_class: type[DatabaseBroker],
                                   conf: Section) -> None:
    """Serve `MERGE /{dev}/{part}/{hash}` for a container or account server's app, whose
    broker class (given by the role: db/ imports no role) names the kind of DB.

    A middleware rather than a route, so it works wherever the call sits relative to the
    server's catch-all route; other requests pay one string compare.
    """
    rx = ReplicationReceiver(broker_class, conf)

    @web.middleware
    async def db_replication(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == METHOD:
            m = _ROUTE_RE.fullmatch(request.path)
            if m:
                return await rx.handle(request, m.group(1), m.group(2), m.group(3))
        return await handler(request)

    app.middlewares.append(db_replication)
