"""Account requests: stats and container listings, metadata, auto-creation on first write."""

from __future__ import annotations

from xml.sax.saxutils import escape as xml_escape

from aiohttp import web

from swiftlite.common.clients.client import node_path
from swiftlite.common.http import HTTPError, method_not_allowed, query_str
from swiftlite.common.reserved import ALLOW_RESERVED_HEADER
from swiftlite.proxy.backend.replicas import best_response
from swiftlite.proxy.common import LISTING_PARAMS, metadata_headers, read_any, relay
from swiftlite.proxy.core_api import ProxyInterior
from swiftlite.proxy.request import ALLOW_RESERVED, AUTHORIZER


async def handle(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    method = request.method
    if not target.is_owner:  # the authorizer may let a non-owner in (account ACLs)
        authorizer = request.get(AUTHORIZER)
        if authorizer is None:
            raise proxy.deny(target)
        authorizer.authorize_account(request, target.ident, target.account)
    if method in ("GET", "HEAD"):
        return await _read(proxy, request, target)
    if method == "POST":
        await ensure_account(proxy, request, target.account)
        return await _write(proxy, request, target.account, "POST")
    if method in ("PUT", "DELETE"):
        if not (target.ident and target.ident.is_reseller_admin):
            raise HTTPError(403, "Only a reseller admin may create or delete accounts")
        return await _write(proxy, request, target.account, method)
    raise method_not_allowed("DELETE, GET, HEAD, OPTIONS, POST, PUT")


async def _read(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    for p in LISTING_PARAMS:
        query_str(request, p)
    part = proxy.account_ring.get_part(target.account)
    extra = {"Accept": request.headers["Accept"]} if "Accept" in request.headers else {}
    if request.get(ALLOW_RESERVED):
        extra[ALLOW_RESERVED_HEADER] = "true"
    resp = await read_any(proxy, request, proxy.account_ring, part, request.method,
                          (target.account,),
                          request.rel_url.raw_query_string, extra)
    if resp.status == 404 and proxy.account_autocreate:
        answer = _empty_account(request, target.account)
    else:
        answer = relay(resp, request)
    answer.headers["Accept-Ranges"] = "bytes"  # as Swift says (clients check it)
    return answer


def _empty_account(request: web.Request, acct: str) -> web.Response:
    """What an owner sees before the first write auto-creates the account (as Swift does)."""
    headers = {"X-Account-Container-Count": "0", "X-Account-Object-Count": "0",
               "X-Account-Bytes-Used": "0"}
    fmt = request.query.get("format", "")
    accept = request.headers.get("Accept", "")
    if fmt == "json" or (not fmt and "json" in accept):
        ctype, body = "application/json", "[]"
    elif fmt == "xml" or (not fmt and "xml" in accept):
        ctype = "application/xml"
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n'
                f'<account name="{xml_escape(acct, {chr(34): "&quot;"})}"></account>')
    else:
        ctype, body = "text/plain", ""
    headers["Content-Type"] = f"{ctype}; charset=utf-8"
    if request.method == "GET" and body:
        return web.Response(status=200, body=body.encode(), headers=headers)
    headers["Content-Length"] = "0"  # kept on a HEAD only when given explicitly
    return web.Response(status=204, headers=headers)


async def ensure_account(proxy: ProxyInterior, request: web.Request, acct: str) -> None:
    """Create the account on first write (account_autocreate), remembering that it exists."""
    exists, fill = await proxy.account_cache.lookup((acct,))
    if exists:
        return
    part = proxy.account_ring.get_part(acct)
    resp = await read_any(proxy, request, proxy.account_ring, part, "HEAD", (acct,))
    if resp.status // 100 == 2:
        await proxy.account_cache.put((acct,), True, fill)
        return
    if resp.status != 404 or not proxy.account_autocreate:
        raise HTTPError(404 if resp.status == 404 else 503, "Account not available")
    created = await _write(proxy, request, acct, "PUT", with_meta=False)
    if created.status // 100 != 2:
        raise HTTPError(503, "Could not create account")
    await proxy.account_cache.put((acct,), True, fill)


async def _write(proxy: ProxyInterior, request: web.Request, acct: str, method: str,
                 with_meta: bool = True) -> web.Response:
    headers = metadata_headers(request, "account") if with_meta and method != "DELETE" else {}
    base = {**proxy.backend_headers(request, proxy.next_timestamp()), **headers}
    part = proxy.account_ring.get_part(acct)
    responses = await proxy.backend.fan_out(
        proxy.account_ring, part, method, lambda n: node_path(n, part, acct),
        lambda i, n: base)
    # Any outcome may have changed the account (a timeout too): every worker and host refetches.
    await proxy.account_cache.drop((acct,))
    await proxy.account_cache.drop(("info", acct))
    best = best_response(responses, proxy.account_ring.replica_count)
    return web.Response(status=best.status, body=best.body if best.status >= 400 else b"")

