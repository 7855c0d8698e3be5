"""The shape every per-bucket setting kept as container sysmeta shares, written once.

A setting (lifecycle, CORS, bucket tagging, default encryption, the object lock
configuration) is a sub-resource of the bucket: GET reads its sysmeta from a HEAD of the
container and answers its document, or its own NoSuch...Configuration error when none is
stored; PUT checks the request's document and stores what it makes of it with a container
POST; DELETE stores it empty. A module declares its setting with `bucket_setting` and keeps
only what is its own: parsing, checks, the stored form and the document.

Settings whose shape differs keep their own handlers (the bucket policy reads its body with
its own limit and error; ownership controls and the public access block read the cached
container info; versioning is the core's object versioning, not sysmeta).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import small_body
from swiftlite.proxy.s3.errors import S3Error
from swiftlite.proxy.s3.routes import route

T = TypeVar("T")


def sysmeta_value(meta: Mapping[str, str], name: str) -> str | None:
    """`name`'s value in a HEAD answer's headers or in cached container info's metadata (a
    plain dict, its names as stored), whatever their case."""
    if isinstance(meta, CIMultiDict | CIMultiDictProxy):
        return meta.get(name)
    lname = name.lower()
    return next((v for k, v in meta.items() if k.lower() == lname), None)


def bucket_setting(sub: str, header: str, *,
                   load: Callable[[Mapping[str, str]], T | None],
                   missing: Callable[[str | None], S3Error],
                   document: Callable[[T], web.StreamResponse],
                   store: Callable[[S3Request, bytes], Awaitable[dict[str, str]]],
                   put_status: int = 200, deletable: bool = True) -> None:
    """Route GET/PUT (and DELETE unless not `deletable`) of the bucket sub-resource `sub`,
    kept in the container sysmeta `header`:

    - `load`: the setting from the bucket's HEAD headers; None when none is stored.
    - `missing`: GET's error for a bucket without the setting (given the bucket's name).
    - `document`: GET's answer for a stored setting.
    - `store`: PUT's request body checked; the container headers that store it (raise the
      client's S3 error for a bad document: nothing is stored then).
    - `put_status`: PUT's answer status (S3 says 204 for some settings, 200 for others).
    """
    @route("bucket", "GET", sub)
    async def get_setting(s3: S3Request) -> web.StreamResponse:
        head = await s3.swift_ok("HEAD", s3.bucket)
        value = load(head.headers)
        if value is None:
            raise missing(s3.bucket)
        return document(value)

    @route("bucket", "PUT", sub)
    async def put_setting(s3: S3Request) -> web.StreamResponse:
        headers = await store(s3, await small_body(s3))
        await s3.swift_ok("POST", s3.bucket, headers=headers)
        return web.Response(status=put_status)

    if deletable:
        @route("bucket", "DELETE", sub)
        async def delete_setting(s3: S3Request) -> web.StreamResponse:
            await s3.swift_ok("POST", s3.bucket, headers={header: ""})
            return web.Response(status=204)

