"""Account server: account PUT/POST/DELETE/HEAD/GET and the container-update route.

/{dev}/{part}/{a}       account operations
/{dev}/{part}/{a}/{c}   PUT: a container's stat report (from container servers)

Config, dispatch, POST, DELETE, HEAD and GET are shared with the container server
(`swiftlite.db.server.DBServer`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from aiohttp import web

from swiftlite.account.broker import AccountBroker
from swiftlite.common import policies
from swiftlite.common.config import Section
from swiftlite.common.constraints import ACCOUNT_LISTING_LIMIT
from swiftlite.common.http import HTTPError, error
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.db import listing
from swiftlite.db.broker import ZERO_TS, DatabaseNotFound, MetadataLimit
from swiftlite.db.headers import meta_headers, req_int, req_metadata, req_timestamp
from swiftlite.db.server import DBServer, backend_ts, make_db_app

KEY = web.AppKey("account_server", object)


def info_headers(info: dict[str, Any]) -> dict[str, str]:
    h = {
        "X-Account-Container-Count": str(info["container_count"]),
        "X-Account-Object-Count": str(info["object_count"]),
        "X-Account-Bytes-Used": str(info["bytes_used"]),
        "X-Timestamp": Timestamp.parse(info["created_at"]).normal,
        "X-Put-Timestamp": Timestamp.parse(info["put_timestamp"]).normal,
        **backend_ts(info),
    }
    for index, st in sorted(info.get("policy_stats", {}).items()):
        if st["container_count"] or st["object_count"] or st["bytes_used"]:
            pre = f"X-Account-Storage-Policy-{listing.policy_name(index)}-"
            h[pre + "Container-Count"] = str(st["container_count"])
            h[pre + "Object-Count"] = str(st["object_count"])
            h[pre + "Bytes-Used"] = str(st["bytes_used"])
    h.update(meta_headers(info["metadata"]))
    return h


class AccountServer(DBServer):
    kind = "account"
    # A container report must land in a live account or be refused (404), so each is
    # applied in its round: holding it would answer before that check.
    HOLDS_ROWS = False
    broker_class = AccountBroker
    listing_limit = ACCOUNT_LISTING_LIMIT
    delete_conflict = "Conflict: a newer PUT exists"
    info_headers = staticmethod(info_headers)  # type: ignore[assignment]

    def __init__(self, conf: Section) -> None:
        super().__init__(conf)
        listing.set_policy_names(
            {p.index: p.name for p in policies.load(conf.get_str("swift_dir", "/etc/swiftlite"))})
        self.item_handlers = {"PUT": self.container_update}

    def merge_function(self, broker: AccountBroker) -> Callable[..., int]:
        """Container reports only land in a live account: a deleted one answers 404."""
        return functools.partial(broker.merge_items, require_live=True)

    async def put(self, request: web.Request, broker: AccountBroker,
                  dev_path: str) -> web.StreamResponse:
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, "account", ts)
        try:
            created, info = await run_blocking(broker.put_db, ts, meta, None, True)
        except MetadataLimit as exc:
            return error(400, str(exc))
        if info["deleted"]:
            return error(409, "Account was deleted more recently", backend_ts(info))
        return web.Response(status=201 if created else 202)

    async def container_update(self, request: web.Request, broker: AccountBroker,
                               dev_path: str, container: str) -> web.StreamResponse:
        put_ts = req_timestamp(request, "X-Put-Timestamp", required=False) or ZERO_TS
        del_ts = req_timestamp(request, "X-Delete-Timestamp", required=False) or ZERO_TS
        stats_ts = req_timestamp(request, "X-Timestamp", required=False) or max(put_ts, del_ts)
        if put_ts == ZERO_TS and del_ts == ZERO_TS:
            raise HTTPError(400, "Missing X-Put-Timestamp or X-Delete-Timestamp")
        row = {"name": container, "put_timestamp": put_ts, "delete_timestamp": del_ts,
               "stats_timestamp": stats_ts,
               "object_count": req_int(request, "X-Object-Count", 0),
               "bytes_used": req_int(request, "X-Bytes-Used", 0), "report": True,
               "storage_policy_index": req_int(request, policies.POLICY_INDEX_HEADER, 0)}
        try:
            await self.commit_items(broker, [row])
        except DatabaseNotFound:
            return error(404, "Account Not Found")
        return web.Response(status=201)


def create_app(conf: Section) -> web.Application:
    return make_db_app(AccountServer(conf), KEY, conf)
