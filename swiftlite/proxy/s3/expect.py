"""`Expect: 100-continue`: an S3 request refused before its body is sent.

A client that announces a body with `Expect: 100-continue` waits for the 100 before sending
it. The proxy asks the pipeline first (common/runtime/server.py `make_app(expect=...)`), and this is
S3's answer: the request's signature and credentials are checked from its headers (as every
S3 request's are), the write is authorized (access.check_request), and a write into a bucket
that does not exist is NoSuchBucket. So a
refused upload costs the client one round trip, not its body. Whatever passes here is
judged again, in full, once the body comes.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.common.http import HTTPError, txid
from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import access
from swiftlite.proxy.s3.errors import S3Error, from_swift, no_such_bucket


async def refusal(api, request: web.Request) -> web.StreamResponse | None:
    """The S3 error answer for a request refused from its headers alone, else None."""
    resource = request.path
    try:
        s3 = await api.context(request)  # S3Api.context: signature and credentials
        resource = "/" + "/".join(p for p in (s3.bucket, s3.key) if p)
        if s3.bucket is not None and s3.key is not None and request.method in ("PUT", "POST"):
            await access.check_request(s3, "object")  # the bucket's owner; may the caller?
            head = await s3.swift("HEAD", s3.bucket)
            close_answer(head)
            if head.status == 404:
                raise no_such_bucket(s3.bucket)
    except S3Error as exc:
        resp = exc.response(resource, txid(request))
    except HTTPError as exc:
        resp = from_swift(exc.status).response(resource, txid(request))
    else:
        return None
    resp.headers["x-amz-request-id"] = txid(request)
    return resp
