"""What a GET or HEAD of one object answers, decided in one place.

The object server sends a plan over HTTP; the proxy's local reads (`proxy.local_reads`) turn
the same plan into a backend answer without the hop. Either way the status, headers and
body bytes are the same, so a client cannot tell which path served it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from swiftlite.common import ranges
from swiftlite.common.config import config_true
from swiftlite.common.sysmeta import OBJECT_SYSMETA
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import bodysum, fileformat, reading

# Stored with an object and answered with it (as Swift's default allowed_headers).
PASSED_HEADERS = ("Content-Encoding", "Content-Disposition", "X-Delete-At", "X-Object-Manifest",
                  "Cache-Control", "Content-Language", "Expires")
DEFAULT_CT = "application/octet-stream"

# A piece of the body: literal bytes, or the [start, end) bytes of the object's body.
Piece = bytes | tuple[int, int]


@dataclass
class ReadPlan:
    status: int
    headers: dict[str, str]
    pieces: list[Piece] = field(default_factory=list)
    length: int = 0  # the body's bytes (HEAD: the object's, sent as Content-Length only)
    reason: str | None = None  # an error's short text (its body, framed as common.http.error)
    verify: bool = False  # one span, the whole body: check its sums as it is read
    corrupt: bool = False  # a body read whole failed its check: quarantine it


def _meta_value(metadata: Mapping[str, str], names: str) -> str | None:
    """The first of the comma-separated header `names` present in `metadata` (whose keys
    are stored title-cased: a dict lookup, no scan, on every GET of every object)."""
    for name in names.split(","):
        value = metadata.get(name.strip().title())
        if value is not None:
            return value
    return None


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> ReadPlan:
    return ReadPlan(status, headers or {}, reason=reason)


def plan_read(request_headers: Mapping[str, str], info: reading.ObjectInfo, is_get: bool,
              full: bool) -> ReadPlan:
    """The answer to a GET (`is_get`) or HEAD of the object `info` describes; `full`: a GET
    without a Range, whose body was opened to be checked against its sums."""
    if info.status == "deleted":
        return _error(404, "Not Found", {"X-Backend-Timestamp": info.timestamp or ""})
    md = info.metadata
    if info.status != "ok" or (fileformat.is_expired(md) and
                               not config_true(request_headers.get("X-Open-Expired", ""))):
        return _error(404, "Not Found")
    assert info.timestamp is not None
    ts = Timestamp.parse(info.timestamp)
    length = info.body_len
    etag = md.get("ETag", "")
    headers = {
        "Content-Type": md.get("Content-Type", DEFAULT_CT),
        "ETag": etag,
        "Last-Modified": ts.http_date(),
        "X-Timestamp": ts.normal,
        "X-Backend-Timestamp": ts.internal,
        "Accept-Ranges": "bytes",
    }
    if info.meta_timestamp:
        headers["X-Backend-Meta-Timestamp"] = info.meta_timestamp
    for k, v in md.items():
        if k.lower().startswith((fileformat.USER_META, OBJECT_SYSMETA)) or k in PASSED_HEADERS:
            headers[k] = v
    cond_etag = etag
    etag_at = request_headers.get("X-Backend-Etag-Is-At")
    if etag_at:  # e.g. an SLO manifest's conditions are judged on the SLO's ETag
        cond_etag = _meta_value(md, etag_at) or etag
    cond = ranges.check_conditions(request_headers, cond_etag, -(-ts.ticks // 100000))
    if cond is not None:
        headers.pop("Content-Type")
        return ReadPlan(cond, headers)
    range_header = request_headers.get("Range")
    unless = request_headers.get("X-Backend-Ignore-Range-If-Metadata-Present")
    if range_header and unless and _meta_value(md, unless) is not None:
        range_header = None  # a manifest: the proxy reads it whole, ranges its segments
    spans = ranges.parse_range(range_header, length)
    if spans is not None and not spans:
        # The object's headers go along (clients check the ETag even on a 416).
        headers.pop("Content-Type")
        return _error(416, "Requested Range Not Satisfiable",
                      {**headers, "Content-Range": f"bytes */{length}"})
    if not is_get:
        return ReadPlan(200, headers, length=length)
    body = info.body
    if spans is None:
        if body is not None:
            if info.etag_ok is False:
                return ReadPlan(404, {}, reason="Not Found (corrupt copy quarantined)",
                                corrupt=True)
            return ReadPlan(200, headers, [body], length)
        return ReadPlan(200, headers, [(0, length)], length, verify=full)

    def piece(a: int, b: int) -> Piece:
        return body[a:b] if body is not None else (a, b)

    if len(spans) == 1:
        a, b = spans[0]
        headers["Content-Range"] = f"bytes {a}-{b - 1}/{length}"
        return ReadPlan(206, headers, [piece(a, b)], b - a)
    bound = ranges.boundary()
    heads, tail, total = ranges.multipart_parts(spans, length, headers["Content-Type"], bound)
    headers["Content-Type"] = f"multipart/byteranges;boundary={bound}"
    pieces: list[Piece] = []
    for head, (a, b) in zip(heads, spans, strict=True):
        pieces += [head, piece(a, b), b"\r\n"]
    pieces.append(tail)
    return ReadPlan(206, headers, pieces, total)


class CorruptCopy(OSError):
    """A whole body failed its check while streamed: its last chunk was withheld."""


async def span_chunks(read: Callable[[int, int], Awaitable[bytes]], start: int, end: int,
                      chunk: int, verifier: bodysum.Verifier | None) -> AsyncIterator[bytes]:
    """The body's [start, end), `chunk` bytes per `read(offset, length)` (a pool hop that
    feeds `verifier`). With a `verifier` (the whole body), its sums are checked before the
    last chunk is yielded: CorruptCopy instead, so a reader sees a short body, never bad
    bytes whole (the caller quarantines the copy and cuts the response)."""
    off = start
    while off < end:
        data = await read(off, min(chunk, end - off))
        if not data:
            raise OSError("object file shrank while reading")
        off += len(data)
        if off >= end and verifier is not None and not verifier.ok():
            raise CorruptCopy("corrupt object: cut before the end")
        yield data
