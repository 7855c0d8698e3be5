"""GetObjectTorrent (`GET /bucket/key?torrent`): no torrent is kept for any object here, so
every object's torrent is missing (S3 itself keeps none for some objects)."""

from __future__ import annotations

from aiohttp import web

from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.errors import no_such_key
from swiftlite.proxy.s3.routes import route


@route("object", "GET", "torrent")
async def get_torrent(s3: S3Request) -> web.StreamResponse:
    await s3.swift_ok("HEAD", s3.bucket, s3.key, err_key=s3.key)  # the caller may read it
    raise no_such_key(s3.key or "")
