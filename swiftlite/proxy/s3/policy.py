"""Bucket policies: PutBucketPolicy, GetBucketPolicy, DeleteBucketPolicy,
GetBucketPolicyStatus, and what a request is as the policy language sees it.

The document (checked by policy_lang.parse, at most 20 KiB) is kept with its container as
sysmeta, base64 in chunks of CHUNK characters (a backend header must stay under the servers'
8 KiB field limit), exactly as the client sent it: GetBucketPolicy answers the same bytes.
`decide` is what the authorization point (access.authorize) asks of every decision: the
bucket policy's answer (DENY, ALLOW or None) for the caller doing one action on the bucket or
one of its keys, with the request's condition keys (`s3:x-amz-acl`, `s3:prefix`,
`aws:SourceIp`, `s3:ExistingObjectTag/<key>`, ...) filled in. A Deny refuses whoever asks,
the bucket's owner included, except Get/Put/DeleteBucketPolicy, which the owner keeps.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.request import AUTHENTICATED, answer_of, sub_request
from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import access, ownership, tagging, xml
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import small_body, xml_response
from swiftlite.proxy.s3.errors import S3Error, access_denied
from swiftlite.proxy.s3.policy_lang import (
    ANONYMOUS,
    MAX_POLICY,
    Policy,
    Principal,
    arn_of,
    evaluate,
    is_public,
    malformed_policy,
    may_allow,
    norm_key,
    parse,
    parse_stored,
)
from swiftlite.proxy.s3.routes import route
from swiftlite.proxy.s3.sigv4 import V4

__all__ = ["evaluate", "parse", "stored_policy", "decide"]

POLICY_HEADER = "X-Container-Sysmeta-S3api-Policy-"  # + chunk number, from 0
CHUNK = 4096
# Enough chunks for the largest policy in base64 (20 KiB * 4/3); every one is written on
# each change, empty ones deleted, so no chunk of an older, longer policy is left behind.
CHUNKS = -(-(MAX_POLICY * 4 // 3 + 4) // CHUNK)


def encode(text: str) -> dict[str, str]:
    data = base64.b64encode(text.encode("utf-8", "surrogateescape")).decode("ascii")
    return {f"{POLICY_HEADER}{i}": data[i * CHUNK:(i + 1) * CHUNK] for i in range(CHUNKS)}


_PREFIX = POLICY_HEADER.lower()


def decode(headers: Mapping[str, str]) -> str | None:
    """The stored policy text among a container's headers (any case), None if none. Runs
    for every request on a bucket: one pass over its few metadata items."""
    chunks = {}
    for k, v in headers.items():
        lk = k.lower()
        if v and lk.startswith(_PREFIX):
            chunks[lk[len(_PREFIX):]] = v
    if not chunks:
        return None
    data = "".join(chunks.get(str(i), "") for i in range(CHUNKS))
    try:
        return base64.b64decode(data, validate=True).decode("utf-8", "surrogateescape")
    except (binascii.Error, ValueError):
        return None


def stored_policy(meta: Mapping[str, str], bucket: str) -> Policy | None:
    """The bucket's policy from its container's metadata (ContainerInfo.meta or a HEAD's
    headers), parsed once per worker and text."""
    text = decode(meta)
    return None if text is None else parse_stored(text, bucket)


def _policy_text(info: Any) -> str | None:
    return decode(info.meta)


def no_such_policy(bucket: str | None) -> S3Error:
    return S3Error("NoSuchBucketPolicy", 404, "The bucket policy does not exist",
                   BucketName=bucket or "")


def _flags(meta: Mapping[str, str]) -> dict[str, bool]:
    return access.public_block({k.lower(): v for k, v in meta.items()})


def block_public_policy(meta: Mapping[str, str]) -> bool:
    """Whether the bucket's public access block has BlockPublicPolicy set."""
    return bool(_flags(meta).get("BlockPublicPolicy", False))


def restrict_public_buckets(meta: Mapping[str, str]) -> bool:
    """Whether the bucket's public access block has RestrictPublicBuckets set: a public
    policy then grants nothing to anyone but the bucket's owner."""
    return bool(_flags(meta).get("RestrictPublicBuckets", False))


# ---- the routes ----------------------------------------------------------------------------

@route("bucket", "PUT", "policy")
async def put_bucket_policy(s3: S3Request) -> web.StreamResponse:
    try:
        body = await small_body(s3, MAX_POLICY)
    except S3Error as exc:
        if exc.code == "MaxMessageLengthExceeded":
            raise malformed_policy("Policies must be no larger than 20 KB") from None
        raise
    if not body.strip():
        raise malformed_policy("Missing required field Statement")
    doc = parse(body, s3.bucket or "")
    head = await s3.swift_ok("HEAD", s3.bucket)
    if is_public(doc) and block_public_policy(head.headers):
        raise access_denied()
    await s3.swift_ok("POST", s3.bucket, headers=encode(doc.text))
    return web.Response(status=204)


@route("bucket", "GET", "policy")
async def get_bucket_policy(s3: S3Request) -> web.StreamResponse:
    head = await s3.swift_ok("HEAD", s3.bucket)
    text = decode(head.headers)
    if text is None:
        raise no_such_policy(s3.bucket)
    return web.Response(status=200, body=text.encode("utf-8", "surrogateescape"),
                        content_type="application/json")


@route("bucket", "DELETE", "policy")
async def delete_bucket_policy(s3: S3Request) -> web.StreamResponse:
    await s3.swift_ok("HEAD", s3.bucket)
    await s3.swift_ok("POST", s3.bucket, headers=dict.fromkeys(encode(""), ""))
    return web.Response(status=204)


def acl_is_public(headers: Mapping[str, str]) -> bool:
    """Whether the bucket's ACL grants anything to everyone or to every signed-in user (a
    bucket made through Swift: whether its container ACL lets anyone read)."""
    acl = access.Acl.load(headers.get(access.BUCKET_ACL))
    if acl is None:
        return ".r:*" in headers.get("X-Container-Read", "")
    return ownership.is_public(acl)


@route("bucket", "GET", "policyStatus")
async def get_bucket_policy_status(s3: S3Request) -> web.StreamResponse:
    head = await s3.swift_ok("HEAD", s3.bucket)
    public = is_public(stored_policy(head.headers, s3.bucket or "")) or \
        acl_is_public(head.headers)
    root = xml.root("PolicyStatus")
    xml.sub(root, "IsPublic", "true" if public else "false")
    return xml_response(root)


# ---- a request as the policy sees it -------------------------------------------------------

def principal_of(s3: S3Request) -> Principal:
    if s3.ident is None:
        return ANONYMOUS
    return Principal(s3.ident.account, s3.ident.user)


def copy_source(value: str) -> str:
    """`x-amz-copy-source` as policies compare it: `bucket/key`, no leading slash, decoded,
    without `?versionId=`."""
    return unquote(value.split("?", 1)[0]).lstrip("/")


def request_context(s3: S3Request) -> dict[str, Any]:
    """The condition keys of a request (normalised names, see policy_lang.norm_key)."""
    request = s3.request
    now = time.time()
    ctx: dict[str, Any] = {
        "aws:currenttime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "aws:epochtime": str(int(now)),
        "aws:securetransport": "true" if request.secure else "false",
        "aws:principaltype": "Anonymous" if s3.ident is None else "User",
    }
    if request.remote:
        ctx["aws:sourceip"] = request.remote
    if s3.ident is not None:
        ctx["aws:username"] = s3.ident.user.partition(":")[2] or s3.ident.user
        ctx["aws:userid"] = s3.ident.user
        ctx["aws:principalaccount"] = s3.ident.account
    for name, ctx_key in (("Referer", "aws:referer"), ("User-Agent", "aws:useragent")):
        if name in request.headers:
            ctx[ctx_key] = request.headers[name]
    for name, value in request.headers.items():
        low = name.lower()
        if low.startswith("x-amz-"):
            ctx["s3:" + low] = copy_source(value) if low == "x-amz-copy-source" else value
    tagging = request.headers.get("x-amz-tagging")
    if tagging is not None:
        pairs = [p.partition("=") for p in tagging.split("&") if p]
        for k, _, v in pairs:
            ctx[norm_key("s3:RequestObjectTag/" + unquote(k))] = unquote(v)
        ctx["s3:requestobjecttagkeys"] = [unquote(k) for k, _, _ in pairs]
    q = s3.query
    for name in ("prefix", "delimiter", "max-keys"):
        if name in q:
            ctx["s3:" + name] = q[name]
    if "versionId" in q:
        ctx["s3:versionid"] = q["versionId"]
    if s3.auth is not None:
        ctx["s3:signatureversion"] = "AWS4-HMAC-SHA256" if isinstance(s3.auth, V4) else "AWS"
        presigned = "X-Amz-Signature" in q or "Signature" in q
        ctx["s3:authtype"] = "REST-QUERY-STRING" if presigned else "REST-HEADER"
    return ctx


def needs_object_tags(doc: Policy) -> bool:
    return any(c.key.startswith("s3:existingobjecttag/")
               for st in doc.statements for c in st.conditions)


def with_object_tags(ctx: dict[str, Any], tags: list[tuple[str, str]]) -> dict[str, Any]:
    for k, v in tags:
        ctx[norm_key("s3:ExistingObjectTag/" + k)] = v
    return ctx


# ---- the decider the authorization point consults ------------------------------------------

# Policy management the bucket's owner keeps whatever its policy says, so that no policy
# can lock its owner out of changing it (as AWS keeps it for the account's root user).
OWNER_KEEPS = frozenset(("s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"))


async def object_head(s3: S3Request, account: str, bucket: str,
                      key: str) -> web.StreamResponse | None:
    """The object's HEAD answer with the owner's rights (None: no such object), once per
    request and object (the version the request names, when it is about that object)."""
    memo = s3.extra.setdefault("policy_heads", {})
    found = memo.get((account, bucket, key), False)
    if found is not False:
        return found
    path = "/v1/" + quote(account, safe="") + "/" + quote(bucket, safe="") + "/" + \
        quote(key, safe="/")
    vid = s3.query.get("versionId") if (bucket, key) == (s3.bucket, s3.key) else None
    sub = sub_request(s3.request, "HEAD", path, CIMultiDict(),
                      query="" if not vid else "version-id=" + quote(vid, safe=""))
    sub[AUTHENTICATED] = access.owner_rights(s3, account)
    resp = await answer_of(s3.app, sub)
    close_answer(resp)
    out = resp if resp.status // 100 == 2 else None
    memo[(account, bucket, key)] = out
    return out


async def decide(ask: access.Ask) -> str | None:
    """A bucket policy's say on one decision of access.authorize: "deny", "allow" or None.
    Cheap for a bucket without a policy: the container's info is cached."""
    s3: S3Request = ask.s3
    bucket, key = ask.bucket, ask.key
    if bucket is None:
        return None
    info = await s3.proxy.container_info(s3.request, ask.account, bucket)
    if info.status // 100 != 2:
        return None
    text = info.derived(_policy_text)  # looked for once per cached info, not per request
    doc = None if text is None else parse_stored(text, bucket)
    if doc is None:
        return None
    if ask.is_owner and ask.action in OWNER_KEEPS:
        return None
    ctx = request_context(s3)
    if key is not None and needs_object_tags(doc):
        head = await object_head(s3, ask.account, bucket, key)
        if head is not None:
            with_object_tags(ctx, tagging.decode_tags(head.headers.get(tagging.OBJECT_TAGS)))
    who = principal_of(s3)
    answer = evaluate(doc, who, ask.action, arn_of(bucket, key), ctx)
    if answer == "Deny":
        return access.DENY
    if answer is None and key is None and ask.action == "s3:DeleteObject" and \
            may_allow(doc, who, ask.action):
        # DeleteObjects: let it in if some key may be deleted; obj.delete_objects then
        # authorizes each key (a refused one is that key's AccessDenied).
        answer = "Allow"
    if answer == "Allow" and restrict_public_buckets(info.meta) and is_public(doc) and \
            not ask.is_owner:
        answer = None  # RestrictPublicBuckets: a public policy grants outsiders nothing
    if answer is None and key is not None and ask.action in ("s3:GetObject",
                                                             "s3:GetObjectVersion"):
        # Reading a key that does not exist is answered 404 to whoever may list it there
        # (with `s3:prefix` the key), else 403: the policy's ListBucket decides which.
        listing = dict(ctx, **{"s3:prefix": key})
        if evaluate(doc, who, "s3:ListBucket", arn_of(bucket), listing) == "Allow" and \
                await object_head(s3, ask.account, bucket, key) is None:
            answer = "Allow"
    return None if answer is None else access.ALLOW


access.DECIDERS.append(decide)
