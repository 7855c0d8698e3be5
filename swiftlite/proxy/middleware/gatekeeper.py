"""Gatekeeper: headers only the cluster may set never come from, or go back to, a client.

System metadata (`X-<Kind>-Sysmeta-*`) is where pipeline features keep their state (account
ACLs, quotas, ...) and `X-Backend-*` steers the storage servers: a client sending either is
ignored, and answers never show them.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import ApiPath, clone

RESERVED = ("x-account-sysmeta-", "x-container-sysmeta-", "x-object-sysmeta-", "x-backend-")


def _reserved_in(names: Any) -> list[str]:
    """The reserved names among `names`. Every request and answer passes here, so the
    common case (no name starts with an x) costs no call per name."""
    return [k for k in names if (k[0] == "x" or k[0] == "X") and k.lower().startswith(RESERVED)]


class Gatekeeper(Middleware):
    name = "gatekeeper"
    plain_reads = HOOKS

    def info(self) -> None:
        return None

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        resp = await self.app(_cleaned(request))
        _strip(resp)
        return resp

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request:
        return _cleaned(request)

    def accept_plain(self, request: web.Request, resp: web.StreamResponse) -> bool:
        _strip(resp)
        return True


def _cleaned(request: web.Request) -> web.Request:
    """The request without the reserved headers a client sent."""
    dropped = _reserved_in(request.headers)
    if not dropped:
        return request
    clean = CIMultiDict(request.headers)
    for k in dropped:
        clean.popall(k, None)
    return clone(request, headers=clean)


def _strip(resp: web.StreamResponse) -> None:
    for k in _reserved_in(resp.headers):
        resp.headers.popall(k, None)
