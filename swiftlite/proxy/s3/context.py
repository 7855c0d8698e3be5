"""One S3 request being served: who asks, which bucket and key, and the Swift sub-requests
made for it (sent down the pipeline as that user, see request.AUTHENTICATED)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import txid
from swiftlite.common.runtime.aiohttp_seams import request_state
from swiftlite.proxy.auth import Identity
from swiftlite.proxy.request import (
    ALLOW_RESERVED,
    AUTHENTICATED,
    BACKEND_GET_HEADERS,
    BACKEND_PUT_HEADERS,
    answer_of,
    sub_request,
)
from swiftlite.proxy.response import BodyResponse, close_answer
from swiftlite.proxy.s3.errors import S3Error, from_swift, no_such_bucket

# Request headers an S3 client sends that a Swift sub-request takes as they are.
PASSED = ("content-type", "content-encoding", "content-disposition", "content-language",
          "cache-control", "expires")


_PLAIN = re.compile(r"[A-Za-z0-9_.~-]+")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_.~/-]+")


def _quoted(name: str, safe: str) -> str:
    """quote(name, safe), without its cost for the names it leaves as they are."""
    if (_PLAIN_PATH if safe else _PLAIN).fullmatch(name):
        return name
    return quote(name, safe=safe)


@dataclass
class S3Request:
    request: web.Request
    app: Any  # the rest of the pipeline
    proxy: Any
    ident: Identity | None
    account: str
    bucket: str | None
    key: str | None
    query: dict[str, str]
    owner_name: str
    auth: Any = None  # sigv4.V4 / sigv2.V2, None when anonymous
    signing_key: bytes | None = None
    conf: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Who the Swift sub-requests run as when not the caller: the bucket owner's rights,
    # once access.authorize allowed a non-owner (None: the caller, `ident`).
    acting: Identity | None = None

    @property
    def request_id(self) -> str:
        return txid(self.request)

    def path(self, bucket: str | None = None, key: str | None = None,
             account: str | None = None) -> str:
        out = "/v1/" + _quoted(account or self.account, "")
        if bucket is not None:
            out += "/" + _quoted(bucket, "")
            if key is not None:
                out += "/" + _quoted(key, "/")
        return out

    async def swift(self, method: str, bucket: str | None = None, key: str | None = None,
                    headers: Any = None, body: Any = None, query: str = "",
                    reserved: bool = False, backend: dict[str, str] | None = None,
                    account: str | None = None) -> web.StreamResponse:
        """A Swift request as this S3 request's caller (into `account`, default the
        bucket's); an HTTPError raised on the way is its answer too (so callers look at
        one status)."""
        sub = sub_request(self.request, method, self.path(bucket, key, account),
                          CIMultiDict(headers or {}), body, query=query)
        state = request_state(sub)
        state[AUTHENTICATED] = self.acting or self.ident
        if backend:
            state[BACKEND_PUT_HEADERS if method == "PUT" else BACKEND_GET_HEADERS] = backend
        if reserved:
            state[ALLOW_RESERVED] = True
        return await answer_of(self.app, sub)

    async def swift_ok(self, method: str, bucket: str | None = None, key: str | None = None,
                       headers: Any = None, body: Any = None, query: str = "",
                       reserved: bool = False, err_key: str | None = None,
                       ok: tuple[int, ...] = ()) -> web.StreamResponse:
        """As `swift`, raising the S3 error for a failure (a 404 about `err_key` is
        NoSuchKey, else NoSuchBucket)."""
        resp = await self.swift(method, bucket, key, headers, body, query, reserved)
        if resp.status // 100 != 2 and resp.status not in ok:
            if resp.status == 404 and err_key is not None and bucket is not None:
                # No key, or no bucket at all? S3 names the bucket when it is missing.
                close_answer(resp)
                head = await self.swift("HEAD", bucket, reserved=reserved)
                close_answer(head)
                if head.status == 404:
                    raise no_such_bucket(bucket)
            raise await error_of(resp, self.bucket, err_key)
        return resp


async def error_of(resp: web.StreamResponse, bucket: str | None,
                   key: str | None) -> S3Error:
    body = b""
    if isinstance(resp, BodyResponse):
        close_answer(resp)
    elif isinstance(resp, web.Response) and resp.body is not None and \
            isinstance(resp.body, bytes):
        body = resp.body
    return from_swift(resp.status, bucket, key, body)


def http_date(ts: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(ts))


def iso_ms(swift_time: str) -> str:
    """A Swift listing's `2024-01-02T03:04:05.123456` as S3's `2024-01-02T03:04:06.000Z`:
    rounded up to the second, as the object's Last-Modified is, so a listing and a HEAD
    agree."""
    base, _, frac = swift_time.partition(".")
    if frac.strip("0"):
        try:
            up = datetime.fromisoformat(base) + timedelta(seconds=1)
        except ValueError:
            return f"{base}.{(frac + '000')[:3]}Z"
        base = up.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.000Z"
