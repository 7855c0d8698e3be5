"""What CompleteMultipartUpload does around the manifest it writes (multipart.py).

- The manifest keeps its upload's id (`X-Object-Sysmeta-S3-Upload-Id`), so a retried
  completion of an upload already completed answers as the first did (S3 allows the retry;
  clients make it after a lost answer).
- A completed upload that replaces a multipart object outright (the bucket does not keep
  versions, and the object is not a kept version) takes the old object's parts with it: they
  would otherwise stay in the hidden uploads container, unreachable, for ever.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from swiftlite.proxy.response import answer_body, close_answer
from swiftlite.proxy.s3 import checksum, parts, xml
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import small_body, uploads_container, xml_response

UPLOAD_ID = "X-Object-Sysmeta-S3-Upload-Id"
S3_ETAG = "X-Object-Sysmeta-S3api-Etag"  # as obj.S3_ETAG
FANOUT = 8


async def completed(s3: S3Request, upload_id: str) -> web.StreamResponse | None:
    """The answer to completing `upload_id` again, None when the object is not its."""
    head = await s3.swift("HEAD", s3.bucket, s3.key)
    close_answer(head)
    if head.status // 100 != 2 or head.headers.get(UPLOAD_ID) != upload_id:
        return None
    await small_body(s3, header_sums=False)
    root = xml.root("CompleteMultipartUploadResult")
    xml.sub(root, "Location", f"/{s3.bucket}/{s3.key}")
    xml.sub(root, "Bucket", s3.bucket)
    xml.sub(root, "Key", s3.key)
    xml.sub(root, "ETag", '"' + head.headers.get(S3_ETAG, "").strip('"') + '"')
    checksum.xml_members(root, checksum.parse_stored(head.headers.get(checksum.SYSMETA)))
    vid = head.headers.get("X-Object-Version-Id")
    return xml_response(root, headers={"x-amz-version-id": vid}
                        if vid and vid != "null" else None)


async def replaced_segments(s3: S3Request, key: str) -> list[str]:
    """The segment paths of the multipart object that a new one at `key` will overwrite
    (none when the bucket keeps versions or the object is a kept version)."""
    head = await s3.swift("HEAD", s3.bucket, key)
    close_answer(head)
    if head.status // 100 != 2 or S3_ETAG not in head.headers or \
            head.headers.get("X-Object-Version-Id", "null") != "null":
        return []
    bucket = await s3.swift("HEAD", s3.bucket)
    close_answer(bucket)
    if bucket.headers.get("X-Versions-Enabled", "").lower() == "true":
        return []
    items = await parts.manifest(s3)
    return [str(i["name"]) for i in items or () if "name" in i]


async def drop(s3: S3Request, segments: list[str], kept: set[str]) -> None:
    """Delete the old object's segments (none of which the new manifest names)."""
    limit = asyncio.Semaphore(FANOUT)

    hidden = uploads_container(s3.bucket or "")

    async def one(path: str) -> None:
        container, _, obj = path.lstrip("/").partition("/")
        if container != hidden or not obj:
            return  # only ever the parts S3 itself keeps
        async with limit:
            resp = await s3.swift("DELETE", container, obj, reserved=True)
            await answer_body(resp)
    await asyncio.gather(*(one(p) for p in segments if p not in kept))
