"""S3's errors: an `S3Error` raised anywhere in the front end becomes S3's XML document.

`<Error><Code/><Message/><Resource/><RequestId/></Error>`, the request id being the request's
transaction id. `from_swift` names the S3 error for a Swift sub-request's failure.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from swiftlite.proxy.s3 import xml


class S3Error(Exception):
    def __init__(self, code: str, status: int, message: str, **extra: Any) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.code = code
        self.status = status
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}

    def response(self, resource: str, request_id: str) -> web.Response:
        root = xml.Element("Error")
        xml.sub(root, "Code", self.code)
        xml.sub(root, "Message", self.message)
        for k, v in self.extra.items():
            xml.sub(root, k, str(v))
        xml.sub(root, "Resource", resource)
        xml.sub(root, "RequestId", request_id)
        headers = {"x-amz-request-id": request_id, **self.headers}
        if self.status == 304 or self.status // 100 == 1:
            return web.Response(status=self.status, headers=headers)
        return web.Response(status=self.status, body=xml.dump(root), headers=headers,
                            content_type="application/xml")


def access_denied(message: str = "Access Denied") -> S3Error:
    return S3Error("AccessDenied", 403, message)


def no_such_bucket(bucket: str) -> S3Error:
    return S3Error("NoSuchBucket", 404, "The specified bucket does not exist",
                   BucketName=bucket)


def no_such_key(key: str) -> S3Error:
    return S3Error("NoSuchKey", 404, "The specified key does not exist.", Key=key)


def invalid_argument(message: str, name: str = "", value: str = "") -> S3Error:
    extra = {"ArgumentName": name, "ArgumentValue": value} if name else {}
    return S3Error("InvalidArgument", 400, message, **extra)


def malformed_xml() -> S3Error:
    return S3Error("MalformedXML", 400, "The XML you provided was not well-formed or did "
                   "not validate against our published schema.")


def not_implemented(what: str = "A header you provided implies functionality that is not "
                    "implemented.") -> S3Error:
    return S3Error("NotImplemented", 501, what)


def precondition_failed(condition: str = "If-Match") -> S3Error:
    return S3Error("PreconditionFailed", 412,
                   "At least one of the pre-conditions you specified did not hold",
                   Condition=condition)


def from_swift(status: int, bucket: str | None = None, key: str | None = None,
               body: bytes = b"") -> S3Error:
    """The S3 error for a Swift answer `status` to a request about `bucket` (and `key`)."""
    if status in (401, 403):
        return access_denied()
    if status == 404:
        if key is not None:
            return no_such_key(key)
        return no_such_bucket(bucket or "")
    if status == 412:
        return precondition_failed()
    if status == 304:
        return S3Error("NotModified", 304, "Not Modified")
    if status == 413:
        return S3Error("EntityTooLarge", 400,
                       "Your proposed upload exceeds the maximum allowed object size.")
    if status == 416:
        return S3Error("InvalidRange", 416, "The requested range is not satisfiable")
    if status == 422:
        return S3Error("BadDigest", 400,
                       "The Content-MD5 you specified did not match what we received.")
    if status == 409:
        return S3Error("OperationAborted", 409, "A conflicting conditional operation is "
                       "currently in progress against this resource. Please try again.")
    if status == 411:
        return S3Error("MissingContentLength", 411,
                       "You must provide the Content-Length HTTP header.")
    if status == 499:
        return S3Error("IncompleteBody", 400, "You did not provide the number of bytes "
                       "specified by the Content-Length HTTP header")
    if status == 429 or status == 498:
        return S3Error("SlowDown", 503, "Please reduce your request rate.")
    if 400 <= status < 500:
        reason = body.decode("utf-8", "replace").strip()[:200]
        return invalid_argument(reason or f"Request refused ({status})")
    return S3Error("ServiceUnavailable", 503, "Please reduce your request rate.")
