"""Container requests: listings and stats from any replica, writes to a quorum."""

from __future__ import annotations

from aiohttp import web

from swiftlite.common.clients.client import node_path
from swiftlite.common.http import HTTPError, method_not_allowed, query_str
from swiftlite.common.policies import POLICY_DEFAULT_HEADER, POLICY_INDEX_HEADER
from swiftlite.common.reserved import ALLOW_RESERVED_HEADER
from swiftlite.proxy import account, shard_listing
from swiftlite.proxy.backend.replicas import best_response
from swiftlite.proxy.common import LISTING_PARAMS, metadata_headers, read_any, relay
from swiftlite.proxy.core_api import ProxyInterior
from swiftlite.proxy.request import ALLOW_RESERVED


async def handle(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    method = request.method
    if method in ("GET", "HEAD"):
        return await _read(proxy, request, target)
    proxy.authorize_account_write(request, target)
    if method == "PUT":
        return await _write(proxy, request, target, "PUT")
    if method == "POST":
        return await _write(proxy, request, target, "POST")
    if method == "DELETE":
        return await _write(proxy, request, target, "DELETE")
    raise method_not_allowed("DELETE, GET, HEAD, OPTIONS, POST, PUT")


async def _read(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    if not target.is_owner:
        await proxy.authorize_container(request, target, write=False, listing=True)
    for p in LISTING_PARAMS:
        query_str(request, p)  # strict UTF-8 check before anything goes to a backend
    part = proxy.container_ring.get_part(target.account, target.container)
    extra = {}
    if "Accept" in request.headers:
        extra["Accept"] = request.headers["Accept"]
    if request.get(ALLOW_RESERVED):
        extra[ALLOW_RESERVED_HEADER] = "true"
    # A sharded root answers a listing with its segments instead of rows.
    headers = {**extra, shard_listing.RECORD_TYPE: "auto"} if request.method == "GET" else extra
    resp = await read_any(proxy, request, proxy.container_ring, part, request.method,
                          (target.account, target.container),
                          request.rel_url.raw_query_string, headers)
    if request.method == "GET" and shard_listing.is_segmented(resp):
        answer = await shard_listing.listing(proxy, request, target.container, resp, extra)
    else:
        answer = relay(resp, request)
    answer.headers["Accept-Ranges"] = "bytes"  # as Swift says (clients check it)
    if resp.status // 100 == 2:  # the policy's configured name, from its index
        index = int(resp.headers.get(POLICY_INDEX_HEADER, 0) or 0)
        answer.headers["X-Storage-Policy"] = proxy.policies.name_of(index)
    return answer


def _policy_headers(proxy: ProxyInterior, request: web.Request, headers: dict[str, str]) -> None:
    """A container PUT's X-Storage-Policy (a name or alias) as the index the servers keep."""
    headers.pop("X-Storage-Policy", None)
    name = request.headers.get("X-Storage-Policy", "").strip()
    if not name:
        headers[POLICY_DEFAULT_HEADER] = str(proxy.policies.default.index)
        return
    policy = proxy.policies.by_name(name)
    if policy is None:
        raise HTTPError(400, f"Invalid X-Storage-Policy '{name}'")
    if policy.is_deprecated:
        raise HTTPError(400, f"Storage Policy '{name}' is deprecated")
    headers[POLICY_INDEX_HEADER] = str(policy.index)


async def _write(proxy: ProxyInterior, request: web.Request, target, method: str) -> web.Response:
    acct, cont = target.account, target.container
    headers = metadata_headers(request, "container") if method != "DELETE" else {}
    if method == "PUT":
        _policy_headers(proxy, request, headers)
        await account.ensure_account(proxy, request, acct)
    ts = proxy.next_timestamp()
    base = {**proxy.backend_headers(request, ts), **headers}
    part = proxy.container_ring.get_part(acct, cont)
    apart, anodes = proxy.account_ring.get_nodes(acct)

    def headers_for(index: int, node: dict) -> dict[str, str]:
        h = dict(base)
        if anodes and method in ("PUT", "DELETE"):
            an = anodes[index % len(anodes)]
            h["X-Account-Host"] = f"{an['ip']}:{an['port']}"
            h["X-Account-Device"] = an["device"]
            h["X-Account-Partition"] = str(apart)
        return h

    responses = await proxy.backend.fan_out(
        proxy.container_ring, part, method, lambda n: node_path(n, part, acct, cont),
        headers_for, use_handoffs=(method != "DELETE"))
    await proxy.container_cache.drop((acct, cont))
    proxy.container_written(acct, cont)
    best = best_response(responses, proxy.container_ring.replica_count)
    if method == "DELETE" and best.status == 409:
        return web.Response(status=409, text="There was a conflict when trying to complete "
                            "your request: the container is not empty.\n")
    return web.Response(status=best.status, body=best.body if best.status >= 400 else b"")
