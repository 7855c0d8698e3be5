"""Static large objects: a manifest lists segments (objects, parts of objects, other manifests
or small inline data) that read as one object.

`PUT ?multipart-manifest=put` takes a JSON list of `{"path": "/container/object", "etag",
"size_bytes", "range"}` (etag, size_bytes and range optional) and `{"data": <base64>}` items.
Every segment is checked with a HEAD sub-request as the caller (so ACLs apply): it must exist,
match the given ETag and size, and a range must fit it. The manifest is stored as an ordinary
object (a JSON list of the segments' names, sizes, ETags, content types and times) with the
SLO's ETag (MD5 of the segments' ETags) and total size as object sysmeta; its container
listing shows the total and `slo_etag`. `heartbeat=on` answers 202 at once and sends spaces
while checking, then a report, as Swift does.

GET/HEAD of a manifest: the object servers judge If-Match and friends on the SLO's ETag and
ignore Range for manifests (X-Backend-Etag-Is-At, X-Backend-Ignore-Range-If-Metadata-Present),
so a plain object costs no extra request. A HEAD answers from the sysmeta alone. A GET reads
the manifest and streams the wanted bytes segment after segment, each fetched by a GET
sub-request (a Range for partial ones; nested manifests expanded as they come), so memory stays
at a chunk or so whatever the size. Each segment's ETag and length must match the manifest:
otherwise the first segment answers 409 and a later one cuts the connection (the object
servers also cut a segment whose bytes do not match its ETag). One or several ranges
(multipart/byteranges) and `?part-number=N` (the N-th item of the manifest) are served.

`?multipart-manifest=get` returns the stored manifest (`&format=raw`: in the PUT format, so it
can be PUT again); `DELETE ?multipart-manifest=delete` deletes the segments (and those of
nested manifests), then the manifest, answering with a bulk-delete style report.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import SWIFT_CONFLICT, HTTPError, error
from swiftlite.common.ranges import boundary, multipart_parts, parse_range
from swiftlite.common.reserved import is_reserved, split_reserved
from swiftlite.proxy.middleware.reports import (
    Outcome,
    Report,
    best_format,
    report_stream,
    status_line,
)
from swiftlite.proxy.middleware.slo_manifest import (
    SLO_ETAG,
    SLO_SIZE,
    ManifestPut,
    item_length,
    obj_path,
)
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import (
    BACKEND_GET_HEADERS,
    ApiPath,
    api_path,
    caller_headers,
    send_sub,
)
from swiftlite.proxy.response import (
    BodyCutShort,
    BodyResponse,
    after_first_chunk,
    answer_body,
    bytes_response,
    close_answer,
)

# The object servers judge conditions on the SLO's ETag and send a manifest whole.
GET_HEADERS = {"X-Backend-Etag-Is-At": SLO_ETAG,
               "X-Backend-Ignore-Range-If-Metadata-Present": SLO_ETAG}
RESERVED = ("X-Static-Large-Object is a reserved header. To create a static large object "
            "add query param multipart-manifest=put.")
# Request headers a segment sub-request carries (who the caller is, referrer ACLs, expiry).


def _sub_headers(request: web.Request) -> CIMultiDict[str]:
    """A segment read acts as the caller, and reads expired segments when it may."""
    return caller_headers(request, ("X-Open-Expired",))


# Headers of the stored manifest that the assembled object does not keep.
DROPPED = ("content-length", "content-range", "etag", "transfer-encoding")
MAX_NESTING = 10  # manifests within manifests, as Swift


def _version_query(request: web.Request) -> str:
    """`version-id=<id>` when the client named a version (object versioning, below): a
    manifest read or deleted for the client is that version's."""
    vid = request.query.get("version-id")
    return "" if vid is None else f"version-id={quote(vid, safe='')}"


def kept_for(seg_name: str, container: str | None) -> bool:
    """Whether a segment lives in a reserved container kept for the manifest's own
    container (its last part names it: S3's multipart parts, `\\x00mpu\\x00<container>`).
    Such segments are read and deleted as the manifest was judged: no client can name them
    in a manifest (the PUT's checks of its segments cannot reach the reserved namespace),
    only a feature that stored them there."""
    cont = seg_name.lstrip("/").partition("/")[0]
    if container is None or not is_reserved(cont):
        return False
    parts = split_reserved(cont)
    return len(parts) >= 2 and parts[-1] == container


class Slo(ManifestPut, Middleware):
    name = "slo"
    plain_reads = HOOKS
    plain_answer_marks = (SLO_ETAG,)  # a manifest: `get` assembles it
    replays_declined = True  # a manifest, declined, is not fetched a second time

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.max_manifest_segments = conf.get_int("max_manifest_segments", 1000)
        self.max_manifest_size = conf.get_int("max_manifest_size", 8 * 1024 * 1024)
        self.min_segment_size = max(conf.get_int("min_segment_size", 1), 1)
        self.yield_frequency = max(conf.get_float("yield_frequency", 10.0), 0.01)
        self.concurrency = min(max(conf.get_int("concurrency", 2), 1), 10)
        self.delete_concurrency = min(max(conf.get_int("delete_concurrency", 2), 1), 10)
        self.max_get_time = conf.get_int("max_get_time", 86400)
        self.rate_limit_after_segment = conf.get_int("rate_limit_after_segment", 10)
        self.rate_limit_segments_per_sec = conf.get_int("rate_limit_segments_per_sec", 1)
        self.rate_limit_under_size = conf.get_int("rate_limit_under_size", 1024 * 1024)

    def info(self) -> dict[str, Any]:
        return {"max_manifest_segments": self.max_manifest_segments,
                "max_manifest_size": self.max_manifest_size,
                "yield_frequency": int(self.yield_frequency)
                if self.yield_frequency.is_integer() else self.yield_frequency,
                "min_segment_size": self.min_segment_size}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None or path.obj is None:
            return await self.app(request)
        method = request.method
        mm = request.query.get("multipart-manifest")
        if method == "PUT":
            if mm == "put":
                return await self.put_manifest(request, path)
            if "X-Static-Large-Object" in request.headers:
                raise HTTPError(400, RESERVED)
        elif method == "POST":
            if "X-Static-Large-Object" in request.headers:
                raise HTTPError(400, RESERVED)
        elif method == "DELETE":
            if mm == "delete":
                return await self.delete_manifest(request, path)
        elif method in ("GET", "HEAD"):
            if mm == "get":
                return await self.get_manifest(request, path)
            return await self.get(request, path)
        return await self.app(request)

    async def _send(self, request: web.Request, method: str, path: str,
                    headers: CIMultiDict[str] | None = None, body: Any = None,
                    query: str = "", reserved: bool = False) -> web.StreamResponse:
        return await send_sub(self.app, request, method, path,
                              _sub_headers(request) if headers is None else headers, body,
                              query, reserved)

    # ---- reading a large object ------------------------------------------------------------

    async def get(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        part = request.query.get("part-number")
        given = request.get(BACKEND_GET_HEADERS)
        if given and "X-Backend-Etag-Is-At" in given:
            # A feature's own ETag (S3's multipart one) is judged first, then the SLO's.
            request[BACKEND_GET_HEADERS] = {
                **GET_HEADERS,
                "X-Backend-Etag-Is-At": f"{given['X-Backend-Etag-Is-At']},{SLO_ETAG}"}
        else:
            request[BACKEND_GET_HEADERS] = GET_HEADERS
        resp = await self.app(request)
        slo_etag = resp.headers.get(SLO_ETAG)
        if slo_etag is None:
            return resp  # not a manifest (part-number means nothing to a plain object)
        headers = CIMultiDict((k, v) for k, v in resp.headers.items()
                              if k.lower() not in DROPPED)
        headers["ETag"] = f'"{slo_etag}"'
        headers["X-Static-Large-Object"] = "True"
        headers["X-Manifest-Etag"] = resp.headers.get("ETag", "").strip('"')
        size = int(resp.headers.get(SLO_SIZE, "0"))
        if resp.status // 100 != 2:  # 304, 412: judged on the SLO's ETag
            close_answer(resp)
            return web.Response(status=resp.status, headers=headers)
        is_head = request.method == "HEAD"
        if part is not None and not (part.isascii() and part.isdigit() and int(part) > 0):
            close_answer(resp)
            if is_head:
                return web.Response(status=400, headers={"Content-Length": "0"})
            raise HTTPError(400, "Part number must be an integer greater than 0")
        if is_head and part is None:
            close_answer(resp)
            return BodyResponse(200, headers, None, size)
        if is_head:  # a HEAD of a part needs the manifest itself
            close_answer(resp)
            resp = await self._send(request, "GET", request.rel_url.raw_path,
                                    query=_version_query(request))
            if resp.status // 100 != 2 or SLO_ETAG not in resp.headers:
                close_answer(resp)
                return web.Response(status=resp.status if resp.status >= 400 else 503)
        try:
            items = json.loads(await answer_body(resp))
        except ValueError:
            raise HTTPError(500, "Unreadable manifest") from None
        return await self.respond(request, path, headers, items, size, part)

    async def respond(self, request: web.Request, path: ApiPath, headers: CIMultiDict[str],
                      items: list[dict], size: int, part: str | None) -> web.StreamResponse:
        status = 200
        spans: list[tuple[int, int]] | None = None
        if part is not None:
            n = int(part)
            headers["X-Parts-Count"] = str(len(items))
            if n > len(items):
                headers["Content-Range"] = f"bytes */{size}"
                if request.method == "HEAD":
                    return BodyResponse(416, headers, None, 0)
                return web.Response(status=416, headers=headers,
                                    body=b"The requested part number is not satisfiable")
            start = sum(item_length(i) for i in items[:n - 1])
            spans = [(start, start + item_length(items[n - 1]))]
        else:
            spans = parse_range(request.headers.get("Range"), size)
            if spans == []:
                headers["Content-Range"] = f"bytes */{size}"
                headers.pop("Content-Type", None)
                return error(416, "Requested Range Not Satisfiable", dict(headers))
        if spans is None:
            spans = [(0, size)]
        else:
            status = 206
        if len(spans) == 1:
            first, last = spans[0]
            if status == 206:
                headers["Content-Range"] = f"bytes {first}-{last - 1}/{size}"
            length = last - first
            if request.method == "HEAD":
                return BodyResponse(status, headers, None, length)
            body = self._bytes(request, path, items, first, last)
        else:
            ctype = headers.get("Content-Type", "application/octet-stream")
            bound = boundary()
            heads, tail, length = multipart_parts(spans, size, ctype, bound)
            headers["Content-Type"] = f"multipart/byteranges;boundary={bound}"
            if request.method == "HEAD":
                return BodyResponse(status, headers, None, length)
            body = self._multipart(request, path, items, spans, heads, tail)
        try:
            return await after_first_chunk(status, headers, body, length)
        except BodyCutShort:
            return error(409, SWIFT_CONFLICT)  # the first segment could not be read

    async def _multipart(self, request: web.Request, path: ApiPath, items: list[dict],
                         spans: list[tuple[int, int]], heads: list[bytes],
                         tail: bytes) -> AsyncIterator[bytes]:
        for head, (first, last) in zip(heads, spans, strict=True):
            yield head
            async for chunk in self._bytes(request, path, items, first, last):
                yield chunk
            yield b"\r\n"
        yield tail

    async def _bytes(self, request: web.Request, path: ApiPath, items: list[dict],
                     first: int, last: int) -> AsyncIterator[bytes]:
        """Bytes [first, last) of the object the manifest `items` describe."""
        pacing = {"fetched": 0, "next": 0.0}
        deadline = time.monotonic() + self.max_get_time
        async for chunk in self._walk(request, path, items, first, last, 0, pacing, deadline):
            yield chunk

    async def _walk(self, request: web.Request, path: ApiPath, items: list[dict], first: int,
                    last: int, depth: int, pacing: dict[str, Any],
                    deadline: float) -> AsyncIterator[bytes]:
        offset = 0
        for item in items:
            length = item_length(item)
            start, end = max(first - offset, 0), min(last - offset, length)
            offset += length
            if end <= start:
                if offset >= last:
                    return
                continue
            if "data" in item:
                yield base64.b64decode(item["data"])[start:end]
                continue
            base = 0
            if item.get("range"):
                base = int(item["range"].partition("-")[0])
            if item.get("sub_slo"):
                if depth + 1 >= MAX_NESTING:
                    raise BodyCutShort("manifests nested too deep")
                sub_items = await self._sub_manifest(request, path, item)
                async for chunk in self._walk(request, path, sub_items, base + start,
                                              base + end, depth + 1, pacing, deadline):
                    yield chunk
                continue
            await self._pace(pacing, int(item["bytes"]))
            async for chunk in self._segment(request, path, item, base + start, base + end,
                                             deadline):
                yield chunk

    async def _pace(self, pacing: dict[str, Any], seg_size: int) -> None:
        """Swift's pacing of many small segments: one client cannot hammer the cluster."""
        if seg_size >= self.rate_limit_under_size or not self.rate_limit_segments_per_sec:
            return
        pacing["fetched"] += 1
        if pacing["fetched"] <= self.rate_limit_after_segment:
            return
        wait = pacing["next"] - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        pacing["next"] = time.monotonic() + 1 / self.rate_limit_segments_per_sec

    async def _sub_manifest(self, request: web.Request, path: ApiPath,
                            item: dict) -> list[dict]:
        resp = await self._send(request, "GET", obj_path(path.version, path.account,
                                                          item["name"]),
                                reserved=kept_for(item["name"], path.container))
        if resp.status // 100 != 2 or resp.headers.get(SLO_ETAG) != item["hash"]:
            close_answer(resp)
            raise BodyCutShort(f"sub-manifest {item['name']}: {resp.status}, or changed")
        try:
            items = json.loads(await answer_body(resp))
        except ValueError:
            raise BodyCutShort(f"sub-manifest {item['name']} unreadable") from None
        return items

    async def _segment(self, request: web.Request, path: ApiPath, item: dict, start: int,
                       end: int, deadline: float) -> AsyncIterator[bytes]:
        headers = _sub_headers(request)
        if start > 0 or end < int(item["bytes"]):
            headers["Range"] = f"bytes={start}-{end - 1}"
        resp = await self._send(request, "GET", obj_path(path.version, path.account,
                                                          item["name"]), headers,
                                reserved=kept_for(item["name"], path.container))
        name = item["name"]
        if resp.status // 100 != 2 or not isinstance(resp, BodyResponse):
            close_answer(resp)
            raise BodyCutShort(f"segment {name}: {resp.status}")
        if resp.headers.get("ETag", "").strip('"') != item["hash"]:
            resp.close()
            raise BodyCutShort(f"segment {name}: ETag differs from the manifest's")
        got = 0
        async for chunk in resp.chunks():
            if time.monotonic() > deadline:
                resp.close()
                raise BodyCutShort(f"max_get_time of {self.max_get_time}s exceeded")
            got += len(chunk)
            if got > end - start:
                resp.close()
                raise BodyCutShort(f"segment {name}: longer than the manifest says")
            yield chunk
        if got != end - start:
            raise BodyCutShort(f"segment {name}: {got} bytes, not {end - start}")

    # ---- the manifest itself ---------------------------------------------------------------

    async def get_manifest(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        raw = request.query.get("format") == "raw"
        if raw and request.method == "HEAD":
            resp = await self._send(request, "GET", request.rel_url.raw_path,
                                    CIMultiDict(request.headers))
        else:
            resp = await self.app(request)
        if SLO_ETAG not in resp.headers or resp.status // 100 != 2:
            return resp
        resp.headers["X-Static-Large-Object"] = "True"
        if not raw:
            resp.headers["Content-Type"] = "application/json; charset=utf-8"
            return resp
        try:
            items = json.loads(await answer_body(resp))
        except ValueError:
            raise HTTPError(500, "Unreadable manifest") from None
        body = json.dumps([self._as_put(i) for i in items], sort_keys=True).encode()
        headers = CIMultiDict((k, v) for k, v in resp.headers.items()
                              if k.lower() not in DROPPED)
        headers["ETag"] = hashlib.md5(body, usedforsecurity=False).hexdigest()
        if request.method == "HEAD":
            return BodyResponse(200, headers, None, len(body))
        return bytes_response(200, headers, body)

    @staticmethod
    def _as_put(item: dict) -> dict:
        if "data" in item:
            return {"data": item["data"]}
        out = {"path": item["name"], "etag": item["hash"], "size_bytes": item["bytes"]}
        if item.get("range"):
            out["range"] = item["range"]
        return out

    # ---- DELETE of a manifest and its segments ---------------------------------------------

    async def delete_manifest(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        fmt = best_format(request.headers.get("Accept"))
        own = request.rel_url.raw_path
        version = _version_query(request)  # object versioning: that version's manifest
        first = await self._send(request, "GET", own, query="&".join(
            q for q in ("multipart-manifest=get", version) if q))
        if first.status in (401, 403):
            close_answer(first)
            return first
        report = Report("delete", {"Response Status": status_line(200),
                                   "Response Body": "", "Number Deleted": 0,
                                   "Number Not Found": 0})

        async def job(_fmt: str | None) -> None:
            targets: list[tuple[str, str]] = []  # (name for the report, quoted path)
            if first.status // 100 == 2 and SLO_ETAG in first.headers:
                try:
                    items = json.loads(await answer_body(first))
                except ValueError:
                    raise Outcome(500) from None
                await self._collect(request, path, items, targets, 0, report)
            else:
                close_answer(first)
            # The manifest goes last, and only when all its segments could go (else it
            # still names those left, and the delete can be retried).
            await self._delete_all(request, targets, report)
            if not report.errors:
                await self._delete_all(request, [(f"/{path.container}/{path.obj}", own)],
                                       report, version)
            if report.errors:
                report.fields["Response Status"] = status_line(report.failure_status)
        return await after_first_chunk(200, {"Content-Type": fmt or "text/plain"},
                                       report_stream(report, job, fmt, self.yield_frequency))

    async def _collect(self, request: web.Request, path: ApiPath, items: list[dict],
                       targets: list[tuple[str, str]], depth: int, report: Report) -> None:
        """Every segment of `items`, nested manifests' segments before the manifests."""
        for item in items:
            if "data" in item:
                continue
            seg_path = obj_path(path.version, path.account, item["name"])
            if item.get("sub_slo"):
                if depth + 1 >= MAX_NESTING:
                    report.fail_reason(item["name"], "Max recursion depth exceeded")
                    continue
                resp = await self._send(request, "GET", seg_path,
                                        query="multipart-manifest=get")
                if resp.status // 100 == 2 and SLO_ETAG in resp.headers:
                    try:
                        sub = json.loads(await answer_body(resp))
                    except ValueError:
                        sub = []
                    await self._collect(request, path, sub, targets, depth + 1, report)
                else:
                    close_answer(resp)
            targets.append((item["name"], seg_path))

    async def _delete_all(self, request: web.Request, targets: list[tuple[str, str]],
                          report: Report, query: str = "") -> None:
        """`targets`, `delete_concurrency` at a time."""
        counts = report.fields
        todo = iter(targets)
        own = api_path(request)

        async def one(target: tuple[str, str]) -> None:
            resp = await self._send(request, "DELETE", target[1], query=query,
                                    reserved=own is not None and
                                    kept_for(target[0], own.container))
            close_answer(resp)
            if resp.status // 100 == 2:
                counts["Number Deleted"] += 1
            elif resp.status == 404:
                counts["Number Not Found"] += 1
            else:
                report.fail(target[0], resp.status)

        async def worker() -> None:
            for target in todo:
                await one(target)
        await asyncio.gather(*(worker() for _ in range(self.delete_concurrency)))
