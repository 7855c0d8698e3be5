"""Dynamic large objects: a manifest with `X-Object-Manifest: <container>/<prefix>` reads as
every object of `container` whose name starts with `prefix`, in name order, concatenated.

The manifest itself is an ordinary object (usually empty) PUT with that header; this feature
only checks the header's form on PUT. A GET/HEAD of a manifest lists the segments with a
container GET sub-request, then (GET) streams each segment from its own GET sub-request, one
after another: memory stays at a chunk or so whatever the size. Sub-requests go as the caller
(so the segment container's ACLs, referrers included, apply to the listing and the segments).
As in Swift:

- Content-Length is the segments' total and the ETag is the quoted MD5 of their ETags, when
  the listing fits one page (CONTAINER_LISTING_LIMIT); a longer one streams without either.
- One Range is served across segments (206); several ranges are ignored (200, whole body).
  If-Match/If-None-Match/If-(Un)Modified-Since are judged on the DLO's ETag and Last-Modified.
- A first segment that cannot be read is 409; a later one cuts the body short. A listing the
  caller may not read (or of a missing container) answers with the listing's status.
- `?multipart-manifest=get` returns the manifest itself.
- After `rate_limit_after_segment` segments, at most `rate_limit_segments_per_sec` segments a
  second are fetched; no GET goes on longer than `max_get_time` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.constraints import CONTAINER_LISTING_LIMIT
from swiftlite.common.http import SWIFT_CONFLICT, HTTPError, error
from swiftlite.common.ranges import CONDITIONS, check_conditions, parse_range
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import api_path, caller_headers, send_sub, sub_request
from swiftlite.proxy.response import BodyCutShort, BodyResponse, after_first_chunk, close_answer

BAD_MANIFEST = "X-Object-Manifest must be in the format container/prefix"
# Request headers a segment or listing sub-request carries (auth and referrer ACLs).
DROPPED = ("content-length", "content-range", "etag", "transfer-encoding")


def valid_manifest(value: str) -> bool:
    """Swift's check of the header as sent (still quoted): `container/prefix`, both non-empty,
    no query characters, and the prefix not starting with '/'."""
    cont, sep, prefix = value.partition("/")
    return bool(sep and cont and prefix) and "?" not in value and "&" not in value \
        and not prefix.startswith("/")


def _last_modified(headers) -> int:
    """Whole seconds of the manifest's X-Timestamp (what Last-Modified shows), rounded up."""
    try:
        ticks = Timestamp.parse(headers.get("X-Timestamp", "")).ticks
    except TimestampError:
        return 0
    return -(-ticks // 100000)


class Dlo(Middleware):
    name = "dlo"
    plain_reads = HOOKS
    # A manifest's answer. (A 416 judged on its own body, which __call__ also looks at,
    # needs a Range: never a plain read's.)
    plain_answer_marks = ("X-Object-Manifest",)
    replays_declined = True  # a manifest, declined, is not fetched a second time

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.max_get_time = conf.get_int("max_get_time", 86400)
        self.rate_limit_after_segment = conf.get_int("rate_limit_after_segment", 10)
        self.rate_limit_segments_per_sec = conf.get_int("rate_limit_segments_per_sec", 1)

    def info(self) -> None:
        return None  # Swift's DLO advertises nothing in /info: clients expect it always on

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None or path.obj is None:
            return await self.app(request)
        if request.method == "PUT" and "X-Object-Manifest" in request.headers:
            if not valid_manifest(request.headers["X-Object-Manifest"]):
                raise HTTPError(400, BAD_MANIFEST)
            return await self.app(request)
        if request.method not in ("GET", "HEAD") or \
                request.query.get("multipart-manifest") == "get":
            return await self.app(request)
        resp = await self.app(request)
        if _not_a_manifest(resp):
            return resp
        value = resp.headers.get("X-Object-Manifest")
        if value is None or resp.status // 100 != 2:
            # A 304/412/416 judged on the manifest's own body, or without its headers: look
            # again without Range and conditions.
            plain = await self._head(request, path)
            value = plain.headers.get("X-Object-Manifest")
            if value is None or plain.status // 100 != 2:
                close_answer(plain)
                return resp
            close_answer(resp)
            resp = plain
        close_answer(resp)
        cont, _, prefix = unquote(value).partition("/")
        return await self.respond(request, path, resp.headers, cont, prefix)

    async def _head(self, request: web.Request, path) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k not in CONDITIONS and k.lower() != "range")
        sub = sub_request(request, "HEAD", request.rel_url.raw_path, headers)
        return await self.app(sub)

    # ---- listing -----------------------------------------------------------------------------

    async def _listing(self, request: web.Request, version: str, account: str, cont: str,
                       prefix: str, marker: str = "") -> list[dict] | web.StreamResponse:
        """One page of segments, or the listing's error answer."""
        query = f"format=json&prefix={quote(prefix, safe='')}"
        if marker:
            query += f"&marker={quote(marker, safe='')}"
        resp = await send_sub(self.app, request, "GET",
                              f"/{version}/{quote(account)}/{quote(cont)}", query=query)
        if resp.status // 100 != 2:
            if request.method == "HEAD":
                return web.Response(status=resp.status, headers={
                    k: v for k, v in resp.headers.items() if k.lower() != "content-length"})
            return resp
        if isinstance(resp, BodyResponse):
            body = await resp.read()
        else:
            body = getattr(resp, "body", None) or b""
        return json.loads(body) if resp.status == 200 and body else []

    # ---- the answer --------------------------------------------------------------------------

    async def respond(self, request: web.Request, path, manifest_headers, cont: str,
                      prefix: str) -> web.StreamResponse:
        segments = await self._listing(request, path.version, path.account, cont, prefix)
        if not isinstance(segments, list):
            return segments
        complete = len(segments) < CONTAINER_LISTING_LIMIT
        headers = CIMultiDict((k, v) for k, v in manifest_headers.items()
                              if k.lower() not in DROPPED)
        total = sum(int(s["bytes"]) for s in segments)
        etag = None
        if complete:
            md5 = hashlib.md5(usedforsecurity=False)
            for s in segments:
                md5.update(s["hash"].strip('"').encode())
            etag = md5.hexdigest()
            headers["ETag"] = f'"{etag}"'
        cond = check_conditions(request.headers, etag, _last_modified(headers)) \
            if etag is not None else None
        if cond is not None:
            headers.pop("Content-Type", None)
            return web.Response(status=cond, headers=headers)
        first, last = 0, None  # bytes to send, last exclusive (None: to the end)
        status = 200
        spans = self._range(request.headers.get("Range"), total, complete)
        if spans == []:
            return error(416, "Requested Range Not Satisfiable",
                         {"Accept-Ranges": "bytes", "Content-Range": f"bytes */{total}"})
        if spans is not None:
            first, last = spans[0]
            status = 206
            headers["Content-Range"] = f"bytes {first}-{last - 1}/{total}"
        length = (last if last is not None else total) - first if complete or last else None
        if request.method == "HEAD":
            return BodyResponse(status, headers, None, length)
        body = self._body(request, path, cont, prefix, segments, first, last)
        try:
            return await after_first_chunk(status, headers, body, length)
        except BodyCutShort:
            return error(409, SWIFT_CONFLICT)  # the first segment could not be read

    def _range(self, header: str | None, total: int,
               complete: bool) -> list[tuple[int, int]] | None:
        spans = parse_range(header, total)
        if spans is None or len([p for p in header.split("=", 1)[1].split(",")
                                 if p.strip()]) != 1:
            return None  # no Range, a bad one, or several: the whole object, as Swift
        if complete:
            return spans
        # Only part of the listing is known: a range within it can be served.
        start, _, end = header.split("=", 1)[1].strip().partition("-")
        if start.strip() and end.strip() and int(end) < total:
            return spans
        return None

    async def _pages(self, request: web.Request, path, cont: str, prefix: str,
                     first_page: list[dict]) -> AsyncIterator[dict]:
        page = first_page
        while True:
            for seg in page:
                yield seg
            if len(page) < CONTAINER_LISTING_LIMIT:
                return
            page = await self._listing(request, path.version, path.account, cont, prefix,
                                       page[-1]["name"])
            if not isinstance(page, list):
                close_answer(page)
                raise BodyCutShort(f"segment listing failed: {page.status}")

    async def _body(self, request: web.Request, path, cont: str, prefix: str,
                    segments: list[dict], first: int, last: int | None
                    ) -> AsyncIterator[bytes]:
        """The wanted bytes of every segment, in order; BodyCutShort when one fails."""
        deadline = time.monotonic() + self.max_get_time
        offset = 0  # of the current segment within the whole object
        fetched = 0
        next_start = 0.0
        async for seg in self._pages(request, path, cont, prefix, segments):
            size = int(seg["bytes"])
            start, end = max(first - offset, 0), size
            if last is not None:
                end = min(size, last - offset)
            offset += size
            if end <= start:
                if last is not None and offset >= last:
                    return
                continue
            if fetched >= self.rate_limit_after_segment and self.rate_limit_segments_per_sec:
                # Swift's pacing of long manifests (one client cannot hammer the cluster).
                wait = next_start - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                next_start = time.monotonic() + 1 / self.rate_limit_segments_per_sec
            fetched += 1
            async for chunk in self._segment(request, path, cont, seg["name"], start, end,
                                             size, deadline):
                yield chunk

    async def _segment(self, request: web.Request, path, cont: str, name: str, start: int,
                       end: int, size: int, deadline: float) -> AsyncIterator[bytes]:
        headers = caller_headers(request)
        if start > 0 or end < size:
            headers["Range"] = f"bytes={start}-{end - 1}"
        sub = sub_request(request, "GET", "/" + "/".join(
            (path.version, quote(path.account), quote(cont), quote(name))), headers)
        try:
            resp = await self.app(sub)
        except HTTPError as exc:
            raise BodyCutShort(f"segment {cont}/{name}: {exc.status}") from None
        if resp.status // 100 != 2 or not isinstance(resp, BodyResponse):
            close_answer(resp)
            raise BodyCutShort(f"segment {cont}/{name}: {resp.status}")
        async for chunk in resp.chunks():
            if time.monotonic() > deadline:
                resp.close()
                raise BodyCutShort(f"max_get_time of {self.max_get_time}s exceeded")
            yield chunk


def _not_a_manifest(resp: web.StreamResponse) -> bool:
    """Not a manifest's answer (nor a 416 that may have been judged on one's own body)."""
    return "X-Object-Manifest" not in resp.headers and \
        not (resp.status == 416 and "ETag" not in resp.headers)
