"""`console`: the web console's pipeline feature (pipeline name `console`, right after
gatekeeper and before s3api, so an anonymous `/console/` is never taken for an S3 bucket).

    GET  /console/                  the page; /console/<file>: its scripts, styles, icons
    POST /console/api/s3-login      {"access_key", "secret"} -> the key's user's own token
    GET  /console/api/session       who the X-Auth-Token is (the page's header, its tabs)
    GET  /console/api/cluster       the operator's report (reseller admins only)

The page talks to the public API (/auth/v1.0, /v1/...) with the user's token, which it keeps
in the tab's session storage and sends as a header, never in a URL and never as a cookie: a
page of another site cannot make the browser send it, so there is no cross-site request to
forge. The two POSTs here take JSON only (a cross-site form cannot send that without CORS
asking first) and refuse a foreign Origin. Every answer carries a strict
Content-Security-Policy (scripts, styles and connections to this origin only; images also as
blob: URLs, which is how thumbnails fetched with the token are shown) and may not be framed.

An S3-signed request whose bucket is named `console` is not ours: it goes on to s3api.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import mimetypes
import os
import re
from typing import Any

from aiohttp import web

from swiftlite.proxy.pipeline import PASS, Middleware

PREFIX = "/console"
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
_FILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
MAX_LOGIN_BODY = 4096
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
       "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
S3_QUERY_KEYS = ("X-Amz-Algorithm", "X-Amz-Signature", "AWSAccessKeyId", "Signature")
TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html",
         ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
         ".json": "application/json"}


class StaticFile:
    """A console file, read once: its bytes, type and a strong ETag."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self.body = f.read()
        ext = os.path.splitext(path)[1]
        self.content_type = TYPES.get(ext) or mimetypes.guess_type(path)[0] or \
            "application/octet-stream"
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'


def load_static(directory: str = STATIC_DIR) -> dict[str, StaticFile]:
    return {name: StaticFile(os.path.join(directory, name))
            for name in sorted(os.listdir(directory))
            if _FILE_NAME.match(name) and os.path.isfile(os.path.join(directory, name))}


def _json(status: int, doc: Any) -> web.Response:
    return web.Response(status=status, text=json.dumps(doc), content_type="application/json",
                        headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


def _refusal(status: int, reason: str) -> web.Response:
    return _json(status, {"error": reason})


def s3_signed(request: web.Request) -> bool:
    auth = request.headers.get("Authorization", "")
    return auth.startswith(("AWS4-HMAC-SHA256 ", "AWS ")) or \
        any(k in request.query for k in S3_QUERY_KEYS)


class Console(Middleware):
    name = "console"
    plain_reads = PASS  # it answers only /console paths, never an object read

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.files = load_static()
        self.report_timeout = conf.get_float("console_report_timeout", 3.0)
        self.report_ttl = conf.get_float("console_report_ttl", 2.0)
        # The last report asked of this worker, and when it was done (None: not yet): the
        # tabs polling it share one, so N operators do not ask every server N times.
        self._report: tuple[asyncio.Future, list[float | None]] | None = None
        self._creds: Any = None

    def info(self) -> dict[str, Any]:
        return {"path": PREFIX + "/"}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if not (path == PREFIX or path.startswith(PREFIX + "/")) or s3_signed(request):
            return await self.app(request)
        if path == PREFIX:
            raise web.HTTPMovedPermanently(PREFIX + "/")
        rest = path[len(PREFIX) + 1:]
        if rest.startswith("api/"):
            return await self._api(request, rest[4:])
        if request.method not in ("GET", "HEAD"):
            return _refusal(405, "the console's files are read-only")
        return self._file(request, rest or "index.html")

    # ---- static files ---------------------------------------------------------------------

    def _file(self, request: web.Request, name: str) -> web.Response:
        f = self.files.get(name)
        if f is None:
            return _refusal(404, "no such console file")
        headers = {**SECURITY_HEADERS, "ETag": f.etag, "Cache-Control": "no-cache"}
        if f.etag in request.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers=headers)
        return web.Response(body=f.body, headers=headers, content_type=f.content_type,
                            charset="utf-8" if f.content_type.startswith("text/") else None)

    # ---- the API ------------------------------------------------------------------------

    async def _api(self, request: web.Request, name: str) -> web.StreamResponse:
        if name == "s3-login":
            if request.method != "POST":
                return _refusal(405, "POST only")
            return await self._s3_login(request)
        if request.method not in ("GET", "HEAD"):
            return _refusal(405, "GET only")
        if name not in ("session", "cluster"):
            return _refusal(404, "no such console call")
        ident = self._identity(request)
        if ident is None:
            return _refusal(401, "sign in first")
        if name == "session":
            return _json(200, {"user": ident.user, "account": ident.account,
                               "reseller_admin": ident.is_reseller_admin,
                               "reseller_reader": ident.is_reseller_reader,
                               "expires": ident.expires})
        if not ident.is_reseller_admin:
            return _refusal(403, "the cluster's state is for reseller admins")
        return _json(200, await self._shared_report())

    async def _shared_report(self) -> dict[str, Any]:
        """The report in the making, or one made less than `report_ttl` seconds ago, else a
        new one. Shielded: a caller who leaves does not cancel it for the others."""
        from swiftlite.proxy.console.cluster import cluster_report

        loop = asyncio.get_running_loop()
        if self._report is not None:
            fut, done_at = self._report
            if not fut.done() or (not fut.cancelled() and fut.exception() is None
                                  and done_at[0] is not None
                                  and loop.time() - done_at[0] < self.report_ttl):
                return await asyncio.shield(fut)
        fut = asyncio.ensure_future(cluster_report(self.proxy, timeout=self.report_timeout))
        done_at: list[float | None] = [None]
        fut.add_done_callback(lambda f: done_at.__setitem__(0, loop.time()))
        self._report = (fut, done_at)
        return await asyncio.shield(fut)

    def _identity(self, request: web.Request):
        auth = self.proxy.auth
        if auth is None:
            return None
        return auth.validate(request.headers.get("X-Auth-Token"))

    def _same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None or origin == "null":
            return origin is None
        return origin.partition("://")[2].rstrip("/") == request.host

    async def _s3_login(self, request: web.Request) -> web.Response:
        """An S3 key pair (a tempauth user's `<account>:<user>` and password, or a pair an
        account admin made) for the token its user would get from /auth/v1.0: the same
        rights, no more. The secret travels as a password does to /auth/v1.0."""
        if not self._same_origin(request):
            return _refusal(403, "cross-origin sign-in refused")
        if request.content_type != "application/json":
            return _refusal(415, "send JSON")
        if (request.content_length or 0) > MAX_LOGIN_BODY:
            return _refusal(413, "body too large")
        raw = await request.content.read(MAX_LOGIN_BODY + 1)
        if len(raw) > MAX_LOGIN_BODY:
            return _refusal(413, "body too large")
        try:
            doc = json.loads(raw)
            key_id, secret = str(doc["access_key"]), str(doc["secret"])
        except (ValueError, KeyError, TypeError):
            return _refusal(400, "want {\"access_key\": ..., \"secret\": ...}")
        auth = self.proxy.auth
        if auth is None:
            return _refusal(501, "no authentication in this proxy's pipeline")
        if self._creds is None:
            from swiftlite.proxy.s3.credentials import Credentials  # only with S3 keys

            self._creds = Credentials(auth, self.proxy)
        found = await self._creds.lookup(key_id, request)
        if found is None or not hmac.compare_digest(found[0].encode(), secret.encode()):
            return _refusal(401, "unknown key or wrong secret")
        user = auth.users.get(found[1].user)
        if user is None:
            return _refusal(401, "unknown key or wrong secret")
        token, life = auth.issue_token(user)
        host_url = f"{request.scheme}://{request.host}"
        return _json(200, {"token": token, "expires_in": life,
                           "storage_url": auth.storage_url(host_url, user)})
