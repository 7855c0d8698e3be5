"""The parts of a completed multipart upload's object, read from its SLO manifest.

A completed upload is an SLO whose manifest lists its parts, in order, as segments in the
bucket's hidden uploads container (multipart.py); each segment keeps the part's checksum as
sysmeta (checksum.py). Used by part GETs (`?partNumber=N`: the N-th item) and by
GetObjectAttributes' ObjectParts.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from swiftlite.proxy.response import answer_body, close_answer
from swiftlite.proxy.s3 import checksum
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.errors import S3Error

S3_PARTS = "X-Object-Sysmeta-S3api-Parts"  # as obj.S3_PARTS (obj imports this module)
FANOUT = 16  # segment HEADs in flight for one request


def invalid_part() -> S3Error:
    return S3Error("InvalidPart", 400, "One or more of the specified parts could not be "
                   "found.  The part may not have been uploaded, or the specified entity "
                   "tag may not match the part's entity tag.")


async def manifest(s3: S3Request, version: str = "",
                   key: str | None = None) -> list[dict] | None:
    """The object's (`key`'s, else the request's) manifest items (`name`, `bytes`, `hash`),
    None when it is no SLO."""
    query = "&".join(q for q in ("multipart-manifest=get", version) if q)
    resp = await s3.swift("GET", s3.bucket, key or s3.key, query=query)
    if resp.status // 100 != 2 or "X-Static-Large-Object" not in resp.headers:
        close_answer(resp)
        return None
    try:
        items = json.loads(await answer_body(resp))
    except ValueError:
        return None
    return items if isinstance(items, list) else None


async def part_checksum(s3: S3Request, item: dict) -> tuple[str, str, str] | None:
    """The stored checksum of one manifest item's segment."""
    container, _, obj = str(item.get("name", "")).lstrip("/").partition("/")
    if not container or not obj:
        return None
    head = await s3.swift("HEAD", container, obj, reserved=True)
    close_answer(head)
    if head.status // 100 != 2:
        return None
    return checksum.parse_stored(head.headers.get(checksum.SYSMETA))


async def part_checksums(s3: S3Request,
                         items: list[dict]) -> list[tuple[str, str, str] | None]:
    limit = asyncio.Semaphore(FANOUT)

    async def one(item: dict) -> tuple[str, str, str] | None:
        async with limit:
            return await part_checksum(s3, item)
    return list(await asyncio.gather(*(one(i) for i in items)))


def check_part(resp: web.StreamResponse, part: str | None) -> None:
    """S3's InvalidPart for a part number past the object's parts (a plain object has one)."""
    if part is None:
        return
    if resp.status == 416 or (resp.status // 100 == 2 and int(part) > 1
                              and S3_PARTS not in resp.headers):
        close_answer(resp)
        raise invalid_part()


async def checksum_headers(s3: S3Request, resp: web.StreamResponse, part: str | None,
                           version: str) -> dict[str, str]:
    """The checksum headers a GET/HEAD shows with `x-amz-checksum-mode: ENABLED`: the
    object's, or with `partNumber` on a multipart object, that part's (never a range's)."""
    if not checksum.wanted(s3.request.headers) or resp.status != 200 and part is None:
        return {}
    stored = checksum.parse_stored(resp.headers.get(checksum.SYSMETA))
    if stored is None:
        return {}
    if part is None or S3_PARTS not in resp.headers:
        return checksum.headers_of(stored)
    items = await manifest(s3, version)
    n = int(part)
    if not items or n > len(items):
        return {}
    found = await part_checksum(s3, items[n - 1])
    if found is None or found[0] != stored[0]:
        return {}
    return checksum.headers_of((found[0], stored[1], found[2]))
