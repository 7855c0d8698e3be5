"""Tempauth: `/auth/v1.0` tokens, who a request is, and what it may touch.

Runs before the core. On /v1 paths it turns the token into an Identity (`request[IDENTITY]`)
and installs itself as the request's authorizer: the core asks it, once it has the
container's info, whether the request may go on (owner, reseller admin, container ACLs).
Without an authorizer in the pipeline nothing is allowed.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from swiftlite.common.http import HTTPError, error
from swiftlite.proxy.acl import parse_acl, principal_allowed, referrer_allowed
from swiftlite.proxy.auth import Identity, TempAuth
from swiftlite.proxy.info import ContainerInfo
from swiftlite.proxy.pipeline import Middleware
from swiftlite.proxy.request import AUTHORIZER, IDENTITY, api_path, unauthorized

AUTH_PATHS = ("/auth/v1.0", "/auth/v1.0/", "/auth/v1", "/auth/v1/", "/v1.0", "/v1.0/")


class TempAuthMiddleware(Middleware):
    name = "tempauth"

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.auth = TempAuth(conf)
        proxy.auth = self.auth  # the token issuer other features (and tests) may share

    def info(self) -> dict[str, Any]:
        return {"account_acls": False}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.path in AUTH_PATHS:
            return self.handle_auth(request)
        path = api_path(request)
        if path is None:
            return await self.app(request)
        token = request.headers.get("X-Auth-Token") or request.headers.get("X-Storage-Token")
        ident = self.auth.validate(token)
        if token and ident is None:
            raise unauthorized(path.account, "Invalid or expired token")
        if not path.account.startswith(self.auth.reseller_prefix) and \
                not (ident and ident.is_reseller_admin):
            if ident:
                raise HTTPError(403, "Forbidden")
            raise unauthorized(path.account)
        request[IDENTITY] = ident
        request[AUTHORIZER] = self
        return await self.app(request)

    # ---- decisions the core asks for --------------------------------------------------------

    def is_owner(self, ident: Identity | None, account: str) -> bool:
        return ident is not None and (
            ident.is_reseller_admin or ident.is_admin_of(account, self.auth.reseller_prefix))

    def deny(self, ident: Identity | None, account: str) -> HTTPError:
        return HTTPError(403, "Forbidden") if ident else unauthorized(account)

    def authorize_container(self, request: web.Request, ident: Identity | None, account: str,
                            info: ContainerInfo, write: bool, listing: bool) -> None:
        """Raise unless a non-owner may read (or write) in a container with `info`."""
        if info.status == 404:
            raise self.deny(ident, account)
        if write:
            if principal_allowed(ident, parse_acl(info.write_acl).groups):
                return
            raise self.deny(ident, account)
        acl = parse_acl(info.read_acl)
        if principal_allowed(ident, acl.groups):
            return
        if referrer_allowed(request.headers.get("Referer"), acl.referrers) and \
                (not listing or acl.listings):
            return
        raise self.deny(ident, account)

    # ---- /auth/v1.0 ---------------------------------------------------------------------------

    def handle_auth(self, request: web.Request) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return error(405, "Method Not Allowed")
        user = request.headers.get("X-Auth-User") or request.headers.get("X-Storage-User")
        key = request.headers.get("X-Auth-Key") or request.headers.get("X-Storage-Pass")
        if not user or key is None:
            return unauthorized("unknown", "Missing X-Auth-User or X-Auth-Key").response()
        entry = self.auth.authenticate(user, key)
        if entry is None:
            return unauthorized(user.split(":", 1)[0], "Invalid credentials").response()
        token, life = self.auth.issue_token(entry)
        host_url = f"{request.scheme}://{request.host}"
        url = self.auth.storage_url(host_url, entry.account)
        headers = {"X-Storage-Url": url, "X-Auth-Token": token, "X-Storage-Token": token,
                   "X-Auth-Token-Expires": str(life)}
        body = json.dumps({"storage": {"default": "local", "local": url}})
        return web.Response(text=body, content_type="application/json", headers=headers)
