"""`s3api`: S3 requests in, Swift sub-requests down the pipeline, S3 answers out.

A request is S3's when its Authorization header starts with `AWS4-HMAC-SHA256 ` or `AWS `,
when its query carries a presigned signature (`X-Amz-Signature`/`X-Amz-Algorithm`, or
`AWSAccessKeyId` with `Signature`), when its Host is `<bucket>.<storage_domain>` (with
`storage_domain` set), or (unless `anonymous_s3 = false`) when it is anonymous and its path
is not one of the proxy's own (`/v1`, `/auth`, `/info`, ...): S3's public objects. Anything
else goes on to Swift after a header lookup or two. Which account a bucket is in, and
whether the caller may do what it asks there, is access.py's (before every handler).

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
from swiftlite.proxy.s3 import (
    access,
    cors,
    encryption,
    expect,
    operations,
    postform,
    routes,
    sse_keys,
    versioned,
)
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.credentials import Credentials
from swiftlite.proxy.s3.errors import S3Error, from_swift
from swiftlite.proxy.s3.sigv2 import V2
from swiftlite.proxy.s3.sigv4 import V4, parse_query

AUTH_PREFIXES = ("AWS4-HMAC-SHA256 ", "AWS ")
# First path segments the proxy answers itself: never an anonymous S3 bucket. ("/" is S3's
# ListBuckets: anonymous, an empty list.)
SWIFT_ROOTS = frozenset(("v1", "v1.0", "auth", "info", "healthcheck", "metrics"))


assert operations  # imported for its routes


def unsigned_s3(request: web.Request, key: str | None = None) -> bool:
    """A CORS preflight (never signed) or a browser's POST form to a bucket (signed in its
    fields): their handlers (cors.py, postform.py) judge them, not the request's headers."""
    return request.method == "OPTIONS" or (key is None and postform.is_form(request))


class S3Api(Middleware):
    name = "s3api"
    plain_reads = HOOKS
    wants_lane = True  # an object GET/HEAD's sub-request takes the plain-read short cut
    # A signed request is S3's (a Swift client sends no Authorization: any one declines, as
    # only S3's prefixes would, at no call); an answer S3 encrypted, __call__ decrypts.
    plain_refused_by = ("Authorization",)
    plain_answer_marks = (sse_keys.SSE,)

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.storage_domain = conf.get_str("storage_domain", "").strip().lower().lstrip(".")
        self.host_suffix = "." + self.storage_domain if self.storage_domain else ""
        # Anonymous requests for buckets the registry does not know: this account's.
        self.anonymous_account = conf.get_str("anonymous_account", "").strip()
        self.anonymous_s3 = conf.get_bool("anonymous_s3", True)
        self.registry = None  # access.registry_of makes it once tempauth is known
        self.location = conf.get_str("location", "us-east-1")
        self.min_part_size = conf.get_size("s3_min_part_size", 5 * 1024 * 1024)
        self.max_parts = conf.get_int("s3_max_parts", 10000)
        self.max_buckets = conf.get_int("max_buckets", 1000)  # per account; 0: no limit
        self.creds = Credentials(None, proxy)
        self.kms = sse_keys.KeyStore.from_conf(conf)  # SSE-KMS keys (none by default)

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
        if auth is None and unsigned_s3(request) and request.path.startswith("/"):
            return request.path.split("/", 2)[1] not in SWIFT_ROOTS
        if self.anonymous_s3 and auth is None and \
                "X-Auth-Token" not in request.headers:
            first = request.path.split("/", 2)[1] if request.path.startswith("/") else ""
            return first not in SWIFT_ROOTS
        return False

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if not self.is_s3(request):
            resp = await self.app(request)
            if sse_keys.SSE in resp.headers and request.method in ("GET", "HEAD"):
                return await encryption.swift_read(self.kms, request, resp, self.app)
            return resp
        return await self.serve(request)

    async def expect(self, request: web.Request) -> web.StreamResponse | None:
        """Before an `Expect: 100-continue` request's 100: S3's refusal, if any (expect.py)."""
        return await expect.refusal(self, request) if self.is_s3(request) else None

    def admits_plain(self) -> bool:
        return bool(self.host_suffix)  # else plain_refused_by says it all

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        return None if self._vhost_bucket(request) is not None else request

    # ---- serving ------------------------------------------------------------------------------

    async def serve(self, request: web.Request) -> web.StreamResponse:
        resource = request.path
        s3 = None
        try:
            s3 = await self.context(request)
            resource = "/" + "/".join(p for p in (s3.bucket, s3.key) if p)
            resp = await self.dispatch(s3)
        except S3Error as exc:
            resp = exc.response(resource, txid(request))
        except HTTPError as exc:
            resp = from_swift(exc.status).response(resource, txid(request))
        if s3 is not None and "Origin" in request.headers:
            await cors.decorate(s3, resp)
        resp.headers["x-amz-request-id"] = txid(request)
        return resp

    async def context(self, request: web.Request) -> S3Request:
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
        if request.method == "OPTIONS" and "Origin" not in request.headers:
            # A CORS preflight names its origin; without one it is no request at all.
            raise S3Error("BadRequest", 400, "Insufficient information. Origin request "
                          "header needed.")
        pairs = parse_query(request.rel_url.raw_query_string)
        unsigned = unsigned_s3(request, key)
        auth = None if unsigned else self.authenticator(request, pairs, bucket)
        if self.creds.auth is None:
            self.creds.auth = self.proxy.auth
        if auth is None:
            # Which account the bucket is in, and what anonymous callers may do there, is
            # access.check_request's to say.
            ident, account, name, key_bytes = None, self.anonymous_account, "anonymous", None
        else:
            found = await self.creds.lookup(auth.access_key, request)
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
        if unsigned_s3(s3.request, s3.key):  # they authorize themselves (cors, postform)
            return await (cors.preflight if s3.request.method == "OPTIONS"
                          else postform.post_object)(s3)
        level = "service" if s3.bucket is None else "bucket" if s3.key is None else "object"
        handler = routes.handler_for(level, s3.request.method, s3.query)
        await access.check_request(s3, level)
        return versioned.null_answer(s3, await handler(s3))
