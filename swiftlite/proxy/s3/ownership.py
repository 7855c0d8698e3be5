"""Bucket ownership controls and the public access block: two small per-bucket settings kept
as container sysmeta, which access.py and acl.py read when they decide.

- Ownership controls (`x-amz-object-ownership` on CreateBucket, Put/Get/Delete
  BucketOwnershipControls): ObjectWriter (a new object is its writer's), BucketOwnerPreferred
  (an object written with `bucket-owner-full-control` is the bucket owner's),
  BucketOwnerEnforced (ACLs are off: every object is the bucket owner's, only the owner and
  policies grant, and a request setting any ACL but the owner's full control is refused). A
  bucket without the setting answers OwnershipControlsNotFoundError, and acts as ObjectWriter.
- Public access block (Put/Get/DeletePublicAccessBlock): BlockPublicAcls refuses a request
  that would set a public ACL (one granting AllUsers or AuthenticatedUsers), IgnorePublicAcls
  makes such grants count for nothing, RestrictPublicBuckets and BlockPublicPolicy are for
  bucket policies (policy.py reads them with `public_block`).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from swiftlite.proxy.s3 import documents, xml
from swiftlite.proxy.s3.access import (
    ALL_USERS,
    AUTH_USERS,
    BUCKET_ACL,
    OWNERSHIP,
    PUBLIC_BLOCK,
    Acl,
    public_block,
)
from swiftlite.proxy.s3.errors import S3Error, access_denied, invalid_argument, malformed_xml
from swiftlite.proxy.s3.routes import route

MODES = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")
FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")


def create_headers(s3: Any) -> dict[str, str]:
    """CreateBucket's `x-amz-object-ownership`, as the new container's sysmeta."""
    mode = s3.request.headers.get("x-amz-object-ownership")
    if mode is None:
        return {}
    if mode not in MODES:
        raise invalid_argument("Invalid x-amz-object-ownership header", "x-amz-object-ownership",
                               mode)
    if mode == "BucketOwnerEnforced" and s3.request.headers.get("x-amz-acl", "private") \
            not in ("private", "bucket-owner-full-control"):
        raise S3Error("InvalidBucketAclWithObjectOwnership", 400, "Bucket cannot have ACLs "
                      "set with ObjectOwnership's BucketOwnerEnforced setting")
    return {OWNERSHIP: mode}


async def bucket_meta(s3: Any) -> dict[str, str]:
    """The request's bucket's metadata (lowercased names), NoSuchBucket if it has none."""
    info = await s3.proxy.container_info(s3.request, s3.account, s3.bucket)
    if info.status == 404:
        from swiftlite.proxy.s3.errors import no_such_bucket
        raise no_such_bucket(s3.bucket or "")
    return {k.lower(): v for k, v in info.meta.items()}


def mode_of(meta: dict[str, str]) -> str:
    return meta.get(OWNERSHIP.lower()) or "ObjectWriter"


def is_public(acl: Acl) -> bool:
    return any(kind == "group" and who in (ALL_USERS, AUTH_USERS)
               for kind, who, _ in acl.grants)


def check_new_acl(meta: dict[str, str], acl: Acl | None, explicit: bool,
                  bucket_owner: str = "", canned: str | None = None) -> None:
    """Refuse an ACL the bucket's settings do not allow (`explicit`: the request named it;
    `canned`: its `x-amz-acl`, if any)."""
    if acl is None:
        return
    if explicit and mode_of(meta) == "BucketOwnerEnforced" and \
            not owner_full_control(acl, bucket_owner, canned):
        raise S3Error("AccessControlListNotSupported", 400, "The bucket does not allow ACLs")
    if is_public(acl) and public_block(meta).get("BlockPublicAcls"):
        raise access_denied()


def owner_full_control(acl: Acl, bucket_owner: str, canned: str | None) -> bool:
    """Whether an ACL is the one BucketOwnerEnforced still accepts: the canned
    `bucket-owner-full-control`, or grants (headers or a document) that say the same, full
    control to the bucket owner and at most to the ACL's owner beside it. A canned `private`
    is refused even where it means the same (S3 does so: ACLs are off)."""
    if canned is not None:
        return canned.strip() == "bucket-owner-full-control"
    if not bucket_owner or ("id", bucket_owner, "FULL_CONTROL") not in acl.grants:
        return False
    return all(kind == "id" and perm == "FULL_CONTROL" and who in (bucket_owner, acl.owner)
               for kind, who, perm in acl.grants)


# ---- ownership controls --------------------------------------------------------------------

@route("bucket", "GET", "ownershipControls")
async def get_ownership(s3: Any) -> web.StreamResponse:
    meta = await bucket_meta(s3)
    mode = meta.get(OWNERSHIP.lower())
    if not mode:
        raise S3Error("OwnershipControlsNotFoundError", 404, "The bucket ownership controls "
                      "were not found", BucketName=s3.bucket)
    root = xml.root("OwnershipControls")
    xml.sub(xml.sub(root, "Rule"), "ObjectOwnership", mode)
    return documents.xml_response(root)


@route("bucket", "PUT", "ownershipControls")
async def put_ownership(s3: Any) -> web.StreamResponse:
    doc = documents.parse_xml(await documents.small_body(s3))
    rules = doc.findall("Rule") if doc.tag == "OwnershipControls" else []
    if len(rules) != 1:
        raise malformed_xml()
    mode = (xml.text(rules[0], "ObjectOwnership") or "").strip()
    if mode not in MODES:
        raise malformed_xml()
    if mode == "BucketOwnerEnforced":
        # (A bucket with no ACL stored has its owner's private one: nothing to refuse.)
        current = Acl.load((await bucket_meta(s3)).get(BUCKET_ACL.lower()))
        if current is not None and \
                any(not (k == "id" and w == current.owner) for k, w, _ in current.grants):
            raise S3Error("InvalidBucketAclWithObjectOwnership", 400, "Bucket cannot have "
                          "ACLs set with ObjectOwnership's BucketOwnerEnforced setting")
    await s3.swift_ok("POST", s3.bucket, headers={OWNERSHIP: mode})
    return web.Response(status=200)


@route("bucket", "DELETE", "ownershipControls")
async def delete_ownership(s3: Any) -> web.StreamResponse:
    await bucket_meta(s3)
    await s3.swift_ok("POST", s3.bucket, headers={OWNERSHIP: ""})
    return web.Response(status=204)


# ---- public access block -------------------------------------------------------------------

@route("bucket", "GET", "publicAccessBlock")
async def get_public_block(s3: Any) -> web.StreamResponse:
    meta = await bucket_meta(s3)
    if not meta.get(PUBLIC_BLOCK.lower()):
        raise S3Error("NoSuchPublicAccessBlockConfiguration", 404, "The public access block "
                      "configuration was not found", BucketName=s3.bucket)
    flags = public_block(meta)
    root = xml.root("PublicAccessBlockConfiguration")
    for name in FLAGS:
        xml.sub(root, name, "true" if flags.get(name) else "false")
    return documents.xml_response(root)


@route("bucket", "PUT", "publicAccessBlock")
async def put_public_block(s3: Any) -> web.StreamResponse:
    doc = documents.parse_xml(await documents.small_body(s3))
    if doc.tag != "PublicAccessBlockConfiguration":
        raise malformed_xml()
    flags: dict[str, bool] = {}
    for name in FLAGS:
        value = xml.text(doc, name)
        if value is None:
            continue
        value = value.strip().lower()
        if value not in ("true", "false"):
            raise malformed_xml()
        flags[name] = value == "true"
    await s3.swift_ok("POST", s3.bucket, headers={
        PUBLIC_BLOCK: json.dumps(flags, separators=(",", ":"), sort_keys=True)})
    return web.Response(status=200)


@route("bucket", "DELETE", "publicAccessBlock")
async def delete_public_block(s3: Any) -> web.StreamResponse:
    await bucket_meta(s3)
    await s3.swift_ok("POST", s3.bucket, headers={PUBLIC_BLOCK: ""})
    return web.Response(status=204)
