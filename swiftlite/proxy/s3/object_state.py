"""What S3 keeps with a new object besides its metadata, in one place for the object
writers (PutObject, CopyObject, Create/CompleteMultipartUpload) and readers (GET/HEAD):
its tags (tagging.py), its retention and legal hold (lock.py), and its expiry from the
bucket's lifecycle rules (lifecycle.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.sysmeta import LEGAL_HOLD, RETAIN_UNTIL, RETENTION_MODE
from swiftlite.proxy.s3 import lifecycle, lock, tagging
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.errors import invalid_argument

# What a completed multipart upload takes from its upload's marker.
CARRIED = (tagging.OBJECT_TAGS, RETENTION_MODE, RETAIN_UNTIL, LEGAL_HOLD)


async def _bucket_meta(s3: S3Request) -> dict[str, str] | None:
    """The bucket's metadata (the proxy's cached container info); None: no such bucket
    (the write itself then answers NoSuchBucket)."""
    info = await s3.proxy.container_info(s3.request, s3.account, s3.bucket or "")
    return info.meta if info.status // 100 == 2 else None


async def on_write(s3: S3Request, headers: CIMultiDict[str], final: bool = True) -> None:
    """A PutObject's (CreateMultipartUpload's: not `final`) headers get the object's tags,
    lock and expiry."""
    tags = tagging.header_tags(s3)
    if tags:
        headers[tagging.OBJECT_TAGS] = tagging.encode_tags(tags)
    meta = await _bucket_meta(s3)
    lock.stamp(s3, headers, meta)
    if final:
        lifecycle.stamp(s3.key or "", tags or [], headers, meta)


async def on_complete(s3: S3Request, marker: web.StreamResponse,
                      headers: dict[str, str]) -> None:
    """CompleteMultipartUpload: what CreateMultipartUpload kept on its marker, and the
    expiry (counted from completion)."""
    for name in CARRIED:
        value = marker.headers.get(name)
        if value:
            headers[name] = value
    meta = await _bucket_meta(s3)
    tags = tagging.decode_tags(headers.get(tagging.OBJECT_TAGS))
    out: CIMultiDict[str] = CIMultiDict()
    lifecycle.stamp(s3.key or "", tags, out, meta)
    headers.update(out)


async def on_copy(s3: S3Request, source: web.StreamResponse,
                  headers: CIMultiDict[str]) -> None:
    """CopyObject: the source's tags (`x-amz-tagging-directive: COPY`, the default) or the
    request's (REPLACE); retention and expiry as for a new object (never the source's)."""
    directive = s3.request.headers.get("x-amz-tagging-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise invalid_argument("Unknown tagging directive.", "x-amz-tagging-directive",
                               directive)
    if directive == "COPY":
        tags = tagging.decode_tags(source.headers.get(tagging.OBJECT_TAGS))
    else:
        tags = tagging.header_tags(s3) or []
    if tags:  # (the core's copy takes no sysmeta of the source's: not its lock either)
        headers[tagging.OBJECT_TAGS] = tagging.encode_tags(tags)
    meta = await _bucket_meta(s3)
    lock.stamp(s3, headers, meta)
    lifecycle.stamp(s3.key or "", tags, headers, meta)


def answer_headers(h: Any) -> None:
    """GET/HEAD: the object's tag count, lock and expiry as S3's headers (before its
    sysmeta is dropped)."""
    count = tagging.tag_count(h.get(tagging.OBJECT_TAGS))
    if count:
        h["x-amz-tagging-count"] = str(count)
    lock.answer_headers(h)
    lifecycle.answer_headers(h)
