"""Symlinks: an object PUT with `X-Symlink-Target: <container>/<object>` (and optionally
`X-Symlink-Target-Account`) is a link; GET/HEAD of it answer with the target's object.

A link is a 0-byte object whose target is kept as object sysmeta, so it costs nothing beyond
one small object: a GET asks the object servers for the object as usual (with Range ignored
when the symlink sysmeta is present) and, when the answer carries the link's sysmeta (even a
304/412 judged on the link itself), sends the same request to the target as the caller, so
the target's ACLs and conditions apply. At most `symloop_max` links are followed, then 409.
Every answer through a link names the target in `Content-Location`.

`X-Symlink-Target-Etag` makes a static link: the PUT checks (HEAD as the caller) that the
target's ETag is that one (409 otherwise) and records its size; a GET whose target no longer
has it answers 409. A static link to a link compares that link's own ETag (a dynamic link's
is the empty body's, a static link's is its target's), as Swift does.

`?symlink=get` reads the link itself (with `X-Symlink-Target*` headers). A POST to a link
updates the link's metadata and answers 307 to the target; POST cannot set a target. The
container listing shows `symlink_path` (and `symlink_etag`, `symlink_bytes` for static links)
through the object server's listing override (an ETag with parameters).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common import constraints
from swiftlite.common.http import HTTPError
from swiftlite.common.reserved import belongs_to, is_reserved
from swiftlite.common.runtime.aiohttp_seams import request_state
from swiftlite.common.sysmeta import OVERRIDE_ETAG
from swiftlite.proxy.caches import link_cache
from swiftlite.proxy.caches.info import Fill
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import (
    ALLOW_RESERVED,
    BACKEND_GET_HEADERS,
    ApiPath,
    answer_of,
    api_path,
    caller_headers,
    send_sub,
    sub_request,
)
from swiftlite.proxy.response import close_answer

TARGET = "X-Object-Sysmeta-Symlink-Target"
# Request key: where a plain read's link would be kept (place, fill), from admit_plain.
_LINK_FILL = "swiftlite.symlink.link_fill"
TARGET_ACCOUNT = "X-Object-Sysmeta-Symlink-Target-Account"
TARGET_ETAG = "X-Object-Sysmeta-Symlink-Target-Etag"
TARGET_BYTES = "X-Object-Sysmeta-Symlink-Target-Bytes"
SLO_ETAG = "X-Object-Sysmeta-Slo-Etag"
SLO_SIZE = "X-Object-Sysmeta-Slo-Size"
# Sysmeta -> the header a `?symlink=get` answer shows it as.
SHOWN = ((TARGET, "X-Symlink-Target"), (TARGET_ACCOUNT, "X-Symlink-Target-Account"),
         (TARGET_ETAG, "X-Symlink-Target-Etag"), (TARGET_BYTES, "X-Symlink-Target-Bytes"))
CLIENT_HEADERS = ("x-symlink-target", "x-symlink-target-account", "x-symlink-target-etag",
                  "x-symlink-target-bytes")
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"
BAD_FORM = "X-Symlink-Target header must be of the form <container name>/<object name>"
POST_BODY = ("The requested POST was applied to a symlink. POST directly to the target to "
             "apply requested metadata.")
# Request headers a PUT's target check carries (who the caller is, referrer ACLs).


def _text(status: int, body: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body.encode("utf-8", "backslashreplace"),
                        headers={"Content-Type": "text/plain", **(headers or {})})


def _target(value: str) -> tuple[str, str]:
    """'container/object' (percent-encoded or not) to its parts; Swift's 412 otherwise
    (%-escapes that are not UTF-8 included: kept as surrogates, the name checks refuse them)."""
    ref = unquote(value, errors="surrogateescape")
    if ref.startswith("/"):
        ref = ref[1:]
    cont, _, name = ref.partition("/")
    if not cont or not name:
        raise HTTPError(412, BAD_FORM)
    for check, v in ((constraints.check_container, cont), (constraints.check_object, name)):
        if check(v):
            raise HTTPError(412, BAD_FORM)
    return cont, name


def _normal_etag(value: str) -> str:
    value = value.strip()
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] == '"' else value


def _effective_etag(headers: Any) -> tuple[str, int]:
    """The ETag and size a static link to this object (as the core answers it) records: a
    static link's target's, an SLO manifest's own ETag with the SLO's size, else its own."""
    if TARGET_ETAG in headers:
        return headers[TARGET_ETAG], int(headers.get(TARGET_BYTES, "0"))
    if TARGET in headers:
        return _normal_etag(headers.get("ETag", EMPTY_MD5)), 0
    size = headers.get(SLO_SIZE) if SLO_ETAG in headers else None
    if size is None:
        size = headers.get("Content-Length", "0")
    return _normal_etag(headers.get("ETag", "")), int(size)


# Where a link is: (account, container, object), unquoted.
Place = link_cache.Place


def _link_target(headers: Any, here: Place) -> Place:
    cont, _, name = unquote(headers[TARGET]).partition("/")
    account = unquote(headers[TARGET_ACCOUNT]) if TARGET_ACCOUNT in headers else here[0]
    return account, cont, name


def _reserved_target(headers: Any, here: Place) -> Place | None:
    """The target of a feature's link into the reserved namespace (object versioning's
    visible object), if it may be followed from `here`: same account, and the reserved object
    belongs to this very container and name. No client can write such a link (a PUT's
    target is checked, sysmeta is the gatekeeper's), and the caller was authorized on `here`
    by the read that found the link, so the hop is made as the feature (ALLOW_RESERVED)."""
    if TARGET not in headers or TARGET_ACCOUNT in headers:
        return None
    target = _link_target(headers, here)
    if not is_reserved(target[1]) or not belongs_to(target[1], target[2], here[1], here[2]):
        return None
    return target


def _is_reserved_link(headers: Any) -> bool:
    return TARGET in headers and is_reserved(unquote(headers[TARGET]))


def _obj_path(version: str, place: Place) -> str:
    return "/" + "/".join((version, *(quote(p, safe="") for p in place)))


class Symlink(Middleware):
    name = "symlink"
    plain_reads = HOOKS

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.symloop_max = max(conf.get_int("symloop_max", 2), 1)

    def info(self) -> dict[str, Any]:
        return {"symloop_max": self.symloop_max, "static_links": True}

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        # A link the link cache knows is followed from there (__call__), not read again.
        here: Place = (path.account, path.container or "", path.obj or "")
        cached, fill = await link_cache.lookup(self.proxy, request, here)
        if cached is not None:
            return None
        request_state(request)[_LINK_FILL] = (here, fill)
        return request

    def accept_plain(self, request: web.Request, path: ApiPath,
                     resp: web.StreamResponse) -> bool:
        if TARGET not in resp.headers:
            return True
        # A link: __call__ follows it, and finds it in the link cache instead of reading it
        # a second time.
        self._remember(request[_LINK_FILL][0], resp, request[_LINK_FILL][1])
        return False

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None or path.obj is None:
            return await self.app(request)
        method = request.method
        if method == "PUT" and "X-Symlink-Target" in request.headers:
            return await self.put(request, path)
        if method in ("GET", "HEAD"):
            if request.query.get("symlink") == "get":
                return self._show(await self.app(request))
            return await self.get(request, path)
        if method == "POST":
            if "X-Symlink-Target" in request.headers:
                return _text(400, "A PUT request is required to set a symlink target")
            return await self.post(request, path)
        return await self.app(request)

    @staticmethod
    def _show(resp: web.StreamResponse) -> web.StreamResponse:
        if _is_reserved_link(resp.headers):
            return resp  # a feature's own link, not a client's symlink
        for meta, header in SHOWN:
            if meta in resp.headers:
                resp.headers[header] = resp.headers[meta]
        return resp

    async def _call(self, sub: web.Request) -> web.StreamResponse:
        return await answer_of(self.app, sub)

    async def _resolve(self, request: web.Request, version: str, here: Place,
                       resp: web.StreamResponse, method: str, headers: Any,
                       query: str) -> tuple[web.StreamResponse, Place]:
        """One hop through a feature's link into the reserved namespace (not a client's
        symlink: it does not count toward symloop_max); anything else is left as it is."""
        target = _reserved_target(resp.headers, here)
        if target is None:
            return resp, here
        close_answer(resp)
        sub = sub_request(request, method, _obj_path(version, target), headers, query=query)
        sub[ALLOW_RESERVED] = True
        link = resp.headers
        resp = await self._call(sub)
        # The feature's own sysmeta on its link (not the symlink's) stays on the answer, so
        # the feature above sees which of its links was taken (object versioning: the
        # version id). The gatekeeper keeps sysmeta from clients.
        for k, v in link.items():
            lk = k.lower()
            if lk.startswith("x-object-sysmeta-") and k not in resp.headers and \
                    not lk.startswith(("x-object-sysmeta-symlink-",
                                       "x-object-sysmeta-container-update-")):
                resp.headers[k] = v
        return resp, target

    # ---- PUT ---------------------------------------------------------------------------------

    async def put(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        h = request.headers
        if request.content_length != 0 or "Transfer-Encoding" in h:
            return _text(400, "Symlink requests require a zero byte body")
        try:
            cont, obj = _target(h["X-Symlink-Target"])
        except HTTPError as exc:
            return _text(exc.status, exc.reason)
        account = path.account
        if "X-Symlink-Target-Account" in h:
            account = unquote(h["X-Symlink-Target-Account"], errors="surrogateescape")
            if constraints.check_account(account):
                return _text(412, "Account name cannot contain slashes")
        if (account, cont, obj) == (path.account, path.container, path.obj):
            return _text(400, "Symlink cannot target itself")
        headers = CIMultiDict((k, v) for k, v in h.items() if k.lower() not in CLIENT_HEADERS)
        quoted = quote(f"{cont}/{obj}")
        headers[TARGET] = quoted
        if "X-Symlink-Target-Account" in h:
            headers[TARGET_ACCOUNT] = quote(account)
        link_path = f"/v1/{quote(account)}/{quoted}"
        override = f"{EMPTY_MD5}; symlink_path={link_path}"
        if "X-Symlink-Target-Etag" in h:
            given = _normal_etag(h["X-Symlink-Target-Etag"])
            location = {"Content-Location": link_path}
            head = await send_sub(self.app, request, "HEAD",
                                  f"/{path.version}/{quote(account)}/{quoted}",
                                  query="symlink=get")
            head, _ = await self._resolve(
                request, path.version, (account, cont, obj), head, "HEAD",
                caller_headers(request), "symlink=get")
            close_answer(head)
            if head.status == 404:
                return _text(409, "X-Symlink-Target does not exist", location)
            if head.status // 100 != 2:
                head.headers["Content-Location"] = link_path
                return head
            etag, size = _effective_etag(head.headers)
            if etag != given:
                return _text(409, f"Object Etag {etag!r} does not match "
                                  f"X-Symlink-Target-Etag header {given!r}", location)
            headers[TARGET_ETAG] = etag
            headers[TARGET_BYTES] = str(size)
            override += f"; symlink_etag={etag}; symlink_bytes={size}"
            if SLO_ETAG in head.headers:  # Swift lists a link to an SLO with its slo_etag
                override += f'; slo_etag="{head.headers[SLO_ETAG]}"'
            if "Content-Type" not in h and "Content-Type" in head.headers:
                headers["Content-Type"] = head.headers["Content-Type"]
        elif "Content-Type" not in h:
            headers["Content-Type"] = "application/symlink"
        headers[OVERRIDE_ETAG] = override
        headers["Content-Length"] = "0"
        return await self.app(sub_request(request, "PUT", request.rel_url.raw_path, headers,
                                          query=request.rel_url.raw_query_string))

    # ---- GET / HEAD ----------------------------------------------------------------------------

    async def _read_link(self, request: web.Request,
                         here: Place) -> web.StreamResponse:
        """The object at `here` as the core answers it; for a link the proxy's link cache
        knows, an empty answer with the link's headers, once the caller is judged as a read
        of the link would judge it."""
        cached, fill = await link_cache.lookup(self.proxy, request, here)
        if cached is not None:
            await self.proxy.authorize_read(request, self.proxy.target(request, *here))
            return web.Response(status=200, headers=cached)
        extra = dict(request.get(BACKEND_GET_HEADERS) or {})
        ignore = extra.get("X-Backend-Ignore-Range-If-Metadata-Present")
        # A link's 0 bytes must not turn a Range into a 416 before the target is read.
        extra["X-Backend-Ignore-Range-If-Metadata-Present"] = \
            f"{ignore},{TARGET}" if ignore else TARGET
        request[BACKEND_GET_HEADERS] = extra
        resp = await self.app(request)
        self._remember(here, resp, fill)
        return resp

    def _remember(self, here: Place, resp: web.StreamResponse, fill: Fill | None) -> None:
        # A feature's link is kept only if it is one this path may follow (else the answer
        # is the link as stored, which an entry could not rebuild).
        if resp.status == 200 and TARGET in resp.headers and \
                (not _is_reserved_link(resp.headers) or
                 _reserved_target(resp.headers, here) is not None):
            link_cache.keep(self.proxy, here, resp.headers, fill)

    async def get(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        here: Place = (path.account, path.container or "", path.obj or "")
        resp = await self._read_link(request, here)
        if TARGET not in resp.headers:
            return resp
        query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}"
                         for k, v in request.query.items() if k != "symlink")
        resp, here = await self._resolve(request, path.version, here, resp, request.method,
                                         request.headers, query)
        hops = 0
        while TARGET in resp.headers and not _is_reserved_link(resp.headers):
            if hops >= self.symloop_max:
                close_answer(resp)
                body = "" if request.method == "HEAD" else \
                    ("Too many levels of symbolic links, maximum allowed is "
                     f"{self.symloop_max}")
                return _text(409, body)
            hops += 1
            link = resp.headers
            close_answer(resp)
            here = _link_target(link, here)
            location = f"/v1/{quote(here[0])}/{link[TARGET]}"
            sub = sub_request(request, request.method, _obj_path(path.version, here),
                              request.headers, query=query)
            sub.pop(ALLOW_RESERVED, None)  # a client's link: judged as the caller
            resp = await self._call(sub)
            resp, here = await self._resolve(request, path.version, here, resp,
                                             request.method, request.headers, query)
            static = link.get(TARGET_ETAG)
            got = _effective_etag(resp.headers)[0] if "ETag" in resp.headers else static
            if static is not None and resp.status != 404 and got != static:
                close_answer(resp)
                resp = _text(409, "" if request.method == "HEAD" else
                             f"Object Etag {got!r} does not match X-Symlink-Target-Etag "
                             f"header {static!r}")
            resp.headers["Content-Location"] = location
            if resp.status == 409:
                break
        return resp

    # ---- POST ----------------------------------------------------------------------------------

    async def post(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        resp = await self.app(request)
        if resp.status != 202:
            return resp
        # Is it a link? The object servers answered the POST; its metadata says.
        head = await send_sub(self.app, request, "HEAD", request.rel_url.raw_path,
                              query="symlink=get")
        close_answer(head)
        if TARGET not in head.headers or _is_reserved_link(head.headers):
            return resp
        close_answer(resp)
        account = unquote(head.headers.get(TARGET_ACCOUNT, quote(path.account)))
        headers = {"Location": f"/{path.version}/{quote(account)}/{head.headers[TARGET]}"}
        if TARGET_ETAG in head.headers:
            headers["X-Symlink-Target-Etag"] = head.headers[TARGET_ETAG]
        return web.Response(status=307, body=POST_BODY.encode(),
                            headers={"Content-Type": "text/html; charset=UTF-8", **headers})
