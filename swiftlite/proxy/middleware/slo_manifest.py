"""Writing a static large object: the manifest's stored form and the checks of its PUT.

Split from slo.py, which reads, lists and deletes large objects; both speak the format kept
here (the sysmeta names, the stored items, their lengths). `ManifestPut` is mixed into the
`Slo` middleware, so its methods use the middleware's limits and sub-request helper.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import HTTPError
from swiftlite.common.ranges import parse_range
from swiftlite.common.sysmeta import LISTING_BYTES, OVERRIDE_ETAG
from swiftlite.proxy.middleware.reports import (
    Body,
    Outcome,
    Report,
    best_format,
    length_known,
    report_stream,
    status_line,
)
from swiftlite.proxy.request import ApiPath
from swiftlite.proxy.response import BodyResponse, answer_body, close_answer

SLO_ETAG = "X-Object-Sysmeta-Slo-Etag"
SLO_SIZE = "X-Object-Sysmeta-Slo-Size"
SEGMENT_KEYS = {"path", "etag", "size_bytes", "range"}
# A PUT's request headers that describe the manifest body, not the object.
NOT_STORED = ("content-length", "transfer-encoding", "etag", "x-static-large-object",
              "x-object-manifest", "if-none-match")
# Swift's wording of a failed manifest upload's "Response Body" (heartbeat reports).
SWIFT_BODIES = {
    400: "Bad Request\nThe server could not comply with the request since it is either "
         "malformed or otherwise incorrect.",
    422: "Unprocessable Entity\nUnable to process the contained instructions",
}
TOO_SMALL = "too small; each segment must be at least {} byte{}."


def obj_path(version: str, account: str, seg_name: str) -> str:
    """'/container/object' of a manifest to the quoted /v1 path of that object."""
    cont, _, obj = seg_name.lstrip("/").partition("/")
    return "/" + "/".join((version, quote(account), quote(cont), quote(obj)))


def last_modified(value: str | None) -> str:
    """A segment's Last-Modified as the manifest records it."""
    try:
        dt = parsedate_to_datetime(value or "")
    except (TypeError, ValueError, IndexError):
        return ""
    return dt.strftime("%Y-%m-%dT%H:%M:%S.000000")


def parse_segment_range(value: str) -> tuple[int | None, int | None] | str:
    """A manifest item's "range" ("a-b", "a-" or "-n") as (first, last), or an error."""
    spec = value.strip()
    if spec.lower().startswith("bytes="):
        spec = spec[6:]
    if "," in spec:
        return "multiple ranges (only one allowed)"
    first, dash, last = (p.strip() for p in spec.partition("-"))
    digits = (first.isascii() and first.isdigit()) or not first, \
        (last.isascii() and last.isdigit()) or not last
    if not dash or not all(digits) or not (first or last) or \
            (first and last and int(last) < int(first)):
        return "invalid range"
    return (int(first) if first else None, int(last) if last else None)


def size_value(value: Any) -> int | None | str:
    """size_bytes as given: an integer (also as a string or a whole float), or None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return '"size_bytes" must be an integer or null (if provided)'
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and value.isascii():
        return int(value)
    return '"size_bytes" must be an integer or null (if provided)'


def item_length(item: dict[str, Any]) -> int:
    """Bytes a stored manifest item contributes."""
    if "data" in item:
        return len(base64.b64decode(item["data"]))
    rng = item.get("range")
    if rng:
        a, _, b = rng.partition("-")
        return int(b) - int(a) + 1
    return int(item["bytes"])


class ManifestPut:
    """`PUT ?multipart-manifest=put`, for the Slo middleware."""

    async def put_manifest(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        if not length_known(request):
            raise HTTPError(411, "Length Required")
        if request.content_length is not None and \
                request.content_length > self.max_manifest_size:
            raise HTTPError(413, f"Manifest File > {self.max_manifest_size} bytes")
        items = await self._parse(request, path)
        fmt = best_format(request.headers.get("Accept"))
        if request.query.get("heartbeat") == "on":
            report = Report("upload", {"Response Status": status_line(201),
                                       "Response Body": ""})

            async def job(_fmt: str | None) -> None:
                try:
                    resp = await self._store(request, path, items, report)
                except Outcome as exc:
                    raise Outcome(exc.status, exc.body or SWIFT_BODIES.get(exc.status, "")) \
                        from None
                if resp.status // 100 == 2:
                    report.fields["Etag"] = resp.headers.get("ETag", "")
                    report.fields["Last Modified"] = resp.headers.get("Last-Modified", "")
                else:
                    raise Outcome(resp.status, (await answer_body(resp)).decode(errors="replace"))
            return BodyResponse(202, {"Content-Type": fmt or "text/plain"},
                                report_stream(report, job, fmt, self.yield_frequency,
                                              eager=True))
        report = Report("upload", {})
        try:
            return await self._store(request, path, items, report)
        except Outcome as exc:
            if report.errors:
                body = report.render(fmt if fmt == "application/json" else "text/plain")
                return web.Response(status=exc.status, body=body, headers={
                    "Content-Type": fmt if fmt == "application/json" else "text/plain"})
            raise HTTPError(exc.status, exc.body or SWIFT_BODIES.get(exc.status, "")) \
                from None

    async def _parse(self, request: web.Request, path: ApiPath) -> list[dict]:
        """The manifest's items, checked for form (Swift's "Index N: ..." errors: 400)."""
        body = Body(request, self.proxy.client_timeout)
        chunks: list[bytes] = []
        total = 0
        try:
            while True:
                data = await body.read(65536)
                if not data:
                    break
                total += len(data)
                if total > self.max_manifest_size:
                    raise HTTPError(413, f"Manifest File > {self.max_manifest_size} bytes")
                chunks.append(data)
        except Outcome as exc:
            raise HTTPError(exc.status, status_line(exc.status)) from None
        try:
            items = json.loads(b"".join(chunks))
        except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
            raise HTTPError(400, "Manifest must be valid JSON.\n") from None
        if not isinstance(items, list):
            raise HTTPError(400, "Manifest must be a list.\n")
        backed = sum(1 for i in items if isinstance(i, dict) and "data" not in i)
        if backed > self.max_manifest_segments:
            raise HTTPError(413, "Number of object-backed segments must be <= "
                                 f"{self.max_manifest_segments}")
        own = f"/{path.container}/{path.obj}"
        problems = []
        for index, item in enumerate(items):
            problem = self._check_item(item, own)
            if problem:
                problems.append(f"Index {index}: {problem}")
        if not backed and any(isinstance(i, dict) and "data" in i for i in items):
            problems.append("Inline data segments require at least one object-backed "
                            "segment.")
        if problems:
            raise HTTPError(400, "\n".join(problems) + "\n")
        return items

    def _check_item(self, item: Any, own: str) -> str | None:
        if not isinstance(item, dict):
            return "not a JSON object"
        if "data" in item:
            extra = sorted(set(item) - {"data"})
            if extra:
                return "extraneous keys " + ", ".join(f'"{k}"' for k in extra)
            if not isinstance(item["data"], str):
                return "data must be valid base64"
            try:
                data = base64.b64decode(item["data"], validate=True)
            except (binascii.Error, ValueError):
                return "data must be valid base64"
            if len(data) < self.min_segment_size:
                return TOO_SMALL.format(self.min_segment_size,
                                        "" if self.min_segment_size == 1 else "s")
            return None
        extra = sorted(set(item) - SEGMENT_KEYS)
        if extra:
            return "extraneous keys " + ", ".join(f'"{k}"' for k in extra)
        seg = item.get("path")
        if seg is None:
            return 'missing "path"'
        if not isinstance(seg, str):
            return '"path" must be a string'
        cont, _, obj = seg.lstrip("/").partition("/")
        if not cont or not obj:
            return ("path does not refer to an object. Path must be of the form "
                    "/container/object.")
        if f"/{cont}/{obj}" == own:
            return "manifest must not include itself as a segment"
        etag = item.get("etag")
        if etag is not None and not isinstance(etag, str):
            return '"etag" must be a string or null (if provided)'
        size = size_value(item.get("size_bytes"))
        if isinstance(size, str):
            return size
        rng = item.get("range")
        if rng is not None:
            if not isinstance(rng, str):
                return "invalid range"
            parsed = parse_segment_range(rng)
            if isinstance(parsed, str):
                return parsed
        return None

    async def _store(self, request: web.Request, path: ApiPath, items: list[dict],
                     report: Report) -> web.StreamResponse:
        """Checks every segment, then PUTs the manifest; Outcome when it cannot."""
        heads: dict[str, web.StreamResponse | None] = {}
        names = list(dict.fromkeys(i["path"] for i in items if "data" not in i))
        todo = iter(names)

        async def worker() -> None:
            for seg in todo:
                resp = await self._send(request, "HEAD",
                                        obj_path(path.version, path.account, seg))
                close_answer(resp)
                heads[seg] = resp
        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(names)
                                                               or 1))))
        stored: list[dict] = []
        md5 = hashlib.md5(usedforsecurity=False)
        total = 0
        for index, item in enumerate(items):
            if "data" in item:
                data = base64.b64decode(item["data"])
                stored.append({"data": item["data"]})
                md5.update(hashlib.md5(data, usedforsecurity=False).hexdigest().encode())
                total += len(data)
                continue
            entry = self._check_segment(item, heads[item["path"]], report,
                                        index == len(items) - 1)
            if entry is None:
                continue
            stored.append(entry)
            md5.update(entry["hash"].encode())
            if entry.get("range"):
                md5.update(f":{entry['range']};".encode())
            total += item_length(entry)
        if report.errors:
            raise Outcome(400)
        slo_etag = md5.hexdigest()
        given = request.headers.get("ETag")
        if given is not None and given.strip('"') != slo_etag:
            raise Outcome(422)
        body = json.dumps(stored).encode()
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in NOT_STORED)
        if request.headers.get("If-None-Match") is not None:
            headers["If-None-Match"] = request.headers["If-None-Match"]
        manifest_etag = hashlib.md5(body, usedforsecurity=False).hexdigest()
        headers[SLO_ETAG] = slo_etag
        headers[SLO_SIZE] = str(total)
        # A feature's own listing parameters (S3's `s3_etag=...`), sent as this header (a
        # client's never reaches here: the gatekeeper drops it), are kept after ours.
        extra = request.headers.get(OVERRIDE_ETAG)
        headers[OVERRIDE_ETAG] = f'{manifest_etag}; slo_etag="{slo_etag}"' + \
            (f"; {extra}" if extra and ";" not in extra else "")
        headers[LISTING_BYTES] = str(total)
        headers["Content-Length"] = str(len(body))
        resp = await self._send(request, "PUT", request.rel_url.raw_path, headers, body)
        if resp.status == 201:
            resp.headers["ETag"] = f'"{slo_etag}"'
        return resp

    def _check_segment(self, item: dict, head: web.StreamResponse | None, report: Report,
                       last: bool) -> dict | None:
        """The stored entry for one segment, or None with its failure in the report."""
        seg = item["path"]
        if head is None or head.status // 100 != 2:
            report.fail(seg, head.status if head is not None else 503)
            return None
        sub_slo = SLO_ETAG in head.headers
        if sub_slo:
            etag = head.headers[SLO_ETAG]
            size = int(head.headers.get(SLO_SIZE, "0"))
        else:
            etag = head.headers.get("ETag", "").strip('"')
            size = int(head.headers.get("Content-Length", "0"))
        if item.get("etag") is not None and item["etag"] != etag:
            report.fail_reason(seg, "Etag Mismatch")
        given = size_value(item.get("size_bytes"))
        if given is not None and given != size:
            report.fail_reason(seg, "Size Mismatch")
        cont, _, obj = seg.lstrip("/").partition("/")
        entry: dict[str, Any] = {
            "name": f"/{cont}/{obj}", "bytes": size, "hash": etag,
            "content_type": head.headers.get("Content-Type", ""),
            "last_modified": last_modified(head.headers.get("Last-Modified"))}
        length = size
        if item.get("range") is not None:
            first, end = parse_segment_range(item["range"])  # type: ignore[misc]
            spans = parse_range(f"bytes={'' if first is None else first}-"
                                f"{'' if end is None else end}", size)
            if not spans:
                report.fail_reason(seg, "Unsatisfiable Range")
                return None
            a, b = spans[0]
            length = b - a
            if (a, b) != (0, size):  # a range of the whole segment is no range
                entry["range"] = f"{a}-{b - 1}"
        if length < self.min_segment_size and not last:
            report.fail_reason(seg, TOO_SMALL.format(
                self.min_segment_size, "" if self.min_segment_size == 1 else "s"))
        if sub_slo:
            entry["sub_slo"] = True
        return entry
