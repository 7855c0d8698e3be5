"""Object versioning (`X-Versions-Enabled`): every write of an object keeps its history.

A container PUT/POST with `X-Versions-Enabled: true` creates the hidden versions container
`\\x00versions\\x00<container>` (the reserved namespace, common/reserved.py: no client can
name it) and notes it in container sysmeta. From then on an object PUT stores the client's
body there as `\\x00<name>\\x00<inverted timestamp>` (newest first in listings), and the
user-visible name becomes a *version link*: a 0-byte object whose sysmeta names the version
and whose listing row shows the version's size, ETag and type. So an overwrite never copies
data, and each version keeps the timestamp it was written with: its version id.

- GET/HEAD of a link answer with the version it points to (`X-Object-Version-Id`);
  `?version-id=<id>` reads any version (`null`: the unversioned object, if any); a delete
  marker is a 404.
- DELETE writes a delete marker (a 0-byte version of type
  `application/x-deleted;swift_versions_deleted=1`) and removes the link;
  `DELETE ?version-id=<id>` removes that version only (and the link if it pointed there).
- `PUT ?version-id=<id>` with an empty body makes that version the current one (restore).
- POST updates the link and the version it points to (no new version); a feature's patch
  of mutable sysmeta (common/sysmeta.py) may name one version (`POST ?version-id=<id>`).
- A version under retention or a legal hold (common/sysmeta.py) cannot be deleted, through
  any API; a container marked SYSMETA_LOCKED (version_containers.py) cannot have versioning
  turned off.
- `GET <container>?versions` lists every version (JSON only, as Swift), with `version_id`,
  `is_latest` and the `version_marker` pagination parameter (version_listing.py).
- An object written while versioning was off is the `null` version; the next versioned
  write copies it into the versions container first.

This feature reads its links itself (the link's sysmeta names the version), so a client
never sees one. The link is also a symlink (symlink sysmeta naming the version, as Swift's
are): a client's symlink that leads to a versioned name reaches the link through the symlink
middleware (after this one), which takes it on to the version; it follows a target in the
reserved namespace only from the visible object it belongs to (common/reserved.py
`belongs_to`), after the read of that object was authorized as usual. A client's symlink
stored as a version is followed by that middleware too.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.config import TRUE_VALUES
from swiftlite.common.http import HTTPError
from swiftlite.common.reserved import RESERVED
from swiftlite.common.sysmeta import (
    BYPASS_GOVERNANCE,
    LISTING_BYTES,
    OVERRIDE_ETAG,
    is_patch,
    retention_refusal,
)
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.proxy.caches import link_cache
from swiftlite.proxy.middleware.version_containers import VersionedContainers
from swiftlite.proxy.middleware.version_names import (
    DELETE_MARKER,
    SYSMETA_CONT,
    SYSMETA_ENABLED,
    WAS_NULL,
    auth_headers,
    path_of,
    plain_text,
    version_object,
)
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import (
    ALLOW_RESERVED,
    TIMESTAMP,
    ApiPath,
    answer_of,
    api_path,
    clone,
    request_state,
    sub_request,
)
from swiftlite.proxy.response import BodyResponse, close_answer

# On a version link: the id of the version it points to (same account, same name).
LINK = "X-Object-Sysmeta-Versions-Link"
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"
NO_VERSIONS_CONT = ("The versions container does not exist. You may want to re-enable "
                    "object versioning.")
# Headers a version does not take from the client's PUT: expiry belongs to the link (an
# expired link hides the object; its versions stay).
EXPIRY = ("x-delete-at", "x-delete-after")
SYMLINK_TARGET = "X-Object-Sysmeta-Symlink-Target"


def _valid_version(version_id: str, allow_null: bool = True) -> None:
    if version_id == "null" and allow_null:
        return
    try:
        ts = Timestamp.parse(version_id)
    except TimestampError:
        raise HTTPError(400, "Invalid version parameter") from None
    if ts.offset:
        raise HTTPError(400, "Invalid version parameter")


def _meta(meta: dict[str, str], key: str) -> str | None:
    lk = key.lower()
    for k, v in meta.items():
        if k.lower() == lk:
            return v
    return None


def _versions_of(info: Any) -> str | None:
    """Where a container's versions are kept; None: it was never versioned."""
    raw = _meta(info.meta, SYSMETA_CONT) if info.status // 100 == 2 else None
    return unquote(raw) if raw else None


class ObjectVersioning(VersionedContainers, Middleware):
    name = "object_versioning"
    plain_reads = HOOKS

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        """A read in a container that was ever versioned is this feature's (its objects
        are links to their versions, or null versions). Not a question of access: the
        answer may be the one kept until the container is next written (container_facts)."""
        assert path.container is not None
        if path.container.startswith(RESERVED) and request_state(request).get(ALLOW_RESERVED):
            return request
        info = await self.proxy.container_facts(request, path.account, path.container)
        return None if info.derived(_versions_of) else request

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None or (request.get(ALLOW_RESERVED) and (
                path.container is None or path.container.startswith(RESERVED))):
            return await self.app(request)  # not the API, or this feature's own request
        # (A feature's write of a visible name, S3's completed upload, is versioned too.)
        if path.obj is not None:
            return await self.object_request(request, path)
        if path.container is not None:
            return await self.container_request(request, path)
        if request.method == "GET":
            return await self.account_listing(request, path)
        return await self.app(request)

    # ---- sub-requests ----------------------------------------------------------------------

    async def _send(self, request: web.Request, method: str, path: str,
                    headers: Any = None, body: Any = None, query: str = "",
                    ts: Timestamp | None = None, reserved: bool = True) -> web.StreamResponse:
        """A sub-request down the pipeline as the caller, allowed into the reserved
        namespace (the caller was authorized on the user-visible resource first)."""
        if headers is None:
            headers = auth_headers(request)
        sub = sub_request(request, method, path, headers, body, query)
        if reserved:
            sub[ALLOW_RESERVED] = True
        if ts is not None:
            sub[TIMESTAMP] = ts
        else:
            sub.pop(TIMESTAMP, None)
        return await answer_of(self.app, sub)

    async def _container_head(self, request: web.Request, path: ApiPath,
                              container: str) -> web.StreamResponse:
        return await self._send(request, "HEAD", path_of(path.version, path.account, container),
                                reserved=container.startswith(RESERVED))

    # ---- objects ---------------------------------------------------------------------------

    async def object_request(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        assert path.container is not None and path.obj is not None
        version_id = request.query.get("version-id")
        method = request.method
        if not version_id and method not in ("PUT", "POST", "DELETE", "GET", "HEAD"):
            return await self.app(request)
        info = await self.proxy.container_info(request, path.account, path.container)
        vcont = info.derived(_versions_of)
        enabled = (_meta(info.meta, SYSMETA_ENABLED) or "").lower() in TRUE_VALUES
        if version_id:
            if method == "POST" and not is_patch(request.headers):
                raise HTTPError(400, "POST to a specific version is not allowed")
            if not vcont and version_id != "null":
                raise HTTPError(400, "version-aware operations require that the container "
                                "is versioned")
            _valid_version(version_id)
            if method == "OPTIONS":
                return await self.app(request)
            await self._authorize(request, path, write=method in ("PUT", "DELETE"))
            if version_id != "null":
                # The versions container has no ACLs of its own: versions are the owner's.
                target = self.proxy.target(request, path.account, path.container, path.obj)
                if not target.is_owner:
                    raise self.proxy.deny(target)
            if method == "DELETE":
                return await self.delete_version(request, path, vcont, version_id)
            if method == "POST":
                return await self.patch_version(request, path, vcont, version_id)
            if method == "PUT":
                return await self.restore(request, path, vcont, version_id)
            if version_id == "null":
                return await self.read_null(request, path)
            return await self.read_version(request, path, vcont, version_id)
        if not vcont:
            return await self.app(request)
        if method in ("GET", "HEAD"):
            await self._authorize(request, path, write=False)
            return await self.read(request, path, vcont)
        await self._authorize(request, path, write=True)
        if method == "POST":
            return await self.post(request, path, vcont)
        if not enabled:
            return await self.app(request)
        if method == "PUT":
            return await self.put(request, path, vcont)
        return await self.delete(request, path, vcont)

    async def _authorize(self, request: web.Request, path: ApiPath, write: bool) -> None:
        """The caller's right on the user-visible container; the versions container is then
        reached on its behalf."""
        target = self.proxy.target(request, path.account, path.container, path.obj)
        await self.proxy.authorize_container(request, target, write=write)

    def _vpath(self, path: ApiPath, vcont: str, version_id: str) -> str:
        assert path.obj is not None
        return path_of(path.version, path.account, vcont, version_object(path.obj, version_id))

    async def _current(self, request: web.Request, path: ApiPath,
                       method: str = "HEAD", newest: bool = True) -> web.StreamResponse:
        """The visible object itself: the link (not its version), or the null version as
        stored (a client's symlink unfollowed). Writes ask every replica (X-Newest), so a
        stale one cannot make them lose a version; reads take one, as any object read."""
        headers = auth_headers(request)
        if newest:
            headers["X-Newest"] = "true"
        return await self._send(request, method, request.rel_url.raw_path, headers,
                                query="symlink=get", reserved=False)

    # -- reads

    async def read(self, request: web.Request, path: ApiPath,
                   vcont: str) -> web.StreamResponse:
        # The caller is judged above, as the link's read would judge it.
        here = (path.account, path.container or "", path.obj or "")
        link, fill = await link_cache.lookup(self.proxy, request, here)
        if link is None:
            head = await self._current(request, path, newest=False)
            close_answer(head)
            if head.status // 100 == 2:
                link = head.headers
                if LINK in link:
                    link_cache.keep(self.proxy, here, link, fill)
        vid = link.get(LINK) if link is not None else None
        if vid is None:
            resp = await self.app(request)
            if resp.status // 100 == 2 or resp.status in (304, 412, 416):
                resp.headers["X-Object-Version-Id"] = "null"
            return resp
        resp = await self._forward(request, self._vpath(path, vcont, vid))
        if "Content-Location" in resp.headers:
            # A client's symlink was followed: the answer is its target's (a versioned
            # target's link names the version the answer is).
            resp.headers["X-Object-Version-Id"] = resp.headers.get(LINK, vid)
            return resp
        resp.headers["X-Object-Version-Id"] = vid
        resp.headers["Content-Location"] = \
            request.rel_url.raw_path + f"?version-id={vid}"
        return resp

    async def _forward(self, request: web.Request, vpath: str) -> web.StreamResponse:
        """The client's own request (headers, conditions, ranges) to a version object."""
        from yarl import URL
        query = "&".join(p for p in request.rel_url.raw_query_string.split("&")
                         if p and not p.startswith("version-id="))
        sub = clone(request, rel_url=URL.build(path=vpath, query_string=query, encoded=True))
        sub[ALLOW_RESERVED] = True
        return await answer_of(self.app, sub)

    async def read_version(self, request: web.Request, path: ApiPath, vcont: str | None,
                           version_id: str) -> web.StreamResponse:
        assert vcont is not None
        resp = await self._forward(request, self._vpath(path, vcont, version_id))
        ctype = resp.headers.get("Content-Type", "")
        if ctype == DELETE_MARKER:
            close_answer(resp)
            return web.Response(status=404, headers={"X-Object-Version-Id": version_id,
                                                     "Content-Type": DELETE_MARKER})
        if resp.status // 100 == 2:
            resp.headers["X-Object-Version-Id"] = version_id
        return resp

    async def read_null(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        resp = await self.app(_without_version_id(request))
        if resp.status // 100 == 2:
            head = await self._current(request, path)
            close_answer(head)
            if head.status // 100 == 2 and LINK in head.headers:
                close_answer(resp)  # the current object has a real version id, not null
                return plain_text(404, "Not Found")
            resp.headers["X-Object-Version-Id"] = "null"
        return resp

    # -- writes

    async def _copy_current(self, request: web.Request, path: ApiPath, vcont: str) -> None:
        """An object written while versioning was off (the null version) is kept as a
        version before anything replaces it."""
        head = await self._current(request, path)
        close_answer(head)
        if head.status == 404 or (head.status // 100 == 2 and LINK in head.headers):
            return
        if head.status // 100 != 2:
            raise HTTPError(503, "Service Unavailable")
        src = await self._current(request, path, "GET")
        try:
            if src.status // 100 != 2:
                if src.status == 404:
                    return
                raise HTTPError(503, "Service Unavailable")
            ts = Timestamp.parse(src.headers.get("X-Timestamp", "0"))
            headers = CIMultiDict(auth_headers(request))
            for k, v in src.headers.items():
                lk = k.lower()
                if lk.startswith(("x-object-meta-", "x-object-sysmeta-")) or lk in (
                        "content-type", "content-encoding", "content-disposition", "etag",
                        "x-delete-at", "x-object-manifest", "cache-control",
                        "content-language", "expires"):
                    headers[k] = v
            # The version's listing row says it was the null version (`was_null`), so an
            # API that still calls it that (S3's versionId `null`) can find it.
            etag = headers.get(OVERRIDE_ETAG) or src.headers.get("ETag", "").strip('"')
            if etag and "was_null=" not in etag:
                headers[OVERRIDE_ETAG] = f"{etag}; {WAS_NULL}=1"
            length = src.content_length or 0
            headers["Content-Length"] = str(length)
            assert isinstance(src, BodyResponse)
            body: Any = await src.read() if length <= self.proxy.put_buffer_size \
                else src.chunks()
            put = await self._send(request, "PUT", self._vpath(path, vcont, ts.normal),
                                   headers, body, ts=ts)
            close_answer(put)
            _check(put)
        finally:
            close_answer(src)

    async def put(self, request: web.Request, path: ApiPath, vcont: str) -> web.StreamResponse:
        await self._copy_current(request, path, vcont)
        ts = self.proxy.next_timestamp()
        vid = ts.normal
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in EXPIRY)
        from yarl import URL
        sub = clone(request, rel_url=URL.build(path=self._vpath(path, vcont, vid),
                                               query_string="", encoded=True),
                    headers=headers)
        sub[ALLOW_RESERVED] = True
        sub[TIMESTAMP] = ts
        try:
            put = await self.app(sub)
        except HTTPError as exc:
            put = exc.response()
        close_answer(put)
        if put.status == 404:
            raise HTTPError(500, NO_VERSIONS_CONT)
        if put.status // 100 != 2:
            return put
        etag = headers.get(OVERRIDE_ETAG) or put.headers.get("ETag", "").strip('"')
        size = headers.get(LISTING_BYTES) or headers.get("Content-Length") or "0"
        ctype = headers.get("Content-Type") or ""
        if not ctype:
            # What the core guessed from the name; the version's own HEAD says it.
            vhead = await self._send(request, "HEAD", self._vpath(path, vcont, vid),
                                         query="symlink=get")
            close_answer(vhead)
            ctype = vhead.headers.get("Content-Type", "application/octet-stream")
            size = vhead.headers.get("Content-Length", size) if LISTING_BYTES not in headers \
                else size
        if request.headers.get("Transfer-Encoding", "").lower() == "chunked" and \
                LISTING_BYTES not in headers:
            vhead = await self._send(request, "HEAD", self._vpath(path, vcont, vid),
                                         query="symlink=get")
            close_answer(vhead)
            size = vhead.headers.get("Content-Length", size)
        # The link takes the version's own timestamp: a listing then shows the time a HEAD
        # does (a later one crossed a second boundary now and then), and concurrent PUTs'
        # links win in the order of their versions.
        resp = await self._put_link(request, path, vcont, vid, etag, size,
                                    ctype.split(";swift_bytes")[0], ts)
        if resp.status // 100 == 2:
            resp.headers["ETag"] = put.headers.get("ETag", etag)
            resp.headers["X-Object-Version-Id"] = vid
        return resp

    async def _put_link(self, request: web.Request, path: ApiPath, vcont: str, vid: str,
                        etag: str, size: str, ctype: str,
                        ts: Timestamp | None = None) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower().startswith("x-object-meta-")
                              or k.lower() in EXPIRY or k.lower() in (
                                  "x-auth-token", "x-storage-token", "x-service-token",
                                  "referer", "content-encoding", "content-disposition"))
        headers["Content-Type"] = ctype
        headers["Content-Length"] = "0"
        headers[LINK] = vid
        # Also a symlink to the version (as Swift's): a client's symlink that reaches this
        # name is taken on to the version by the symlink feature (see its _reserved_target).
        assert path.obj is not None
        headers[SYMLINK_TARGET] = quote(f"{vcont}/{version_object(path.obj, vid)}")
        # The listing shows the version's ETag (with its parameters: an SLO's slo_etag)
        # and names the version, which ?versions listings and mark_link
        # (version_containers.py) read back.
        headers[OVERRIDE_ETAG] = f"{etag}; ov_version_id={vid}"
        headers[LISTING_BYTES] = str(size)
        return await self._send(request, "PUT", request.rel_url.raw_path, headers, b"",
                                ts=ts, reserved=False)

    async def delete(self, request: web.Request, path: ApiPath,
                     vcont: str) -> web.StreamResponse:
        await self._copy_current(request, path, vcont)
        ts = self.proxy.next_timestamp()
        headers = CIMultiDict(auth_headers(request))
        headers["Content-Type"] = DELETE_MARKER
        headers["Content-Length"] = "0"
        marker = await self._send(request, "PUT", self._vpath(path, vcont, ts.normal),
                                  headers, b"", ts=ts)
        close_answer(marker)
        _check(marker)
        resp = await self.app(request)
        if resp.status // 100 == 2 or resp.status == 404:
            resp.headers["X-Object-Version-Id"] = ts.normal
        return resp

    async def post(self, request: web.Request, path: ApiPath,
                   vcont: str) -> web.StreamResponse:
        head = await self._current(request, path)
        close_answer(head)
        vid = head.headers.get(LINK) if head.status // 100 == 2 else None
        if vid is None:
            return await self.app(request)
        # The link keeps what a POST sets (expiry included: an expired link hides the
        # object); the version gets the new metadata, without the expiry.
        resp = await self.app(request)
        if resp.status // 100 != 2:
            return resp
        close_answer(resp)
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in EXPIRY)
        return await self._send(request, "POST", self._vpath(path, vcont, vid), headers)

    async def restore(self, request: web.Request, path: ApiPath, vcont: str | None,
                      version_id: str) -> web.StreamResponse:
        _valid_version(version_id, allow_null=False)
        assert vcont is not None
        if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            has_body = bool(await request.content.read(1))
        elif request.content_length is None:
            raise HTTPError(411, "Length Required")
        else:
            has_body = request.content_length != 0
        if has_body:
            return plain_text(400, "PUT version-id requests require a zero byte body")
        vhead = await self._send(request, "HEAD", self._vpath(path, vcont, version_id),
                                 query="symlink=get")
        close_answer(vhead)
        if vhead.status == 404:
            cinfo = await self._container_head(request, path, vcont)
            close_answer(cinfo)
            if cinfo.status // 100 == 2:
                return plain_text(404, "The specified version does not exist")
            return plain_text(500, NO_VERSIONS_CONT)
        _check(vhead)
        etag = vhead.headers.get(OVERRIDE_ETAG) or vhead.headers.get("ETag", "").strip('"')
        size = vhead.headers.get(LISTING_BYTES) or vhead.headers.get("Content-Length", "0")
        resp = await self._put_link(request, path, vcont, version_id, etag, size,
                                    vhead.headers.get("Content-Type", ""))
        if resp.status // 100 == 2:
            resp.headers["ETag"] = vhead.headers.get("ETag", etag)
            resp.headers["X-Object-Version-Id"] = version_id
        return resp

    async def patch_version(self, request: web.Request, path: ApiPath, vcont: str | None,
                            version_id: str) -> web.StreamResponse:
        """A POST of mutable sysmeta (common/sysmeta.py) to one version, which a client
        cannot send (a feature's: S3 tags, retention, legal holds)."""
        if version_id == "null":
            return await self.app(_without_version_id(request))
        assert vcont is not None
        vhead = await self._send(request, "HEAD", self._vpath(path, vcont, version_id),
                                 query="symlink=get")
        close_answer(vhead)
        if vhead.status // 100 != 2 or vhead.headers.get("Content-Type") == DELETE_MARKER:
            return plain_text(404, "The specified version does not exist")
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in EXPIRY)
        return await self._send(request, "POST", self._vpath(path, vcont, version_id),
                                headers)

    async def _retained(self, request: web.Request, path: ApiPath, vcont: str | None,
                        version_id: str) -> None:
        """Refuse (403) deleting a version under retention or a legal hold."""
        if version_id == "null":
            head = await self._current(request, path)
        else:
            assert vcont is not None
            head = await self._send(request, "HEAD", self._vpath(path, vcont, version_id),
                                    query="symlink=get")
        close_answer(head)
        if head.status // 100 != 2:
            return
        bypass = (request.headers.get(BYPASS_GOVERNANCE) or "").lower() in TRUE_VALUES
        refusal = retention_refusal(head.headers, bypass, time.time())
        if refusal is not None:
            raise HTTPError(403, refusal)

    async def delete_version(self, request: web.Request, path: ApiPath, vcont: str | None,
                             version_id: str) -> web.StreamResponse:
        await self._retained(request, path, vcont, version_id)
        if version_id == "null":
            return await self.app(_without_version_id(request))
        assert vcont is not None
        head = await self._current(request, path)
        close_answer(head)
        if head.status == 404:
            current = None
        else:
            _check(head)
            current = head.headers.get(LINK)
        if current == version_id:
            # The current version: the link goes first, then the data.
            link = await self.app(_without_version_id(request))
            close_answer(link)
            _check(link)
            current_after = "null"
        else:
            current_after = current or "null"
        resp = await self._send(request, "DELETE", self._vpath(path, vcont, version_id),
                                auth_headers(request))
        resp.headers["X-Object-Version-Id"] = version_id
        resp.headers["X-Object-Current-Version-Id"] = current_after
        return resp


# ---- helpers ---------------------------------------------------------------------------------

def _check(resp: web.StreamResponse) -> None:
    """A sub-request's failure as the client's answer (Swift's mapping)."""
    if resp.status // 100 == 2:
        return
    if resp.status == 404:
        raise HTTPError(412, "Precondition Failed")
    if resp.status // 100 == 4:
        raise HTTPError(resp.status, getattr(resp, "text", "") or "")
    raise HTTPError(503, "Service Unavailable")


def _without_version_id(request: web.Request) -> web.Request:
    from yarl import URL
    query = "&".join(p for p in request.rel_url.raw_query_string.split("&")
                     if p and not p.startswith("version-id="))
    sub = clone(request, rel_url=URL.build(path=request.rel_url.raw_path, query_string=query,
                                           encoded=True))
    return sub
