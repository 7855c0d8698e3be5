"""CORS: browser preflights (`OPTIONS`) and the CORS headers of actual responses.

A container opts in with `X-Container-Meta-Access-Control-Allow-Origin` (space-separated
origins, or `*`), `-Max-Age` and `-Expose-Headers` (space-separated); the operator may allow
origins for every container with `cors_allow_origin` and expose more headers with
`cors_expose_headers` (comma-separated). As in Swift:

- `OPTIONS` is answered here, never by the core, and needs no token (a preflight carries
  none). Without `Origin`, or on an account, it is a plain 200 with `Allow`. With `Origin`,
  an allowed origin and an allowed `Access-Control-Request-Method` get 200 and the preflight
  headers; anything else (an unknown container included) is 401. `/info` has no container:
  its preflight is allowed by `cors_allow_origin` alone.
- A container or object request with `Origin` gets `Access-Control-Allow-Origin` and
  `-Expose-Headers` on whatever it is answered, errors included; with `strict_cors_mode`
  (the default) only when the origin is allowed.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.common.http import HTTPError, add_vary, csv_items
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import api_path, unauthorized

ALLOWED = ("DELETE", "GET", "POST", "PUT", "OPTIONS", "HEAD")
INFO_METHODS = ("GET", "HEAD", "OPTIONS")
# Simple response headers (per the CORS spec) plus the ones every Swift answer carries.
ALWAYS_EXPOSED = ("cache-control", "content-language", "content-type", "expires",
                  "last-modified", "pragma", "etag", "x-timestamp", "x-trans-id",
                  "x-openstack-request-id")
META = "x-container-meta-access-control-"


class Cors(Middleware):
    name = "cors"
    plain_reads = HOOKS
    plain_refused_by = ("Origin",)  # as __call__: no Origin, no CORS

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.strict = conf.get_bool("strict_cors_mode", True)
        self.allow_origin = set(csv_items(conf.get_str("cors_allow_origin", "")))
        self.expose = [h.lower() for h in csv_items(conf.get_str("cors_expose_headers", ""))]

    def info(self) -> None:
        return None  # Swift advertises strict_cors_mode under "swift", not a cors entry

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None:
            if request.path == "/info" and "Origin" in request.headers:
                return await self._info(request, request.headers["Origin"])
            return await self.app(request)
        if request.method == "OPTIONS":
            return await self.options(request, path)
        origin = request.headers.get("Origin")
        if not origin or path.container is None:
            return await self.app(request)
        try:
            resp = await self.app(request)
        except HTTPError as exc:
            resp = exc.response()  # a 401/404 is decorated too: the page can read it
        cors = await self._container_cors(request, path.account, path.container)
        self._decorate(resp, origin, cors)
        return resp

    async def _container_cors(self, request: web.Request, account: str,
                              container: str) -> dict[str, str]:
        """allow-origin, max-age and expose-headers of the container ({} if it is unknown)."""
        info = await self.proxy.container_info(request, account, container)
        if info.status // 100 != 2:
            return {}
        return {k.lower()[len(META):]: v for k, v in info.meta.items()
                if k.lower().startswith(META)}

    def _origin_allowed(self, cors: dict[str, str], origin: str) -> bool:
        allowed = set(cors.get("allow-origin", "").split()) | self.allow_origin
        return origin in allowed or "*" in allowed

    def _allow_origin(self, headers, cors: dict[str, str], origin: str) -> None:
        if cors.get("allow-origin", "").strip() == "*":
            headers["Access-Control-Allow-Origin"] = "*"
        else:
            headers["Access-Control-Allow-Origin"] = origin
            add_vary(headers, "Origin")

    def _decorate(self, resp: web.StreamResponse, origin: str, cors: dict[str, str]) -> None:
        if self.strict and not self._origin_allowed(cors, origin):
            return
        h = resp.headers
        if "Access-Control-Expose-Headers" not in h:
            exposed = dict.fromkeys(ALWAYS_EXPOSED)
            exposed.update(dict.fromkeys(self.expose))
            exposed.update(dict.fromkeys(k.lower() for k in h if k.lower().startswith(
                ("x-container-meta-", "x-object-meta-"))))
            exposed.update(dict.fromkeys(x.lower() for x in cors.get("expose-headers",
                                                                    "").split()))
            h["Access-Control-Expose-Headers"] = ", ".join(exposed)
        if "Access-Control-Allow-Origin" not in h:
            self._allow_origin(h, cors, origin)

    async def _info(self, request: web.Request, origin: str) -> web.StreamResponse:
        """/info for a page of another origin: only the operator's `cors_allow_origin`
        speaks for it (no container does), and it is read without a token."""
        if request.method != "OPTIONS":
            resp = await self.app(request)
            self._decorate(resp, origin, {})
            return resp
        if not self._origin_allowed({}, origin) or \
                request.headers.get("Access-Control-Request-Method") not in INFO_METHODS:
            raise HTTPError(401, "Unauthorized", {"Allow": ", ".join(INFO_METHODS)})
        headers = {"Allow": ", ".join(INFO_METHODS),
                   "Access-Control-Allow-Methods": ", ".join(INFO_METHODS)}
        self._allow_origin(headers, {}, origin)
        return web.Response(status=200, headers=headers)

    # ---- preflight ----------------------------------------------------------------------

    def _allowed_methods(self, is_object: bool) -> list[str]:
        methods = list(ALLOWED)
        # Swift's copy feature adds COPY to what an object allows.
        if is_object and any(mw.name == "copy" for mw in self.proxy.middleware):
            methods.append("COPY")
        return methods

    async def options(self, request: web.Request, path) -> web.StreamResponse:
        token = request.headers.get("X-Auth-Token") or request.headers.get("X-Storage-Token")
        auth = self.proxy.auth
        if token and auth is not None and auth.validate(token) is None:
            raise unauthorized(path.account, "Invalid or expired token")
        methods = self._allowed_methods(path.obj is not None)
        origin = request.headers.get("Origin")
        if not origin or path.container is None:
            # Not a preflight, or one for the account: CORS is per container.
            return web.Response(status=200, headers={"Allow": ", ".join(methods)})
        cors = await self._container_cors(request, path.account, path.container)
        if not self._origin_allowed(cors, origin) or \
                request.headers.get("Access-Control-Request-Method") not in methods:
            raise HTTPError(401, "Unauthorized", {"Allow": ", ".join(ALLOWED)})
        headers: dict[str, str] = {"Allow": ", ".join(methods)}
        self._allow_origin(headers, cors, origin)
        if cors.get("max-age") is not None:
            headers["Access-Control-Max-Age"] = cors["max-age"]
        headers["Access-Control-Allow-Methods"] = ", ".join(methods)
        # Every header the page asks for is allowed (the spec leaves this open).
        asked = dict.fromkeys(csv_items(request.headers.get("Access-Control-Request-Headers",
                                                            "")))
        if asked:
            headers["Access-Control-Allow-Headers"] = ", ".join(asked)
            add_vary(headers, "Access-Control-Request-Headers")
        return web.Response(status=200, headers=headers)
