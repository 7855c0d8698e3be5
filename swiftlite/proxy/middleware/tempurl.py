"""TempURL: `?temp_url_sig=...&temp_url_expires=...` lets anyone holding the link make one
kind of request to one object (or to the objects under a signed prefix) until it expires.

The signature is an HMAC of "METHOD\\nEXPIRES\\nPATH" (with "ip=RANGE\\n" first when the link
is bound to addresses, and "prefix:/v1/a/c/PREFIX" as the path for prefix links) under one of
the account's or the container's temp-url keys. The keys come from the cached account and
container info, so a valid link costs no backend request beyond the object's own.

A valid link replaces whoever the request claims to be: tokens are dropped and the request
carries a `Grant` as its authorizer (tempauth leaves a preset authorizer in place, as Swift's
`swift.authorize_override`). The grant allows the signed method on the signed object only,
plus reads that features make for it within the key's scope (DLO/SLO segments: the account
for account keys, the container for container keys). Anything invalid is 401 before the
request goes on, so nothing is touched.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import hmac
import ipaddress
import time
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from swiftlite.common.http import HTTPError, error
from swiftlite.proxy.caches.info import ContainerInfo
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import AUTHORIZER, IDENTITY, INTERNAL, ApiPath, api_path, clone

DIGESTS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}
HEX_LENGTHS = {40: "sha1", 64: "sha256", 128: "sha512"}
DEPRECATED_DIGESTS = ("sha1",)
EXPIRES_ISO8601 = "%Y-%m-%dT%H:%M:%SZ"
# A HEAD may use a link signed for any of these (Swift's rule: you may look at what you may
# fetch or write).
HEAD_SIGNED_AS = ("HEAD", "GET", "PUT", "POST")
# Headers that would make a link reach beyond its object (another object's bytes, a manifest
# or symlink naming other objects): refused outright.
DISALLOWED_INCOMING = {"x-object-manifest": "X-Object-Manifest",
                       "x-symlink-target": "X-Symlink-Target",
                       "x-copy-from": "X-Copy-From"}
TOKEN_HEADERS = ("x-auth-token", "x-storage-token", "x-service-token")
ACCOUNT_KEYS = ("x-account-meta-temp-url-key", "x-account-meta-temp-url-key-2")
CONTAINER_KEYS = ("x-container-meta-temp-url-key", "x-container-meta-temp-url-key-2")


async def signing_keys(proxy: Any, request: web.Request,
                       path: ApiPath) -> list[tuple[str, bool]]:
    """The keys that may sign for PATH's container, each with whether it is the
    container's own (a container key grants that container only)."""
    account_info = await proxy.account_info(request, path.account)
    container_info = await proxy.container_info(request, path.account, path.container)
    keys = [(v, False) for k, v in account_info.meta.items()
            if k.lower() in ACCOUNT_KEYS and v]
    keys += [(v, True) for k, v in container_info.meta.items()
             if k.lower() in CONTAINER_KEYS and v]
    return keys


def invalid() -> HTTPError:
    return HTTPError(401, "401 Unauthorized: Temp URL invalid\n",
                     {"WWW-Authenticate": 'Swift realm="unknown"'})


def parse_expires(value: str) -> int | None:
    """Seconds since the epoch from an integer or `YYYY-MM-DDTHH:MM:SSZ`; None if neither."""
    if value.isascii() and value.isdigit():
        return int(value)
    try:
        return calendar.timegm(time.strptime(value, EXPIRES_ISO8601))
    except ValueError:
        return None


def parse_signature(sig: str, allowed: tuple[str, ...]) -> tuple[str, str] | None:
    """(digest name, lower-case hex) from hex or `<digest>:<base64>`; None if malformed or
    not allowed."""
    if ":" in sig:
        name, _, b64 = sig.partition(":")
        if name not in allowed:
            return None
        # Standard or URL-safe alphabet, padding optional.
        b64 = b64.replace("+", "-").replace("/", "_")
        b64 += "=" * (-len(b64) % 4)
        try:
            raw = base64.b64decode(b64.encode("ascii"), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return None
        return name, raw.hex()
    name = HEX_LENGTHS.get(len(sig))
    if name is None or name not in allowed:
        return None
    return name, sig


def hmac_hex(key: str, digest: str, method: str, expires: int, path: str,
             ip_range: str | None) -> str:
    body = f"{method}\n{expires}\n{path}"
    if ip_range is not None:
        body = f"ip={ip_range}\n{body}"
    return hmac.new(key.encode("utf-8"), body.encode("utf-8", "surrogateescape"),
                    DIGESTS[digest]).hexdigest()


def content_disposition(kind: str, filename: str) -> str:
    # Both forms, as Swift sends them: a quoted percent-escaped name for old clients and
    # the RFC 5987 one.
    return (f'{kind}; filename="{quote(filename, safe=" /")}"; '
            f"filename*=UTF-8''{quote(filename)}")


def _header_matcher(patterns: list[str]):
    exact = {p for p in patterns if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))

    def match(name: str) -> bool:
        low = name.lower()
        return low in exact or (bool(prefixes) and low.startswith(prefixes))
    return match


# The only query parameters a link's request keeps (as Swift's): the link's own and the
# download name. Any other (`version-id`, `multipart-manifest`, `symlink`, `part-number`...)
# would make the link reach something it was not signed for, so it is dropped, not refused.
KEPT_PARAMS = ("temp_url_sig", "temp_url_expires", "temp_url_prefix", "temp_url_ip_range",
               "filename", "inline")


def _kept_query(request: web.Request) -> URL:
    raw = request.rel_url.raw_query_string
    kept = "&".join(p for p in raw.split("&")
                    if p and unquote(p.partition("=")[0]) in KEPT_PARAMS)
    return URL.build(path=request.rel_url.raw_path, query_string=kept, encoded=True)


@dataclass(frozen=True)
class Grant:
    """The authorizer of a request made with a valid link (see the module docstring)."""

    account: str
    container: str
    obj: str  # the signed object, or the signed prefix
    is_prefix: bool
    methods: frozenset[str]
    container_scoped: bool  # signed with a container key: no reads outside it

    def is_owner(self, ident: Any, account: str) -> bool:
        return False

    def deny(self, ident: Any, account: str) -> HTTPError:
        return invalid()

    def authorize_account(self, request: web.Request, ident: Any, account: str,
                          container: str | None = None) -> None:
        raise invalid()  # a link never reaches an account or a container itself

    def authorize_container(self, request: web.Request, ident: Any, account: str,
                            info: ContainerInfo, write: bool, listing: bool = False) -> None:
        path = api_path(request)
        if path is None or path.account != self.account or (
                self.container_scoped and path.container != self.container):
            raise invalid()
        if not self.covers(path, request.method) and (
                write or request.method not in ("GET", "HEAD") or not request.get(INTERNAL)):
            raise invalid()
        if info.status == 404:
            raise HTTPError(404, "Not Found")

    def covers(self, path: ApiPath, method: str) -> bool:
        if path.container != self.container or path.obj is None or method not in self.methods:
            return False
        return path.obj.startswith(self.obj) if self.is_prefix else path.obj == self.obj


class TempUrl(Middleware):
    name = "tempurl"
    plain_reads = PASS  # acts on temp_url_sig/temp_url_expires: a plain read has no query

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.methods = [m.upper() for m in conf.get_str(
            "methods", "GET HEAD PUT POST DELETE").split()]
        self.incoming_remove = conf.get_str(
            "incoming_remove_headers", "x-timestamp x-open-expired").lower().split()
        self.incoming_allow = conf.get_str("incoming_allow_headers", "").lower().split()
        self.outgoing_remove = conf.get_str(
            "outgoing_remove_headers", "x-object-meta-*").lower().split()
        self.outgoing_allow = conf.get_str(
            "outgoing_allow_headers", "x-object-meta-public-*").lower().split()
        wanted = conf.get_str("allowed_digests", "sha1 sha256 sha512").lower().split()
        self.digests = tuple(d for d in DIGESTS if d in wanted)
        self._in_remove = _header_matcher(self.incoming_remove)
        self._in_allow = _header_matcher(self.incoming_allow)
        self._out_remove = _header_matcher(self.outgoing_remove)
        self._out_allow = _header_matcher(self.outgoing_allow)

    def info(self) -> dict[str, Any]:
        return {"methods": self.methods,
                "incoming_remove_headers": self.incoming_remove,
                "incoming_allow_headers": self.incoming_allow,
                "outgoing_remove_headers": self.outgoing_remove,
                "outgoing_allow_headers": self.outgoing_allow,
                "allowed_digests": list(self.digests),
                "deprecated_digests": [d for d in DEPRECATED_DIGESTS if d in self.digests]}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        sig = query.get("temp_url_sig")
        expires_arg = query.get("temp_url_expires")
        if (sig is None and expires_arg is None) or request.method == "OPTIONS" \
                or request.get(INTERNAL):
            return await self.app(request)
        try:
            grant, expires = await self.check(request, sig, expires_arg)
        except HTTPError as exc:
            return exc.response()
        for low, shown in DISALLOWED_INCOMING.items():
            if low in request.headers:
                return error(400, f"The header {shown!r} is not allowed in this tempurl")
        dropped = [k for k in request.headers
                   if k.lower() in TOKEN_HEADERS or (self._in_remove(k) and not self._in_allow(k))]
        kept = _kept_query(request)
        if dropped or kept.raw_query_string != request.rel_url.raw_query_string:
            headers = CIMultiDict(request.headers)
            for k in dropped:
                headers.popall(k, None)
            sub = clone(request, headers=headers, rel_url=kept)
        else:
            sub = request  # the usual link: nothing to strip, so no copy of the request
        sub[AUTHORIZER] = grant
        sub[IDENTITY] = None
        resp = await self.app(sub)
        for k in [k for k in resp.headers if self._out_remove(k) and not self._out_allow(k)]:
            del resp.headers[k]
        if request.method in ("GET", "HEAD") and 200 <= resp.status < 300:
            self.add_disposition(request, resp, grant)
            resp.headers["Expires"] = formatdate(expires, usegmt=True)
        return resp

    def add_disposition(self, request: web.Request, resp: web.StreamResponse,
                        grant: Grant) -> None:
        query = request.query
        filename = query.get("filename")
        inline = "inline" in query
        if filename:
            resp.headers["Content-Disposition"] = content_disposition(
                "inline" if inline else "attachment", filename)
        elif inline:
            resp.headers["Content-Disposition"] = "inline"
        elif "Content-Disposition" not in resp.headers:
            path = api_path(request)
            name = (path.obj if path and path.obj else "").rsplit("/", 1)[-1]
            resp.headers["Content-Disposition"] = content_disposition("attachment", name)

    async def check(self, request: web.Request, sig: str | None,
                    expires_arg: str | None) -> tuple[Grant, int]:
        """The grant of a valid link; raises 401 for anything else."""
        if not sig or not expires_arg:
            raise invalid()
        expires = parse_expires(expires_arg)
        if expires is None or expires < time.time():
            raise invalid()
        parsed = parse_signature(sig, self.digests)
        if parsed is None:
            raise invalid()
        digest, given = parsed
        method = request.method
        if method not in self.methods:
            raise invalid()
        try:
            path = api_path(request)
        except HTTPError:
            raise invalid() from None
        if path is None or path.container is None:
            raise invalid()
        prefix = request.query.get("temp_url_prefix")
        obj = path.obj
        if obj is None:
            # The container's own path, for a link signed for all of it (prefix ''): only
            # what staticweb makes of it (a redirect to the trailing slash, its listing or
            # index, read by sub-requests the grant judges); the core refuses the link a
            # container GET itself (the grant covers objects only).
            if prefix != "" or method not in ("GET", "HEAD"):
                raise invalid()
            obj = ""
        if prefix is not None:
            if not obj.startswith(prefix):
                raise invalid()
            signed_path = f"prefix:/{path.version}/{path.account}/{path.container}/{prefix}"
        else:
            signed_path = f"/{path.version}/{path.account}/{path.container}/{obj}"
        variant = request.query.get("image")
        if variant is not None:
            # An image variant (middleware/image_variants.py) is part of what is signed: a
            # link for the object cannot ask for variants, nor a variant's link for another.
            signed_path += f"?image={variant}"
        ip_range = request.query.get("temp_url_ip_range")
        if ip_range is not None and not self.address_in(request.remote, ip_range):
            raise invalid()
        tried = HEAD_SIGNED_AS if method == "HEAD" else (method,)
        for key, container_scoped in await signing_keys(self.proxy, request, path):
            for signed_as in tried:
                expected = hmac_hex(key, digest, signed_as, expires, signed_path, ip_range)
                if hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
                    # The grant allows the method the link was signed for, plus HEAD.
                    methods = frozenset((signed_as, "HEAD") if signed_as in HEAD_SIGNED_AS
                                        else (signed_as,))
                    return Grant(path.account, path.container,
                                 prefix if prefix is not None else obj,
                                 prefix is not None, methods, container_scoped), expires
        raise invalid()

    @staticmethod
    def address_in(remote: str | None, ip_range: str) -> bool:
        try:
            return remote is not None and \
                ipaddress.ip_address(remote) in ipaddress.ip_network(ip_range, strict=False)
        except ValueError:
            return False
