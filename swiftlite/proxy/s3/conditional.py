"""Conditional writes and deletes: PutObject / CompleteMultipartUpload with `If-Match` and
`If-None-Match`, DeleteObject with `If-Match`, `x-amz-if-match-last-modified-time` and
`x-amz-if-match-size`, and DeleteObjects' per-object `ETag`, `LastModifiedTime` and `Size`.

What is compared is the current object (or the named version): its S3 ETag (a multipart
upload's `<md5>-<n>`), size and Last-Modified (whole seconds, as HEAD shows it).

Atomicity: `If-None-Match: *` goes down with the PUT and the object servers refuse, under
their per-object lock, to overwrite an object (`writing.Exists`). In an unversioned bucket
`If-Match: "<etag>"` goes down the same way (`X-Backend-If-Match`, checked against the
current object's ETag under that lock, see obj/engine/writing.py `DataWriter`), so two writers
racing on one key cannot both pass on a replica (each replica judges on its own: a writer
refused by a quorum may have landed on one, and wins after replication if its timestamp is
the newer, as for If-None-Match: *). The HEAD made here first is what gives S3's answers
(404 NoSuchKey when there is nothing to match, 412 otherwise). In a versioned bucket the
visible name is a link written after the version, so there the conditions are judged by
that HEAD alone: a write landing between it and the PUT is not seen (a narrow race).
Conditional deletes are judged by a HEAD too (same narrow race).

A delete marker as the current version counts, for a delete's conditions, as an object
with no ETag (only `*` matches it), size 0 and its own time: S3 refuses a conditional
delete that does not match it, where a key with no version at all is simply deleted.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote, urlencode

from aiohttp import web

from swiftlite.proxy.response import answer_body, close_answer
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.errors import (
    S3Error,
    invalid_argument,
    no_such_bucket,
    no_such_key,
    precondition_failed,
)

S3_ETAG = "X-Object-Sysmeta-S3api-Etag"
ETAG_IS_AT = {"X-Backend-Etag-Is-At": S3_ETAG}
DELETE_MARKER = "application/x-deleted;swift_versions_deleted=1"
IF_MATCH_TIME = "x-amz-if-match-last-modified-time"
IF_MATCH_SIZE = "x-amz-if-match-size"


async def bucket_missing(s3: S3Request) -> bool:
    head = await s3.swift("HEAD", s3.bucket)
    close_answer(head)
    return head.status == 404


async def _versioned(s3: S3Request) -> bool:
    head = await s3.swift("HEAD", s3.bucket)
    close_answer(head)
    return head.headers.get("X-Versions-Enabled", "").lower() == "true"


# ---- writes ---------------------------------------------------------------------------------

class WriteConditions:
    """What a conditional PUT sends down: `headers` (If-None-Match: *) and `backend`
    (X-Backend-If-Match, see proxy/request.py BACKEND_PUT_HEADERS)."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.backend: dict[str, str] = {}

    def refused(self, resp: web.StreamResponse) -> S3Error | None:
        """The S3 error for a PUT the object servers refused on a condition sent down."""
        if resp.status != 412 or not (self.headers or self.backend):
            return None
        return precondition_failed("If-None-Match" if self.headers else "If-Match")


async def check_write(s3: S3Request, key: str) -> WriteConditions:
    """Judge the request's If-Match / If-None-Match against `key`'s current object (raising
    S3's error when one fails); what the PUT itself carries so that the object servers
    judge them again, atomically."""
    req = s3.request.headers
    out = WriteConditions()
    for name in ("If-Match", "If-None-Match"):
        value = req.get(name)
        if value is None:
            continue
        if not value.strip():
            raise invalid_argument(f"Empty {name}", name, value)
        head = await s3.swift("HEAD", s3.bucket, key, {name: value}, backend=ETAG_IS_AT)
        close_answer(head)
        if head.status == 404:
            if await bucket_missing(s3):
                raise no_such_bucket(s3.bucket or "")
            if name == "If-Match":
                raise no_such_key(key)
            continue
        if head.status in (304, 412):
            raise precondition_failed(name)
        if head.status // 100 != 2:
            raise await error_of(head, s3.bucket, key)
        if name == "If-Match" and value.strip() != "*" and \
                head.headers.get("X-Object-Version-Id", "null") == "null" and \
                not await _versioned(s3):
            # Not a versioned link: the object servers compare the ETag again under their
            # lock (the one found matched the client's).
            out.backend["X-Backend-If-Match"] = head.headers.get(S3_ETAG) or \
                head.headers.get("ETag", "").strip('"')
            out.backend["X-Backend-Etag-Is-At"] = S3_ETAG
    if req.get("If-None-Match", "").strip() == "*":
        out.headers["If-None-Match"] = "*"
    return out


# ---- deletes --------------------------------------------------------------------------------

class DeleteConditions:
    """What a conditional delete requires of the object it deletes (None: no condition)."""

    def __init__(self, etag: str | None = None, mtime: datetime | None = None,
                 size: int | None = None) -> None:
        self.etag = etag
        self.mtime = mtime
        self.size = size

    def __bool__(self) -> bool:
        return self.etag is not None or self.mtime is not None or self.size is not None

    @classmethod
    def from_headers(cls, s3: S3Request) -> DeleteConditions:
        h = s3.request.headers
        mtime = size = None
        if IF_MATCH_TIME in h:
            mtime = _http_time(h[IF_MATCH_TIME], IF_MATCH_TIME)
        if IF_MATCH_SIZE in h:
            size = _size(h[IF_MATCH_SIZE], IF_MATCH_SIZE)
        return cls(h.get("If-Match"), mtime, size)

    @classmethod
    def from_xml(cls, etag: str | None, mtime: str | None,
                 size: str | None) -> DeleteConditions:
        when = None
        if mtime is not None:
            when = _http_time(mtime, "LastModifiedTime")
        return cls(etag, when, _size(size, "Size") if size is not None else None)

    def hold(self, etag: str | None, mtime: float, size: int) -> bool:
        """Whether an object of that ETag (None: a delete marker), time and size matches."""
        if self.etag is not None:
            wanted = self.etag.strip()
            if wanted != "*" and (etag is None or wanted.strip('"') != etag.strip('"')):
                return False
        if self.mtime is not None and int(self.mtime.timestamp()) != int(mtime):
            return False
        return self.size is None or self.size == size


def _http_time(value: str, name: str) -> datetime:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        when = None
    if when is None:
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise invalid_argument(f"Invalid {name}", name, value) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _size(value: str, name: str) -> int:
    v = value.strip()
    if not v.isdigit():
        raise invalid_argument(f"Invalid {name}", name, value)
    return int(v)


def _seconds(http_date: str) -> float:
    try:
        return parsedate_to_datetime(http_date).timestamp()
    except (TypeError, ValueError):
        return 0.0


async def _current_marker(s3: S3Request, key: str) -> float | None:
    """The time of the delete marker that is `key`'s current version, if one is."""
    params = {"format": "json", "versions": "", "prefix": key, "limit": "1"}
    resp = await s3.swift("GET", s3.bucket, query=urlencode(params, quote_via=quote))
    if resp.status // 100 != 2:
        close_answer(resp)
        return None
    rows = json.loads(await answer_body(resp) or b"[]")
    if not rows or rows[0].get("name") != key or \
            not rows[0].get("content_type", "").startswith(DELETE_MARKER):
        return None
    when = rows[0].get("last_modified", "")
    try:
        stamp = datetime.fromisoformat(when).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0
    return float(math.ceil(stamp))


NOTHING = "nothing"  # check_delete: no object (or a delete marker) to delete, nothing done


async def check_delete(s3: S3Request, key: str, vid: str | None,
                       cond: DeleteConditions) -> S3Error | str | None:
    """What a conditional delete of `key` (or its version `vid`) comes to: None, go ahead;
    the S3 error it fails with; or NOTHING when there is no object to delete (S3 answers
    that as a success, and a versioned bucket gets no new delete marker)."""
    if not cond:
        return None
    query = "" if not vid else "version-id=" + quote(vid, safe="")
    head = await s3.swift("HEAD", s3.bucket, key, query=query)
    close_answer(head)
    if head.status // 100 == 2:
        etag = head.headers.get(S3_ETAG) or head.headers.get("ETag", "")
        size = int(head.headers.get("Content-Length", "0") or 0)
        if cond.hold(etag, _seconds(head.headers.get("Last-Modified", "")), size):
            return None
        return precondition_failed("If-Match")
    if head.status != 404:
        return await error_of(head, s3.bucket, key)
    if await bucket_missing(s3):
        return no_such_bucket(s3.bucket or "")
    if vid or not await _versioned(s3):
        return NOTHING
    when = await _current_marker(s3, key)
    if when is None or cond.hold(None, when, 0):
        return NOTHING
    return precondition_failed("If-Match")
