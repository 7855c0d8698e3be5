"""Container server: container PUT/POST/DELETE/HEAD/GET and the object-update routes.

/{dev}/{part}/{a}/{c}      container operations; MERGE (or UPDATE): msgpack batch of object rows
/{dev}/{part}/{a}/{c}/{o}  PUT/DELETE object rows from object servers

aiohttp's C HTTP parser (llhttp) only knows registered methods and answers 400 to
"UPDATE", so the batch form is also served as MERGE (a WebDAV method llhttp accepts);
UPDATE still works behind a parser that passes it through.

Config, dispatch, POST, DELETE, HEAD and GET are shared with the account server
(`swiftlite.db.server.DBServer`). Every SQLite access is one run_blocking hop; object
updates go through the DB's group committer so concurrent updates share a transaction.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

import msgpack
from aiohttp import web

from swiftlite.common import policies
from swiftlite.common.clients.client import make_session
from swiftlite.common.config import Section
from swiftlite.common.constraints import (
    CONTAINER_LISTING_LIMIT,
    check_object,
    check_utf8,
)
from swiftlite.common.http import HTTPError, error
from swiftlite.common.replica_groups import SECTION_STATUSES, SECTIONS
from swiftlite.common.reserved import ALLOW_RESERVED_HEADER
from swiftlite.common.shard_redirect import CLEAVING, REDIRECTS
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.account_reporter import AccountReporter, parse_account_nodes
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_ranges import (
    LISTED_FROM_SHARDS,
    ShardRange,
    State,
    live,
    route,
)
from swiftlite.container.shard_server import (
    LISTING_LOWER,
    LISTING_UPPER,
    RECORD_TYPE,
    SHARD_RANGE,
    SHARDING_STATE,
    RouteCache,
    groups_body,
    parse_ranges,
    redirect_response,
    segments,
    split_rows,
)
from swiftlite.db.broker import DatabaseNotFound, MetadataLimit
from swiftlite.db.headers import (
    meta_headers,
    parse_timestamp,
    req_int,
    req_metadata,
    req_timestamp,
)
from swiftlite.db.listing import POLICY_NAME
from swiftlite.db.listing_http import parse_params, response
from swiftlite.db.paths import db_file, parse_partition
from swiftlite.db.server import DBServer, backend_ts, make_db_app

# Stored alongside X-Container-Meta-*; the proxy and middlewares read them back.
SAVED_HEADERS = ("x-container-read", "x-container-write", "x-versions-location",
                 "x-history-location", "x-container-sync-key", "x-container-sync-to")

KEY = web.AppKey("container_server", object)


def _ts_normal(ts: str) -> str:
    return Timestamp.parse(ts).normal


def info_headers(info: dict[str, Any]) -> dict[str, str]:
    put_ts = Timestamp.parse(info["put_timestamp"])
    h = {
        "X-Container-Object-Count": str(info["object_count"]),
        "X-Container-Bytes-Used": str(info["bytes_used"]),
        "X-Timestamp": _ts_normal(info["created_at"]),
        "X-Put-Timestamp": put_ts.normal,
        # Swift's: the last PUT or POST of the container, rounded up to the second.
        "Last-Modified": put_ts.http_date(),
        "X-Storage-Policy": POLICY_NAME,
        **backend_ts(info),
        # Group-commit evidence (this process): transactions vs object updates merged.
        "X-Backend-Update-Commits": str(info["item_commits"]),
        "X-Backend-Updates-Merged": str(info["items_merged"]),
        SHARDING_STATE: str(info.get("sharding_state", 0)),
    }
    h.update(meta_headers(info["metadata"]))
    return h


def check_policy(headers: Any) -> None:
    """X-Storage-Policy on a container PUT: empty or the one policy's name (any case)."""
    name = headers.get("X-Storage-Policy")
    if name and name.strip().lower() != POLICY_NAME.lower():
        raise HTTPError(400, f"Invalid X-Storage-Policy '{name.strip()}'")


async def _policy_meta(request: web.Request, broker: ContainerBroker,
                       ts: str) -> dict[str, list[str]] | None:
    """The policy index to store with a container PUT, as its metadata ({} to keep it).

    The proxy resolved the client's X-Storage-Policy to X-Backend-Storage-Policy-Index, or
    sent the default's index as X-Backend-Storage-Policy-Default. A live container keeps its
    policy: naming another one is a 409; a new (or deleted) one takes the named or the
    default. None: the request carries neither header (not from a proxy)."""
    asked = request.headers.get(policies.POLICY_INDEX_HEADER)
    default = request.headers.get(policies.POLICY_DEFAULT_HEADER)
    if asked is None and default is None:
        return None
    try:
        chosen = policies.header_index({policies.POLICY_INDEX_HEADER: asked or default})
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    try:
        info = await run_blocking(broker.get_info)
    except DatabaseNotFound:
        info = None
    if info is not None and not info["deleted"]:
        stored = info["metadata"].get(policies.CONTAINER_POLICY_KEY)
        current = int(stored[0]) if stored and stored[0] else 0
        if asked is not None and chosen != current:
            raise HTTPError(409, "Conflict: the container exists on another storage policy")
        return {}
    return {policies.CONTAINER_POLICY_KEY: [str(chosen), ts]}


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
    bad = check_object(name, True)
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
    policy = raw.get("storage_policy_index")  # None: the container's own (the broker's)
    if policy is not None and (not isinstance(policy, int) or isinstance(policy, bool)
                               or policy < 0):
        raise HTTPError(400, "Invalid storage_policy_index")
    return {"name": name, "created_at": parse_timestamp(str(raw.get("created_at", "")),
                                                           "created_at"),
            "size": 0 if deleted else size, "deleted": int(bool(deleted)),
            "content_type": _clean_str(ctype, "content_type"), "etag": _clean_str(etag, "etag"),
            "storage_policy_index": policy}


def _row_policy(request: web.Request) -> int | None:
    """The policy an object update's object was written under (None: not said, an update
    older than rows recording it, taken as the container's own)."""
    if policies.POLICY_INDEX_HEADER not in request.headers:
        return None
    try:
        return policies.header_index(request.headers)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None


class ContainerServer(DBServer):
    kind = "container"
    broker_class = ContainerBroker
    listing_limit = CONTAINER_LISTING_LIMIT
    saved_headers = SAVED_HEADERS
    delete_conflict = "Conflict: container not empty or newer PUT"
    post_moves_put = True  # Last-Modified follows a POST, as in Swift
    info_headers = staticmethod(info_headers)  # type: ignore[assignment]

    def __init__(self, conf: Section) -> None:
        super().__init__(conf)
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 3.0)
        self.group_commit = conf.get_bool("group_commit", True)
        self.reporter = AccountReporter(conf.get_float("account_update_interval", 1.0))
        self.handlers.update({"MERGE": self.update, "UPDATE": self.update})
        self.item_handlers = {"PUT": self.object_put, "DELETE": self.object_delete}
        self.routes = RouteCache(conf.get_float("shard_route_ttl", 1.0))

    def commit_batch(self) -> int:
        return self.max_batch if self.group_commit else 1

    async def on_startup(self, app: web.Application) -> None:
        self.session = make_session(self.conn_timeout, self.node_timeout)
        self.reporter.start(self.session)
        await super().on_startup(app)

    async def on_cleanup(self, app: web.Application) -> None:
        await super().on_cleanup(app)
        await self.reporter.stop()
        await self.session.close()

    async def after_change(self, broker: ContainerBroker, dev_path: str,
                           info: dict[str, Any]) -> web.StreamResponse | None:
        """Report the new state to the account at once (404: the account does not exist)."""
        if info["account_nodes"].get("nodes"):
            status = await self.reporter.report(broker, dev_path, info)
            if status == 404:
                return error(404, "Account not found")
        return None

    async def after_post(self, broker: ContainerBroker, dev_path: str,
                         info: dict[str, Any]) -> None:
        """A POST moved put_timestamp: the account's listing (last_modified) follows soon."""
        self.reporter.mark_dirty(broker, dev_path)

    # -- container -----------------------------------------------------------------------
    async def put(self, request: web.Request, broker: ContainerBroker,
                  dev_path: str) -> web.StreamResponse:
        if request.headers.get(RECORD_TYPE) == "shard":
            return await self._put_ranges(request, broker, dev_path)
        ts = req_timestamp(request)
        assert ts is not None
        meta = req_metadata(request, "container", ts, SAVED_HEADERS)
        policy = await _policy_meta(request, broker, ts)
        if policy is None:
            check_policy(request.headers)  # a client of its own: the one policy's name only
        else:
            meta.update(policy)
        nodes = parse_account_nodes(request.headers)
        own: list[ShardRange] = []
        if SHARD_RANGE in request.headers:  # the sharder making a shard container
            try:
                own = parse_ranges(request.headers[SHARD_RANGE].encode())
            except (ValueError, TypeError) as exc:
                return error(400, f"Invalid {SHARD_RANGE}: {exc}")
        try:
            created, info = await run_blocking(broker.put_db, ts, meta, nodes, True)
            if own:
                await run_blocking(broker.merge_ranges, own)
                self.routes.drop(broker)
        except MetadataLimit as exc:
            return error(400, str(exc))
        return (await self.after_change(broker, dev_path, info)
                or web.Response(status=201 if created else 202))

    async def _put_ranges(self, request: web.Request, broker: ContainerBroker,
                          dev_path: str) -> web.StreamResponse:
        """Merge shard ranges (JSON list) into an existing DB: 202, or 404 without one."""
        try:
            ranges = parse_ranges(await request.read())
        except (ValueError, TypeError) as exc:
            return error(400, f"Invalid shard ranges: {exc}")
        try:
            await run_blocking(broker.merge_ranges, ranges)
        except DatabaseNotFound:
            return error(404, "Container Not Found")
        self.routes.drop(broker)
        self.reporter.mark_dirty(broker, dev_path)  # a sharded root's totals may have moved
        return web.Response(status=202)

    async def get(self, request: web.Request, broker: ContainerBroker,
                  dev_path: str) -> web.StreamResponse:
        rtype = request.headers.get(RECORD_TYPE)
        if rtype not in ("shard", "auto", "nested", "raw", "rows"):
            return await super().get(request, broker, dev_path)
        if rtype == "rows":
            return await self._get_rows(request, broker)

        def read() -> tuple[dict[str, Any], ShardRange | None, list[ShardRange]]:
            info = broker.get_info()
            own, ranges = broker.get_ranges()
            return info, own, ranges

        try:
            info, own, ranges = await run_blocking(read)
        except DatabaseNotFound:
            return error(404, "Not Found")
        if info["deleted"]:
            return error(404, "Not Found", backend_ts(info))
        headers = self.info_headers(info)
        state = info["sharding_state"]
        if rtype == "shard":
            body = [r.to_dict() for r in ([own] if own else []) + ranges]
            return web.json_response(body, headers=headers)
        if rtype in ("auto", "nested") and state in LISTED_FROM_SHARDS:
            # "nested": a shard asked for its rows that split in turn (see shard_listing).
            name = f"{info['account']}/{info['container']}"
            body = segments(state, name, live(ranges))
            return web.json_response({"segments": body, "name": name}, headers=headers)
        if rtype == "auto":
            return await super().get(request, broker, dev_path)
        # "raw": the rows as msgpack, for the proxy to merge with other shards' rows.
        params = parse_params(request, self.listing_limit)
        params.hide_reserved = request.headers.get(ALLOW_RESERVED_HEADER) != "true"
        params.lower = unquote(request.headers.get(LISTING_LOWER, "")) or None
        params.upper = unquote(request.headers.get(LISTING_UPPER, "")) or None
        info, rows = await run_blocking(broker.list_items, params)
        return response(msgpack.packb([list(r) for r in rows], use_bin_type=True),
                        "application/x-msgpack", headers)

    async def _get_rows(self, request: web.Request,
                        broker: ContainerBroker) -> web.StreamResponse:
        """Rows changed after ROWID `since` (tombstones too), oldest change first, msgpack:
        how the sharder pulls a shard's rows back into its root."""
        since = req_int(request, "X-Backend-Since-Row")
        limit = min(req_int(request, "X-Backend-Limit", 1000), 10_000)
        try:
            rows = await run_blocking(broker.get_items_since, since, limit)
        except DatabaseNotFound:
            return error(404, "Not Found")
        return web.Response(body=msgpack.packb(rows, use_bin_type=True),
                            content_type="application/x-msgpack")

    # -- object rows ---------------------------------------------------------------------
    async def _redirect_for(self, request: web.Request, broker: ContainerBroker,
                            obj: str) -> web.StreamResponse | None:
        if CLEAVING in request.headers:
            return None
        try:
            state, ranges = await self.routes.get(broker)
        except DatabaseNotFound:
            return error(404, "Container Not Found")
        if state == State.SHRUNK and not ranges:
            return error(404, "Container Not Found")  # a retired shard whose root is unknown
        r = route(state, ranges, obj)
        return redirect_response(r) if r is not None else None

    async def _commit(self, broker: ContainerBroker, dev_path: str,
                      rows: list[dict[str, Any]]) -> web.Response | None:
        try:
            await self.commit_items(broker, rows)
        except DatabaseNotFound:
            return error(404, "Container Not Found")
        self.reporter.mark_dirty(broker, dev_path)
        return None

    async def object_put(self, request: web.Request, broker: ContainerBroker, dev_path: str,
                         obj: str) -> web.StreamResponse:
        redirect = await self._redirect_for(request, broker, obj)
        if redirect is not None:
            return redirect
        ts = req_timestamp(request)
        size = req_int(request, "X-Size")
        row = {"name": obj, "created_at": ts, "size": size, "deleted": 0,
               "content_type": _clean_str(request.headers.get("X-Content-Type"),
                                          "X-Content-Type"),
               "etag": _clean_str(request.headers.get("X-Etag"), "X-Etag"),
               "storage_policy_index": _row_policy(request)}
        return await self._commit(broker, dev_path, [row]) or web.Response(status=201)

    async def object_delete(self, request: web.Request, broker: ContainerBroker,
                            dev_path: str, obj: str) -> web.StreamResponse:
        redirect = await self._redirect_for(request, broker, obj)
        if redirect is not None:
            return redirect
        ts = req_timestamp(request)
        row = {"name": obj, "created_at": ts, "size": 0, "deleted": 1, "content_type": "",
               "etag": "", "storage_policy_index": _row_policy(request)}
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
        cleaving = CLEAVING in request.headers
        if SECTIONS in request.headers:
            return await self._update_sections(broker, raw, cleaving)
        rows = [_update_row(r) for r in raw]
        if not rows:
            return web.Response(status=202)
        rows, away = await self._split(broker, rows, cleaving)
        if rows:
            failed = await self._commit(broker, dev_path, rows)
            if failed is not None:
                return failed
        return self._batch_answer([away])

    async def _split(self, broker: ContainerBroker, rows: list[dict[str, Any]],
                     cleaving: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(rows this DB keeps, rows redirected to shards by shard name)."""
        if cleaving:
            return rows, {}
        try:
            state, ranges = await self.routes.get(broker)
        except DatabaseNotFound:
            return rows, {}  # the commit answers the 404
        if state == State.SHRUNK and not ranges:
            raise HTTPError(404, "Container Not Found")  # a retired shard, root unknown
        return split_rows(state, ranges, rows)

    @staticmethod
    def _batch_answer(aways: list[dict[str, Any]], headers: dict[str, str] | None = None,
                      ) -> web.Response:
        headers = dict(headers or {})
        if not any(aways):
            return web.Response(status=202, headers=headers)
        headers[REDIRECTS] = "1"
        return web.Response(status=202, headers=headers, content_type="application/x-msgpack",
                            body=msgpack.packb([groups_body(a) for a in aways],
                                               use_bin_type=True))


    async def _update_sections(self, broker: ContainerBroker, raw: list[Any],
                               cleaving: bool = False) -> web.StreamResponse:
        """A batch for several replicas of this container held here (one per device): the
        body lists [device, partition, rows]; each DB's outcome is reported on its own, in
        order, in X-Backend-Section-Statuses (202, or the status that DB alone would get)."""
        if len(raw) > 64 or not all(isinstance(x, list) and len(x) == 3 for x in raw):
            return error(400, "sections must be [device, partition, rows] lists")

        aways: list[dict[str, Any]] = [{} for _ in raw]

        async def one(i: int, device: Any, part: Any, rows_raw: Any) -> int:
            try:
                if not isinstance(device, str) or not isinstance(rows_raw, list):
                    raise HTTPError(400, "bad section")
                dp = await self.devices.check(device)
                part_n = parse_partition(str(part))
                rows = [_update_row(r) for r in rows_raw]
            except HTTPError as exc:
                return exc.status
            db = self.brokers.get(db_file(self.devices.devices, device, self.kind, part_n,
                                          broker.account, broker.container))
            if not db.account:
                db.account, db.container = broker.account, broker.container
            rows, aways[i] = await self._split(db, rows, cleaving)
            if not rows:
                return 202
            failed = await self._commit(db, dp, rows)
            return failed.status if failed is not None else 202

        statuses = await asyncio.gather(*(one(i, *x) for i, x in enumerate(raw)))
        return self._batch_answer(aways, {SECTION_STATUSES: ",".join(map(str, statuses))})


def create_app(conf: Section) -> web.Application:
    return make_db_app(ContainerServer(conf), KEY, conf)
