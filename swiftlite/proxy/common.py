"""Pieces the account, container and object controllers share."""

from __future__ import annotations

from contextlib import aclosing

from aiohttp import web

from swiftlite.common import constraints
from swiftlite.common.clients.client import node_path
from swiftlite.common.http import HTTPError
from swiftlite.proxy.backend.nodes import read_order
from swiftlite.proxy.backend.replicas import BackendResponse, client_headers, hedged
from swiftlite.proxy.core_api import ProxyInterior
from swiftlite.ring import Ring

# The query parameters of an account or container listing, checked as UTF-8 before any goes
# to a DB server.
LISTING_PARAMS = ("format", "prefix", "delimiter", "marker", "end_marker", "limit", "reverse",
                  "path")

# Per kind: request headers stored with the resource. Sysmeta is for pipeline features only:
# the gatekeeper strips it from what clients send and from what they get back.
STORED_HEADERS = {
    "container": ("x-container-meta-", "x-container-sysmeta-", "x-container-read",
                  "x-container-write", "x-storage-policy", "x-container-sync-to",
                  "x-container-sync-key"),
    "account": ("x-account-meta-", "x-account-sysmeta-"),
    "object": ("x-object-meta-", "x-object-sysmeta-", "content-type", "content-encoding",
               "content-disposition", "x-delete-at", "x-object-manifest", "cache-control",
               "content-language", "expires"),
}


def metadata_headers(request: web.Request, kind: str) -> dict[str, str]:
    """Stored headers from the request; `X-Remove-<Kind>-Meta-X` becomes an empty value."""
    bad = constraints.check_metadata(request.headers, kind)
    if not bad and kind == "object":
        bad = constraints.check_content_type(request.headers.get("Content-Type", ""))
    if bad:
        raise HTTPError(400, bad)
    prefixes = STORED_HEADERS[kind]
    out: dict[str, str] = {}
    remove = f"x-remove-{kind}-"
    for k, v in request.headers.items():
        lk = k.lower()
        if lk.startswith(remove):
            out[f"X-{kind.capitalize()}-" + k[len(remove):]] = ""
        elif lk.startswith(prefixes) or lk in prefixes:
            # One spelling per header (as Swift's WSGI layer title-cases them), so a later
            # out["X-Delete-At"] replaces a client's "x-delete-at" instead of joining it.
            out[k.title()] = v
    return out


def relay(resp: BackendResponse, request: web.Request) -> web.Response:
    """A backend answer as the client's response (HEAD keeps Content-Length, sends no body)."""
    headers = client_headers(resp.headers)
    if request.method == "HEAD":
        # aiohttp keeps an explicit Content-Length on a HEAD response (the size a GET sends).
        headers["Content-Length"] = resp.headers.get("Content-Length", "0")
        return web.Response(status=resp.status, headers=headers)
    return web.Response(status=resp.status, headers=headers, body=resp.body)


async def read_any(proxy: ProxyInterior, request: web.Request, ring: Ring, part: int, method: str,
                   names: tuple[str, ...], query: str = "",
                   extra: dict[str, str] | None = None) -> BackendResponse:
    """GET/HEAD replicas in random order until one has it; 404 when all say so."""
    headers = proxy.backend_headers(request)
    if extra:
        headers.update(extra)
    seen_404: BackendResponse | None = None

    def send(node: dict):
        return proxy.backend.request(node, method, node_path(node, part, *names), headers,
                                     query=query)

    async with aclosing(hedged(proxy, read_order(ring, part), send)) as answers:
        async for _, resp in answers:
            if resp is None or resp.status >= 500:
                continue
            if resp.status == 404:
                seen_404 = seen_404 or resp
                continue
            return resp
    if seen_404 is not None:
        return seen_404
    return BackendResponse(503, body=b"Service Unavailable: no replica answered\n")
