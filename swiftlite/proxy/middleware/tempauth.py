"""Tempauth: `/auth/v1.0` tokens, who a request is, and what it may touch (Swift's rules).

Runs before the core. On /v1 paths it turns the token (plus a valid X-Service-Token's groups)
into an Identity (`request[IDENTITY]`) and installs itself as the request's authorizer: the
core asks `is_owner` for every request, then `authorize_account` (account requests, container
writes) or `authorize_container` (container reads, objects) for non-owners. Without an
authorizer in the pipeline nothing is allowed.

Account ACLs (X-Account-Access-Control) are validated here for every request (400 with
Swift's body), kept as account sysmeta, looked up for authenticated non-owners (the account
info the core caches), and shown only to owners. As Swift's proxy does for `swift_owner`,
owner-only headers (container ACLs, sync keys, temp-url keys, the account ACL) are dropped
from a non-owner's request and from the answer it gets.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common import constraints
from swiftlite.common.http import HTTPError, error, header_names_pattern
from swiftlite.proxy.acl import (
    account_acl_error,
    account_acl_level,
    format_account_acl,
    parse_account_acl,
    parse_acl,
    principal_allowed,
    referrer_allowed,
)
from swiftlite.proxy.auth import Identity, TempAuth
from swiftlite.proxy.caches.info import ContainerInfo
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import (
    AUTHENTICATED,
    AUTHORIZER,
    IDENTITY,
    ApiPath,
    api_path,
    clone,
    request_state,
    unauthorized,
)

AUTH_PATHS = ("/auth/v1.0", "/auth/v1.0/", "/auth/v1", "/auth/v1/", "/v1.0", "/v1.0/")
ACL_HEADER = "X-Account-Access-Control"
ACL_SYSMETA = "X-Account-Sysmeta-Core-Access-Control"
# Swift's default `swift_owner_headers`.
OWNER_HEADERS = ("x-container-read", "x-container-write", "x-container-sync-key",
                 "x-container-sync-to", "x-account-meta-temp-url-key",
                 "x-account-meta-temp-url-key-2", "x-container-meta-temp-url-key",
                 "x-container-meta-temp-url-key-2", "x-account-access-control")
READS = ("GET", "HEAD")


def _acl_invalid(reason: str, value: str) -> web.Response:
    body = f"X-Account-Access-Control invalid: {reason}\n\nInput: {value}\n"
    return web.Response(status=400, body=body.encode("utf-8", "surrogateescape"),
                        content_type="text/plain", charset="UTF-8")


class TempAuthMiddleware(Middleware):
    name = "tempauth"
    plain_reads = HOOKS
    plain_refused_by = (ACL_HEADER,)  # nothing for a read to set, but its checks are __call__'s

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.auth = TempAuth(conf)
        proxy.auth = self.auth  # the token issuer other features (and tests) may share
        self.owner_headers = tuple(h.strip().lower() for h in conf.get_list(
            "swift_owner_headers", ", ".join(OWNER_HEADERS)))
        # The same, looked for in all of an answer's names at once (one per line): most
        # answers to a non-owner have none, and are passed by one search.
        self._any_owner_header = header_names_pattern(self.owner_headers)

    def info(self) -> dict[str, Any]:
        return {"account_acls": True}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.path in AUTH_PATHS:
            return self.handle_auth(request)
        path = api_path(request)
        if path is None:
            return await self.app(request)
        judged = await self._judge(request, path)
        if isinstance(judged, web.Response):
            return judged
        request, owner = judged
        resp = await self.app(request)
        self._strip_answer(resp, owner, path)
        return resp

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        judged = await self._judge(request, path)
        return judged[0] if judged.__class__ is tuple else None  # (else an ACL's 400)

    def accept_plain(self, request: web.Request, path: ApiPath,
                     resp: web.StreamResponse) -> bool:
        owner = self.auth.is_owner(request_state(request).get(IDENTITY), path.account)
        if not owner:  # (an owner's object answer shows all it has)
            self._strip_answer(resp, owner, path)
        return True

    async def _judge(self, request: web.Request,
                     path: ApiPath) -> tuple[web.Request, bool] | web.Response:
        """Who is asking (request[IDENTITY], with this as request[AUTHORIZER]) and whether
        they own the account; the request the core gets; or the answer to a bad ACL."""
        account = path.account
        state = request_state(request)
        preset = state.get(AUTHORIZER)
        if preset is not None and preset is not self:
            # A feature before us (tempurl, formpost) authorized this request by a signature
            # and decides alone, as Swift's swift.authorize_override: no token counts.
            ident = None
        else:
            preset = None
            ident = self.identify(request, account, state)
        if self.auth.account_prefix(account) is None:
            raise self.deny(ident, account)  # not ours to serve, reseller admin or not
        acl_value = request.headers.get(ACL_HEADER)
        if acl_value is not None:
            # Swift's HTTP server refuses a header line of max_header_size bytes or more
            # before tempauth sees it: an ACL that long is never stored.
            if len(ACL_HEADER) + len(acl_value) + 4 >= constraints.MAX_HEADER_SIZE:
                raise HTTPError(400, "Header Line Too Long")
            reason = account_acl_error(acl_value)
            if reason:
                return _acl_invalid(reason, acl_value)
        owner = self.auth.is_owner(ident, account)
        if not owner and ident is not None and account not in ident.acl_grants:
            ident = await self.grant_for(request, ident, account)
            owner = self.auth.is_owner(ident, account)
        if not owner or acl_value is not None:
            request = self.owner_request(request, owner, acl_value)
            state = request_state(request)  # a clone's, when headers were dropped
        state[IDENTITY] = ident
        state[AUTHORIZER] = preset or self
        return request, owner

    def _strip_answer(self, resp: web.StreamResponse, owner: bool, path: ApiPath) -> None:
        """An owner sees the account ACL; nobody else sees owner-only headers."""
        if owner:
            if path.container is None:  # the account's own answer
                shown = format_account_acl(resp.headers.get(ACL_SYSMETA))
                if shown:
                    resp.headers[ACL_HEADER] = shown
        else:
            headers = resp.headers
            if self._any_owner_header.search("\n".join(headers)) is not None:
                for k in [k for k in headers if k.lower() in self.owner_headers]:
                    del headers[k]

    def identify(self, request: web.Request, account: str,
                 state: dict[str, Any] | None = None) -> Identity | None:
        """The X-Auth-Token's identity plus the X-Service-Token's groups; a token of ours
        that does not validate is 401, any other token is no token (as Swift's tempauth).
        A front end that checked the caller's own signature (S3) names the identity.
        `state`: the request's keys (request_state), when the caller has them at hand."""
        given = (request_state(request) if state is None else state).get(AUTHENTICATED)
        if given is not None:
            return given
        headers = request.headers
        token = headers.get("X-Auth-Token") or headers.get("X-Storage-Token")
        if not self.auth.is_ours(token):
            return None
        ident = self.auth.validate(token)
        if ident is None:
            raise unauthorized(account, "Invalid or expired token")
        service_token = headers.get("X-Service-Token")
        service = self.auth.validate(service_token) if service_token else None
        return ident.with_service(service) if service else ident

    async def grant_for(self, request: web.Request, ident: Identity,
                        account: str) -> Identity:
        """`ident` with what the ACL of `account` grants it. Asked for the request's own
        account here, and by the core for a feature's sub-request into another account (a
        copy's source or destination there), which is judged on that account's ACL too."""
        if account in ident.acl_grants or self.auth.is_owner(ident, account):
            return ident
        level = await self.account_acl_level(request, ident, account)
        return ident.with_grant(account, level) if level else ident

    async def account_acl_level(self, request: web.Request, ident: Identity,
                                account: str) -> str | None:
        info = await self.proxy.account_info(request, account)
        stored = next((v for k, v in info.meta.items() if k.lower() == ACL_SYSMETA.lower()),
                      None)
        return account_acl_level(parse_account_acl(stored), ident.groups)

    def owner_request(self, request: web.Request, owner: bool,
                      acl_value: str | None) -> web.Request:
        """An owner's account ACL goes to the core as sysmeta (which only features may send);
        a non-owner's owner-only headers go nowhere."""
        if owner and acl_value is None:
            return request
        drop = ("x-account-access-control",) if owner else self.owner_headers
        if not any(k.lower() in drop for k in request.headers):
            return request
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in drop)
        if owner and acl_value is not None:
            headers[ACL_SYSMETA] = acl_value
        return clone(request, headers=headers)

    # ---- decisions the core asks for --------------------------------------------------------

    def is_owner(self, ident: Identity | None, account: str) -> bool:
        return self.auth.is_owner(ident, account)

    def deny(self, ident: Identity | None, account: str) -> HTTPError:
        return HTTPError(403, "Forbidden") if ident else unauthorized(account)

    def authorize_account(self, request: web.Request, ident: Identity | None, account: str,
                          container: str | None = None) -> None:
        """Raise unless a non-owner may make this account request, or this container PUT,
        POST or DELETE (`container` given): a reseller reader or the account ACL."""
        method = request.method
        if method == "OPTIONS":
            return
        if ident is not None:
            if method in READS and ident.is_reseller_reader and \
                    self.auth.reseller_may_touch(account):
                return
            level = ident.acl_grants.get(account)
            # read-write writes containers and objects, but only reads the account itself.
            if level == "read-write" and (container is not None or method in READS):
                return
            if level == "read-only" and method in READS:
                return
        raise self.deny(ident, account)

    def authorize_container(self, request: web.Request, ident: Identity | None, account: str,
                            info: ContainerInfo, write: bool, listing: bool) -> None:
        """Raise unless a non-owner may read (or write) in a container with `info`: a
        reseller reader (reads), the container's ACLs, or the account ACL."""
        if ident is not None and self.account_acl_allows(ident, account, write):
            if write and info.status == 404:
                raise HTTPError(404, "Container not found")
            return
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

    def account_acl_allows(self, ident: Identity, account: str, write: bool) -> bool:
        if not write and ident.is_reseller_reader and self.auth.reseller_may_touch(account):
            return True
        level = ident.acl_grants.get(account)
        return level == "read-write" or (level == "read-only" and not write)

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
        url = self.auth.storage_url(host_url, entry)
        headers = {"X-Storage-Url": url, "X-Auth-Token": token, "X-Storage-Token": token,
                   "X-Auth-Token-Expires": str(life)}
        body = json.dumps({"storage": {"default": "local", "local": url}})
        return web.Response(text=body, content_type="application/json", headers=headers)
