"""Outermost: Swift's response decorations on every answer, whatever made it.

Every answer carries `X-Openstack-Request-Id` (the request id), and one without a body type
says `text/html; charset=UTF-8`, as Swift's do. Unexpected errors are already turned into
logged 500s by the server's base middleware.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.common.http import HTTPError, txid
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import ApiPath

DEFAULT_TYPE = "text/html; charset=UTF-8"


class CatchErrors(Middleware):
    name = "catch_errors"
    plain_reads = HOOKS

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        try:
            resp = await self.app(request)
        except HTTPError as exc:
            resp = exc.response()
        _decorate(request, resp)
        return resp

    def accept_plain(self, request: web.Request, path: ApiPath,
                     resp: web.StreamResponse) -> bool:
        _decorate(request, resp)
        return True

    def info(self) -> None:
        return None


def _decorate(request: web.Request, resp: web.StreamResponse) -> None:
    headers = resp.headers
    if resp.status == 411:
        resp.force_close()  # whatever body follows has no length: the connection is lost
    if "Content-Type" not in headers:
        headers["Content-Type"] = DEFAULT_TYPE
    headers["X-Openstack-Request-Id"] = txid(request)
    asked = request.headers.get("Connection")
    if asked is not None and asked.lower() == "keep-alive" and request.keep_alive and \
            "Connection" not in headers:
        headers["Connection"] = "keep-alive"  # echoed, as Swift's server does
