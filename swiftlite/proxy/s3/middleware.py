"""`s3api`: S3 requests in, Swift sub-requests down the pipeline, S3 answers out.

A request is S3's when its Authorization header starts with `AWS4-HMAC-SHA256 ` or `AWS `,
when its query carries a presigned signature (`X-Amz-Signature`/`X-Amz-Algorithm`, or
`AWSAccessKeyId` with `Signature`), when its Host is `<bucket>.<storage_domain>` (with
`storage_domain` set), or, with `anonymous_account` set, when it is anonymous and its path
is not one of the proxy's own (`/v1`, `/auth`, `/info`, ...). Anything else goes on to Swift
after a header lookup or two.

Sits after the gatekeeper (a client's sysmeta is gone before the S3 layer sets its own) and
before tempauth: after checking the signature with the user's password, each operation sends
Swift sub-requests down the rest of the pipeline carrying that user's Identity
(request.AUTHENTICATED), which tempauth takes as it would a token of that user's. So ACLs,
quotas, rate limits, versioning and SLOs treat S3 requests as the same user's Swift ones.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from swiftlite.common.http import HTTPError, txid
from swiftlite.proxy.pipeline import HOOKS, Middleware
from swiftlite.proxy.request import ApiPath, decode_raw_path
from swiftlite.proxy.s3 import bucket as bucket_ops
from swiftlite.proxy.s3 import listing, multipart, tagging, versions
from swiftlite.proxy.s3 import obj as obj_ops
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.credentials import Credentials
from swiftlite.proxy.s3.errors import S3Error, access_denied, from_swift, not_implemented
from swiftlite.proxy.s3.sigv2 import V2
from swiftlite.proxy.s3.sigv4 import V4, parse_query

AUTH_PREFIXES = ("AWS4-HMAC-SHA256 ", "AWS ")
# First path segments the proxy answers itself: never an anonymous S3 bucket.
SWIFT_ROOTS = frozenset(("v1", "v1.0", "auth", "info", "healthcheck", "metrics", ""))
# Bucket and object sub-resources S3 has and this front end does not (yet).
UNSUPPORTED = frozenset((
    "policy", "cors", "lifecycle", "website", "logging", "notification",
    "replication", "encryption", "object-lock", "retention", "legal-hold", "accelerate",
    "requestPayment", "analytics", "inventory", "metrics", "intelligent-tiering",
    "ownershipControls", "publicAccessBlock", "torrent", "restore", "select",
    "policyStatus", "attributes"))


class S3Api(Middleware):
    name = "s3api"
    plain_reads = HOOKS
    wants_lane = True  # an object GET/HEAD's sub-request takes the plain-read short cut

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.storage_domain = conf.get_str("storage_domain", "").strip().lower().lstrip(".")
        self.host_suffix = "." + self.storage_domain if self.storage_domain else ""
        self.anonymous_account = conf.get_str("anonymous_account", "").strip()
        self.location = conf.get_str("location", "us-east-1")
        self.min_part_size = conf.get_size("s3_min_part_size", 5 * 1024 * 1024)
        self.max_parts = conf.get_int("s3_max_parts", 10000)
        self.creds = Credentials(None)

    def info(self) -> dict[str, Any]:
        return {"location": self.location, "min_part_size": self.min_part_size,
                "max_parts": self.max_parts,
                "storage_domain": self.storage_domain, "signature_versions": ["2", "4"]}

    # ---- telling S3 apart -------------------------------------------------------------------

    def _vhost_bucket(self, request: web.Request) -> str | None:
        if not self.host_suffix:
            return None
        host = request.headers.get("Host", "").lower().rsplit(":", 1)[0]
        if host.endswith(self.host_suffix) and len(host) > len(self.host_suffix):
            return host[:-len(self.host_suffix)]
        return None

    def is_s3(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization")
        if auth is not None and auth.startswith(AUTH_PREFIXES):
            return True
        qs = request.rel_url.raw_query_string
        if qs and ("X-Amz-" in qs or "Signature=" in qs):
            q = request.query
            if "X-Amz-Signature" in q or "X-Amz-Algorithm" in q or \
                    ("AWSAccessKeyId" in q and "Signature" in q):
                return True
        if self.host_suffix and self._vhost_bucket(request) is not None:
            return True
        if self.anonymous_account and auth is None and \
                "X-Auth-Token" not in request.headers:
            first = request.path.split("/", 2)[1] if request.path.startswith("/") else ""
            return first not in SWIFT_ROOTS
        return False

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if not self.is_s3(request):
            return await self.app(request)
        return await self.serve(request)

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        auth = request.headers.get("Authorization")
        if auth is not None and auth.startswith(AUTH_PREFIXES):
            return None
        if self.host_suffix and self._vhost_bucket(request) is not None:
            return None
        return request

    # ---- serving ------------------------------------------------------------------------------

    async def serve(self, request: web.Request) -> web.StreamResponse:
        resource = request.path
        try:
            s3 = self.context(request)
            resource = "/" + "/".join(p for p in (s3.bucket, s3.key) if p)
            resp = await self.dispatch(s3)
        except S3Error as exc:
            resp = exc.response(resource, txid(request))
        except HTTPError as exc:
            resp = from_swift(exc.status).response(resource, txid(request))
        resp.headers["x-amz-request-id"] = txid(request)
        return resp

    def context(self, request: web.Request) -> S3Request:
        try:
            path = decode_raw_path(request.raw_path)
        except HTTPError:
            raise S3Error("InvalidURI", 400, "Couldn't parse the specified URI.") from None
        bucket = self._vhost_bucket(request) if self.host_suffix else None
        if bucket is not None:
            key = path[1:] or None
        else:
            _, _, rest = path.partition("/")
            b, sep, k = rest.partition("/")
            bucket, key = b or None, (k or None) if sep else None
        if bucket is not None and ("\x00" in bucket or bucket.startswith(".")):
            raise S3Error("InvalidBucketName", 400, "The specified bucket is not valid.",
                          BucketName=bucket)
        pairs = parse_query(request.rel_url.raw_query_string)
        auth = self.authenticator(request, pairs, bucket)
        if self.creds.auth is None:
            self.creds.auth = self.proxy.auth
        if auth is None:
            if not self.anonymous_account:
                raise access_denied()
            ident, account, name, key_bytes = None, self.anonymous_account, "anonymous", None
        else:
            found = self.creds.lookup(auth.access_key)
            if found is None:
                raise S3Error("InvalidAccessKeyId", 403, "The AWS Access Key Id you provided "
                              "does not exist in our records.",
                              AWSAccessKeyId=auth.access_key)
            secret, ident = found
            key_bytes = auth.verify(secret)
            account, name = self.creds.account_of(ident), ident.user
        return S3Request(request, self.lane, self.proxy, ident, account, bucket, key,
                         {k: v for k, v in reversed(pairs)}, name, auth, key_bytes, self)

    def authenticator(self, request: web.Request, pairs: list[tuple[str, str]],
                      bucket: str | None) -> V4 | V2 | None:
        auth = request.headers.get("Authorization", "")
        names = {k for k, _ in pairs}
        now = time.time()
        if auth.startswith("AWS4-HMAC-SHA256 ") or "X-Amz-Algorithm" in names or \
                "X-Amz-Signature" in names:
            return V4(request.method, request.raw_path, request.headers, pairs, now)
        if auth.startswith("AWS ") or ("AWSAccessKeyId" in names and "Signature" in names):
            raw = request.raw_path
            if bucket is not None and self._vhost_bucket(request) == bucket:
                raw = "/" + bucket + raw  # V2 signs the bucket as part of the resource
            return V2(request.method, raw, request.headers, pairs, now)
        return None

    async def dispatch(self, s3: S3Request) -> web.StreamResponse:
        method, q = s3.request.method, s3.query
        if any(k in UNSUPPORTED for k in q):
            raise not_implemented()
        if s3.bucket is None:
            if method in ("GET", "HEAD"):
                return await bucket_ops.list_buckets(s3)
            raise method_not_allowed(method)
        if s3.key is None:
            if "tagging" in q:
                if method == "PUT":
                    return await tagging.put_bucket_tagging(s3)
                if method == "GET":
                    return await tagging.get_bucket_tagging(s3)
                if method == "DELETE":
                    return await tagging.delete_bucket_tagging(s3)
                raise method_not_allowed(method)
            if method == "GET":
                if "location" in q:
                    return await bucket_ops.location(s3)
                if "uploads" in q:
                    return await multipart.list_uploads(s3)
                if "versioning" in q:
                    return await bucket_ops.versioning(s3)
                if "versions" in q:
                    return await versions.list_versions(s3)
                if "acl" in q:
                    return await bucket_ops.get_acl(s3)
                return await listing.list_objects(s3)
            if method == "HEAD":
                return await bucket_ops.head_bucket(s3)
            if method == "PUT":
                if "versioning" in q:
                    return await bucket_ops.put_versioning(s3)
                if "acl" in q:
                    return await bucket_ops.put_bucket_acl(s3)
                if q:
                    raise not_implemented()
                return await bucket_ops.create_bucket(s3)
            if method == "DELETE":
                if q:
                    raise not_implemented()
                return await bucket_ops.delete_bucket(s3)
            if method == "POST" and "delete" in q:
                return await obj_ops.delete_objects(s3)
            raise method_not_allowed(method)
        if "tagging" in q:
            raise not_implemented("Object tagging is not supported yet.")
        if method in ("GET", "HEAD"):
            if "uploadId" in q and method == "GET":
                return await multipart.list_parts(s3)
            if "acl" in q:
                return await bucket_ops.get_acl(s3)
            return await obj_ops.get_object(s3)
        if method == "PUT":
            if "acl" in q:
                raise not_implemented()
            if "uploadId" in q or "partNumber" in q:
                return await multipart.upload_part(s3)
            if "X-Amz-Copy-Source" in s3.request.headers:
                return await obj_ops.copy_object(s3)
            return await obj_ops.put_object(s3)
        if method == "DELETE":
            if "uploadId" in q:
                return await multipart.abort(s3)
            return await obj_ops.delete_object(s3)
        if method == "POST":
            if "uploads" in q:
                return await multipart.create(s3)
            if "uploadId" in q:
                return await multipart.complete(s3)
        raise method_not_allowed(method)


def method_not_allowed(method: str) -> S3Error:
    return S3Error("MethodNotAllowed", 405, "The specified method is not allowed against "
                   "this resource.", Method=method, ResourceType="OBJECT")
