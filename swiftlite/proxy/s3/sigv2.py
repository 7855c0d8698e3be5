"""AWS Signature Version 2: `Authorization: AWS <key>:<sig>` and presigned
`?AWSAccessKeyId=&Signature=&Expires=`.

The string to sign is the method, Content-MD5, Content-Type, the date (or, presigned, the
Expires time; empty when x-amz-date is sent), the sorted `x-amz-*` headers, and the resource:
the path as sent plus the sub-resources S3 names, sorted. Signed with HMAC-SHA1, base64.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from email.utils import mktime_tz, parsedate_tz

from swiftlite.proxy.s3.errors import S3Error, access_denied
from swiftlite.proxy.s3.sigv4 import MAX_SKEW, signature_mismatch

SUB_RESOURCES = frozenset((
    "acl", "cors", "delete", "lifecycle", "location", "logging", "notification",
    "partNumber", "policy", "requestPayment", "response-cache-control",
    "response-content-disposition", "response-content-encoding", "response-content-language",
    "response-content-type", "response-expires", "restore", "tagging", "torrent", "uploadId",
    "uploads", "versionId", "versioning", "versions", "website", "object-lock", "retention",
    "legal-hold", "encryption", "replication", "accelerate", "ownershipControls",
    "publicAccessBlock", "analytics", "inventory", "metrics", "intelligent-tiering"))


class V2:
    def __init__(self, method: str, raw_path: str, headers, pairs: list[tuple[str, str]],
                 now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.method, self.raw_path, self.headers, self.pairs = method, raw_path, headers, pairs
        query = dict(pairs)
        self.presigned = "Signature" in query and "AWSAccessKeyId" in query
        if self.presigned:
            self.access_key = query["AWSAccessKeyId"]
            self.signature = query["Signature"]
            expires = query.get("Expires", "")
            if not expires.isdigit():
                raise access_denied("Query-string authentication requires the Signature, "
                                    "Expires and AWSAccessKeyId parameters")
            if now > int(expires):
                raise access_denied("Request has expired")
            self.date_line = expires
        else:
            value = headers.get("Authorization", "")
            cred, sep, self.signature = value[4:].rpartition(":")
            if not sep or not cred:
                raise S3Error("InvalidArgument", 400, "AWS authorization header is invalid."
                              "  Expected AwsAccessKeyId:signature")
            self.access_key = cred.strip()
            stamp = headers.get("X-Amz-Date") or headers.get("Date")
            parsed = parsedate_tz(stamp or "")
            if parsed is None:
                raise access_denied("AWS authentication requires a valid Date or x-amz-date "
                                    "header")
            if abs(now - mktime_tz(parsed)) > MAX_SKEW:
                raise S3Error("RequestTimeTooSkewed", 403, "The difference between the "
                              "request time and the current time is too large.",
                              RequestTime=stamp, MaxAllowedSkewMilliseconds=MAX_SKEW * 1000)
            self.date_line = "" if "X-Amz-Date" in headers else headers.get("Date", "")

    def string_to_sign(self, path: str | None = None) -> str:
        amz: dict[str, list[str]] = {}
        for k, v in self.headers.items():
            lk = k.lower()
            if lk.startswith("x-amz-") and lk != "x-amz-date" or \
                    (lk == "x-amz-date" and not self.presigned):
                amz.setdefault(lk, []).append(" ".join(v.split()))
        amz_lines = "".join(f"{k}:{','.join(v)}\n" for k, v in sorted(amz.items()))
        subs = sorted((k, v) for k, v in self.pairs if k in SUB_RESOURCES)
        resource = path if path is not None else self.raw_path.split("?", 1)[0]
        if subs:
            resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in subs)
        return "\n".join((self.method, self.headers.get("Content-MD5", ""),
                          self.headers.get("Content-Type", ""), self.date_line,
                          amz_lines + resource))

    def resources(self) -> list[str]:
        """The path as sent, and for a bucket alone also with (or without) the trailing
        slash, which clients differ on (botocore signs `/bucket/` for `/bucket`)."""
        path = self.raw_path.split("?", 1)[0]
        if path.count("/") == 1 and len(path) > 1:
            return [path, path + "/"]
        if path.count("/") == 2 and path.endswith("/"):
            return [path, path[:-1]]
        return [path]

    def verify(self, secret: str) -> None:
        given = self.signature.encode("utf-8", "surrogateescape")
        for path in self.resources():
            sts = self.string_to_sign(path).encode("utf-8", "surrogateescape")
            want = base64.b64encode(hmac.new(secret.encode(), sts, hashlib.sha1).digest())
            if hmac.compare_digest(want, given):
                return
        raise signature_mismatch(self.access_key)
