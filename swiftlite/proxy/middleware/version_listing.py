"""`GET <container>?versions`: every version of a versioned container's objects (JSON only,
as Swift's), newest first under each name, with `version_id`, `is_latest` and the
`version_marker` pagination parameter.

The primary listing (the client's parameters) gives the unversioned (`null`) objects and the
version links; the versions container's listing (the same parameters, in its reserved names)
gives every version. A version is the latest when the link points to it, or when it is a
delete marker newer than anything else of its name.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.config import TRUE_VALUES
from swiftlite.common.http import HTTPError, query_str
from swiftlite.common.reserved import RESERVED, reserved_name, split_reserved
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.db.listing import NotAcceptable, accept_type
from swiftlite.proxy.middleware.version_names import (
    CLIENT_ENABLED,
    DELETE_MARKER,
    SYSMETA_CONT,
    SYSMETA_ENABLED,
    WAS_NULL,
    auth_headers,
    listing_query,
    parse_version_object,
    path_of,
    version_object,
    versions_container,
)
from swiftlite.proxy.request import INTERNAL, ApiPath
from swiftlite.proxy.response import answer_body, close_answer


class Versioning(Protocol):
    """What the listing needs of the middleware (object_versioning.ObjectVersioning, which
    calls it): its sub-requests as the caller."""

    async def _send(self, request: web.Request, method: str, path: str,
                    headers: Any = None, body: Any = None, query: str = "",
                    ts: Timestamp | None = None, reserved: bool = True) -> web.StreamResponse:
        ...

    async def _container_head(self, request: web.Request, path: ApiPath,
                              container: str) -> web.StreamResponse:
        ...


async def list_versions(ov: Versioning, request: web.Request,
                        path: ApiPath) -> web.StreamResponse:
    """The client's `?versions` listing; `ov` makes the sub-requests (as the caller)."""
    # The primary listing is read as JSON whatever the client asked for.
    fmt = (query_str(request, "format") or "").lower()
    try:
        ctype = accept_type(request.headers.get("Accept"))[0] if not fmt else \
            {"json": "application/json"}.get(fmt, "")
    except NotAcceptable:
        ctype = ""
    if ctype != "application/json" and not (not fmt and "Accept" not in request.headers):
        raise HTTPError(406, "Not Acceptable")
    _check_versions_params(request)
    return await _merged(ov, request, path)


async def _merged(ov: Versioning, request: web.Request,
                  path: ApiPath) -> web.StreamResponse:
    """The two listings, merged in name order (newest version first under each name)."""
    assert path.container is not None
    q = request.query
    # The primary listing: the client's parameters, as JSON.
    params = [(k, v) for k, v in q.items()
              if k not in ("versions", "version_marker", "format")]
    primary = await ov._send(request, "GET",
                             path_of(path.version, path.account, path.container),
                             auth_headers(request), reserved=False,
                             query=listing_query(params + [("format", "json")]))
    if primary.status // 100 != 2:
        return primary
    body = await answer_body(primary)
    headers = CIMultiDict(primary.headers)
    enabled = headers.get(SYSMETA_ENABLED)
    if enabled is not None:
        headers[CLIENT_ENABLED] = enabled
    vcont = versions_container(path.container)
    if headers.get(SYSMETA_CONT):
        vhead = await ov._container_head(request, path, vcont)
        close_answer(vhead)
        if vhead.status // 100 == 2 and "X-Container-Bytes-Used" in headers:
            headers["X-Container-Bytes-Used"] = str(
                int(headers["X-Container-Bytes-Used"])
                + int(vhead.headers.get("X-Container-Bytes-Used", "0")))
    limit = _limit(request)
    reverse = (query_str(request, "reverse") or "").lower() in TRUE_VALUES
    try:
        listing = json.loads(body) if body else []
    except ValueError:
        listing = []
    null_items: list[dict] = []
    subdirs: set[str] = set()
    links: dict[tuple[str, str], dict] = {}
    latest: set[str] = set()
    for item in listing:
        if "name" not in item:
            subdirs.add(item["subdir"])
            continue
        vid = _link_version(item)
        if vid is not None:
            links[(item["name"], vid)] = item
        else:
            null_items.append(_listing_item(item, "null", True))
            latest.add(item["name"])
    vparams = _versions_params(request)
    vresp = await ov._send(request, "GET", path_of(path.version, path.account, vcont),
                           auth_headers(request),
                           query=listing_query(vparams + [("format", "json")]))
    versions: list[dict] = []
    if vresp.status // 100 == 2:
        vbody = await answer_body(vresp)
        for item in json.loads(vbody) if vbody else []:
            if "name" not in item:
                try:
                    subdirs.add(split_reserved(item["subdir"])[0])
                except ValueError:
                    pass
                continue
            name, vid = parse_version_object(item["name"])
            if vid is None:
                continue
            if links.pop((name, vid), None) is not None:
                is_latest = True
                latest.add(name)
            elif item.get("content_type") == DELETE_MARKER and name not in latest:
                is_latest = True
                latest.add(name)
            else:
                is_latest = False
            item["name"] = name
            versions.append(_listing_item(item, vid, is_latest))
    else:
        close_answer(vresp)
        if vresp.status != 404:
            return vresp
    # Links whose version the versions listing did not show (another page, or gone).
    broken = []
    for (name, vid), item in links.items():
        is_latest = name not in latest
        latest.add(name)
        broken.append(_listing_item(item, vid, is_latest))
    merged = null_items + versions + [{"subdir": s} for s in subdirs] + broken
    merged.sort(key=lambda i: i.get("subdir", i.get("name", "")), reverse=reverse)
    if not request.get(INTERNAL):
        for item in merged:
            item.pop(WAS_NULL, None)
    out = json.dumps(merged[:limit]).encode()
    headers.pop("Content-Length", None)
    headers["Content-Type"] = "application/json; charset=utf-8"
    return web.Response(status=200, body=out, headers=headers)


def _limit(request: web.Request) -> int:
    raw = query_str(request, "limit")
    if raw and raw.isdigit():
        return min(int(raw), 10000)
    return 10000


def _check_versions_params(request: web.Request) -> None:
    if "version_marker" in request.query and "marker" not in request.query:
        raise HTTPError(400, "version_marker param requires marker")
    delim = query_str(request, "delimiter") or ""
    if set(delim) & set("0123456789." + RESERVED):
        raise HTTPError(400, "invalid delimiter param")
    vm = request.query.get("version_marker")
    if vm is not None and vm != "null":
        try:
            Timestamp.parse(vm)
        except TimestampError:
            raise HTTPError(400, "invalid version_marker param") from None


def _versions_params(request: web.Request) -> list[tuple[str, str]]:
    """The versions container's listing parameters for a client's ?versions listing."""
    out: list[tuple[str, str]] = []
    marker = query_str(request, "marker")
    vm = request.query.get("version_marker")
    if marker is not None:
        if vm is None:
            out.append(("marker", reserved_name(marker, "") + ":"))  # past its versions
        elif vm == "null":
            out.append(("marker", reserved_name(marker, "")))  # before its versions
        else:
            out.append(("marker", version_object(marker, vm)))
    prefix = query_str(request, "prefix")
    if prefix:
        out.append(("prefix", RESERVED + prefix))
    for k in ("limit", "delimiter", "reverse"):
        v = query_str(request, k)
        if v is not None:
            out.append((k, v))
    return out


def _link_version(item: dict) -> str | None:
    """The version id a primary listing row links to (None: not a version link)."""
    vid = item.get("ov_version_id")
    return vid if isinstance(vid, str) else None


def _listing_item(item: dict, version_id: str, is_latest: bool) -> dict:
    out = {k: v for k, v in item.items()
           if k not in ("ov_version_id", "symlink_path", "version_symlink")}
    out["is_latest"] = is_latest
    out["version_id"] = version_id
    return out
