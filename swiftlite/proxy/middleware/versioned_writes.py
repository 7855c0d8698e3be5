"""Legacy versioned writes: `X-Versions-Location` (stack mode) and `X-History-Location`
(history mode) on a container keep the older versions of its objects in another container
of the same account (the archive).

- Either header on a container PUT/POST names the archive (as sent, URL-encoded; no '/'
  once decoded: 412) and is kept as container sysmeta with its mode; GET/HEAD show it back
  under the header of its mode. Both at once is 400; an empty value or
  `X-Remove-Versions-Location` / `X-Remove-History-Location` turns versioning off. Setting one
  replaces the other. (Swift 2.38.3 ignores the old `X-Versions-Mode`, so do we.)
- An object PUT (a COPY or `X-Copy-From` arrives here as a PUT) over an existing object
  first copies that object to `<archive>/<len><name>/<timestamp>`, `len` being the name's
  UTF-8 length as 3 hex digits and `timestamp` the old object's own. A large object's
  manifest (SLO or DLO) and a symlink are copied as themselves, never their data: this feature
  sits below `slo`/`dlo` and asks with `multipart-manifest=get&symlink=get`. POST makes no
  version.
- A DELETE in history mode archives the current object, writes a 0-byte delete marker
  (`application/x-deleted;swift_versions_deleted=1`) named by the time of the delete, then
  deletes (404 if there was nothing). In stack mode it restores the newest archived version
  over the object and deletes that version; a newest delete marker (left by history mode) is
  deleted instead, restoring the version before it when the object is absent.

As in Swift, the caller must be allowed to write the versioned container (checked before any
backend request); the archive's own ACLs do not matter: what this feature does there it does
with its own authority (sub-requests as owner). A missing archive makes a versioned PUT or a
history-mode DELETE fail with 412 rather than lose the old data.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import HTTPError
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import (
    AUTHORIZER,
    IDENTITY,
    ApiPath,
    api_path,
    clone,
    send_sub,
)
from swiftlite.proxy.response import BodyResponse, bytes_response, close_answer

LOCATION_SYSMETA = "X-Container-Sysmeta-Versions-Location"
MODE_SYSMETA = "X-Container-Sysmeta-Versions-Mode"
STACK, HISTORY = "stack", "history"
# Client header per mode (what is set, and what GET/HEAD show).
MODE_HEADERS = {STACK: "X-Versions-Location", HISTORY: "X-History-Location"}
REMOVE_HEADERS = ("X-Remove-Versions-Location", "X-Remove-History-Location")
DELETE_MARKER = "application/x-deleted;swift_versions_deleted=1"
# Stored headers of an object that its archived copy (or its restore) keeps.
# (Not the ETag: a feature below may show another one; the object servers check the body.)
KEPT = ("content-type", "content-encoding", "content-disposition", "x-delete-at",
        "x-object-manifest")
KEPT_PREFIXES = ("x-object-meta-", "x-object-sysmeta-")
# How a stored object is read to be copied: the manifest or link itself, the newest replica.
RAW_QUERY = "multipart-manifest=get&symlink=get"
LISTING_PAGE = 10000


class _Trusted:
    """The authorizer of this feature's own sub-requests: it already checked the caller, and
    the archive is written with the feature's authority, as Swift's pre-authed requests."""

    def is_owner(self, ident: Any, account: str) -> bool:
        return True

    def authorize_account(self, *args: Any) -> None:
        return None

    def authorize_container(self, *args: Any) -> None:
        return None


TRUSTED = _Trusted()


def version_prefix(name: str) -> str:
    return f"{len(name.encode('utf-8')):03x}{name}/"


def _object_path(version: str, account: str, container: str, name: str) -> str:
    return "/" + "/".join((version, quote(account), quote(container), quote(name)))


def _check_answer(resp: web.StreamResponse) -> None:
    """Stop the client's request when a step of versioning failed: a missing archive is 412,
    another client error is passed on, anything else is 503 (never lose the old data)."""
    if resp.status // 100 == 2:
        return
    close_answer(resp)
    if resp.status == 404:
        raise HTTPError(412, "Precondition Failed")
    if 400 <= resp.status < 500:
        raise HTTPError(resp.status, getattr(resp, "reason", "") or "Error")
    raise HTTPError(503, "Service Unavailable")


class VersionedWrites(Middleware):
    name = "versioned_writes"
    plain_reads = PASS  # acts on container requests and object PUT/DELETE only

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        # On by default in swiftlite (Swift's sample config has it off): being in the
        # pipeline is the operator's choice; false refuses new locations with 412.
        self.enabled = conf.get_bool("allow_versioned_writes", True)

    def info(self) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        return {"allowed_flags": [h.lower() for h in MODE_HEADERS.values()]}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None or path.container is None:
            return await self.app(request)
        if path.obj is None:
            return await self.container_request(request)
        if request.method not in ("PUT", "DELETE") or not self.enabled:
            return await self.app(request)
        info = await self.proxy.container_info(request, path.account, path.container)
        meta = {k.lower(): v for k, v in info.meta.items()} if info.status // 100 == 2 else {}
        location = unquote(meta.get(LOCATION_SYSMETA.lower(), ""))
        if not location:
            return await self.app(request)
        mode = HISTORY if meta.get(MODE_SYSMETA.lower()) == HISTORY else STACK
        if request.method == "PUT":
            await self.authorize(request, path, info)
            await self.archive_current(request, path, location)
            return await self.app(request)
        if mode == HISTORY:
            await self.authorize(request, path, info)
            await self.archive_current(request, path, location)
            await self.put_delete_marker(request, path, location)
            return await self.app(request)
        return await self.pop_version(request, path, location, info)

    # ---- containers ---------------------------------------------------------------------

    async def container_request(self, request: web.Request) -> web.StreamResponse:
        if request.method in ("PUT", "POST"):
            request = self.location_headers(request)
        resp = await self.app(request)
        if request.method in ("GET", "HEAD") and resp.status // 100 == 2:
            location = resp.headers.get(LOCATION_SYSMETA)
            if location:
                mode = resp.headers.get(MODE_SYSMETA)
                resp.headers[MODE_HEADERS[HISTORY if mode == HISTORY else STACK]] = location
        return resp

    def location_headers(self, request: web.Request) -> web.Request:
        """A container PUT/POST's versioning headers turned into sysmeta (or 400/412)."""
        h = request.headers
        if not any(k in h for k in (*MODE_HEADERS.values(), *REMOVE_HEADERS)):
            return request
        # An empty header is a removal, so only two non-empty locations conflict.
        given = [(mode, h[hdr]) for mode, hdr in MODE_HEADERS.items() if h.get(hdr)]
        if len(given) > 1:
            raise HTTPError(400, "Only one of x-versions-location or x-history-location "
                                 "may be specified")
        headers = CIMultiDict((k, v) for k, v in h.items()
                              if k.lower() not in {x.lower() for x in
                                                   (*MODE_HEADERS.values(), *REMOVE_HEADERS)})
        mode, value = given[0] if given else (STACK, "")
        if value:
            if not self.enabled:
                raise HTTPError(412, "Versioned Writes is disabled")
            # Checked as sent, as Swift does: an encoded "%2F" is let through (and names
            # a container that cannot exist).
            if "/" in value:
                raise HTTPError(412, "Container name cannot contain slashes")
            headers[LOCATION_SYSMETA] = value
            headers[MODE_SYSMETA] = mode
        else:
            # An empty value deletes a container's metadata item.
            headers[LOCATION_SYSMETA] = ""
            headers[MODE_SYSMETA] = ""
        return clone(request, headers=headers)

    # ---- objects ------------------------------------------------------------------------

    async def authorize(self, request: web.Request, path: ApiPath, info) -> None:
        """The caller must be allowed to write the versioned container (Swift checks this
        before versioning touches anything)."""
        authorizer = request.get(AUTHORIZER)
        ident = request.get(IDENTITY)
        if authorizer is None:
            raise HTTPError(401, "Unauthorized")
        if authorizer.is_owner(ident, path.account):
            return
        authorizer.authorize_container(request, ident, path.account, info, True, False)

    async def _send(self, request: web.Request, method: str, path: str,
                    headers: CIMultiDict[str] | None = None, body: Any = None,
                    query: str = "") -> web.StreamResponse:
        return await send_sub(self.app, request, method, path, headers or CIMultiDict(), body,
                              query, state={AUTHORIZER: TRUSTED})

    async def _read_raw(self, request: web.Request, path: str) -> web.StreamResponse:
        resp = await self._send(request, "GET", path, CIMultiDict({"X-Newest": "true"}),
                                query=RAW_QUERY)
        if resp.status // 100 == 2 and isinstance(resp, web.Response):
            # A feature below answered from memory: copy that body like any other.
            body = resp.body or b""
            if not isinstance(body, bytes):
                raise HTTPError(503, "Service Unavailable")  # never archive a wrong body
            return bytes_response(resp.status, resp.headers, body)
        return resp

    async def _copy(self, request: web.Request, source: BodyResponse,
                    dest: str) -> web.StreamResponse:
        """PUT `source` (a raw read) at `dest` with its stored headers."""
        headers: CIMultiDict[str] = CIMultiDict()
        for k, v in source.headers.items():
            lk = k.lower()
            if lk in KEPT or lk.startswith(KEPT_PREFIXES):
                headers[k] = v
        length = source.content_length or 0
        headers["Content-Length"] = str(length)
        body: bytes | AsyncIterator[bytes] = await source.read() \
            if length <= self.proxy.put_buffer_size else source.chunks()
        return await self._send(request, "PUT", dest, headers, body)

    async def archive_current(self, request: web.Request, path: ApiPath,
                              location: str) -> None:
        """Copy the current object (if any) into the archive, named by its own time."""
        current = await self._read_raw(request, request.rel_url.raw_path)
        if current.status == 404:
            close_answer(current)
            return
        if not isinstance(current, BodyResponse) or current.status // 100 != 2:
            _check_answer(current)
            return
        try:
            ts = Timestamp.parse(current.headers.get("X-Timestamp", "")).internal
        except TimestampError:
            ts = Timestamp.now().internal
        dest = _object_path(path.version, path.account, location,
                            version_prefix(path.obj or "") + ts)
        try:
            put = await self._copy(request, current, dest)
        finally:
            current.close()
        _check_answer(put)
        close_answer(put)

    async def put_delete_marker(self, request: web.Request, path: ApiPath,
                                location: str) -> None:
        dest = _object_path(path.version, path.account, location,
                            version_prefix(path.obj or "") + Timestamp.now().internal)
        headers = CIMultiDict({"Content-Type": DELETE_MARKER, "Content-Length": "0"})
        resp = await self._send(request, "PUT", dest, headers, b"")
        _check_answer(resp)
        close_answer(resp)

    async def _listing(self, request: web.Request, path: ApiPath,
                       location: str) -> AsyncIterator[dict]:
        """The archived versions of the object, newest first (none if no archive)."""
        prefix = version_prefix(path.obj or "")
        marker = ""
        cont_path = "/" + "/".join((path.version, quote(path.account), quote(location)))
        while True:
            query = f"format=json&reverse=on&limit={LISTING_PAGE}" \
                    f"&prefix={quote(prefix, safe='')}"
            if marker:
                query += f"&marker={quote(marker, safe='')}"
            resp = await self._send(request, "GET", cont_path, query=query)
            if resp.status == 404:
                close_answer(resp)
                return
            if resp.status // 100 != 2:
                _check_answer(resp)
            body = await resp.read() if isinstance(resp, BodyResponse) else \
                getattr(resp, "body", None) or b""
            page = json.loads(body) if resp.status == 200 and body else []
            for item in page:
                yield item
            if len(page) < LISTING_PAGE:
                return
            marker = page[-1]["name"]

    async def _restore(self, request: web.Request, path: ApiPath, version_path: str) -> bool:
        """Copy an archived version over the object; False if it is gone meanwhile."""
        source = await self._read_raw(request, version_path)
        if source.status == 404:
            close_answer(source)
            return False
        if not isinstance(source, BodyResponse) or source.status // 100 != 2:
            _check_answer(source)
            return False
        try:
            put = await self._copy(request, source, request.rel_url.raw_path)
        finally:
            source.close()
        _check_answer(put)
        close_answer(put)
        return True

    async def _delete(self, request: web.Request, target: str) -> web.StreamResponse:
        """The client's DELETE, sent to an archived item instead of the object."""
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() in ("x-trans-id-extra",))
        return await self._send(request, "DELETE", target, headers)

    async def pop_version(self, request: web.Request, path: ApiPath, location: str,
                          info) -> web.StreamResponse:
        """Stack mode's DELETE: bring the newest archived version back."""
        def archived(name: str) -> str:
            return _object_path(path.version, path.account, location, name)

        authorized = False
        versions = self._listing(request, path, location)
        async for item in versions:
            if not authorized:
                await self.authorize(request, path, info)
                authorized = True
            if item.get("content_type") == DELETE_MARKER:
                head = await self._send(request, "HEAD", request.rel_url.raw_path,
                                        CIMultiDict({"X-Newest": "true"}),
                                        query="symlink=get")
                close_answer(head)
                if head.status != 404:
                    _check_answer(head)
                    break  # the object is back since the delete: delete it as such
                # Nothing current: the version under the marker comes back (if any).
                async for older in versions:
                    if older.get("content_type") == DELETE_MARKER:
                        break
                    if not await self._restore(request, path, archived(older["name"])):
                        continue
                    gone = await self._delete(request, archived(older["name"]))
                    close_answer(gone)
                    if gone.status != 404:
                        _check_answer(gone)
                    break
                return await self._delete(request, archived(item["name"]))
            if not await self._restore(request, path, archived(item["name"])):
                continue
            return await self._delete(request, archived(item["name"]))
        return await self.app(request)
