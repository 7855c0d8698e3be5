"""Gatekeeper: headers only the cluster may set never come from, or go back to, a client.

System metadata (`X-<Kind>-Sysmeta-*`) is where pipeline features keep their state (account
ACLs, quotas, ...) and `X-Backend-*` steers the storage servers: a client sending either is
ignored, and answers never show them.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import header_names_pattern
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import ApiPath, clone

RESERVED = ("x-account-sysmeta-", "x-container-sysmeta-", "x-object-sysmeta-", "x-backend-")
# The same, looked for in all of a message's names at once (one per line: a header name holds
# no line break). Every request and answer passes here and almost none has one: one search,
# not a call or two per name.
_ANY_RESERVED = header_names_pattern(prefixes=RESERVED)


def _reserved_in(names: Any) -> list[str]:
    """The reserved names among `names` (a message's headers), which _ANY_RESERVED found."""
    return [k for k in names if k.lower().startswith(RESERVED)]


class Gatekeeper(Middleware):
    name = "gatekeeper"
    plain_reads = HOOKS
    plain_refused_by_prefix = RESERVED  # a plain read has nothing to clean

    def info(self) -> None:
        return None

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        resp = await self.app(_cleaned(request))
        _strip(resp)
        return resp

    def accept_plain(self, request: web.Request, path: ApiPath,
                     resp: web.StreamResponse) -> bool:
        _strip(resp)
        return True


def _cleaned(request: web.Request) -> web.Request:
    """The request without the reserved headers a client sent."""
    headers = request.headers
    if _ANY_RESERVED.search("\n".join(headers)) is None:
        return request
    clean = CIMultiDict(headers)
    for k in _reserved_in(headers):
        clean.popall(k, None)
    return clone(request, headers=clean)


def _strip(resp: web.StreamResponse) -> None:
    headers = resp.headers
    if _ANY_RESERVED.search("\n".join(headers)) is not None:
        for k in _reserved_in(headers):
            headers.popall(k, None)
