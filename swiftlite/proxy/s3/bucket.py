"""Buckets: ListBuckets, CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation, and the
read side of versioning and ACLs. A bucket is a container of the requester's account."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from aiohttp import web

from swiftlite.common.reserved import reserved_name
from swiftlite.proxy.response import answer_body
from swiftlite.proxy.s3 import payload, xml
from swiftlite.proxy.s3.context import S3Request, error_of, iso_ms
from swiftlite.proxy.s3.errors import S3Error, access_denied, malformed_xml, not_implemented
from swiftlite.proxy.s3.routes import route

# S3's rule for new buckets: 3-63 of lowercase letters, digits, dots and hyphens, starting
# and ending with a letter or digit, no `..`, and not shaped like an IP address.
_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP = re.compile(r"\d+\.\d+\.\d+\.\d+")
PUBLIC_READ = ".r:*,.rlistings"
CANNED = {"private": "", "public-read": PUBLIC_READ, "public-read-write": PUBLIC_READ}


def valid_new_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and ".." not in name and ".-" not in name and \
        "-." not in name and not _IP.fullmatch(name)


def uploads_container(bucket: str) -> str:
    """The hidden container where a bucket's multipart uploads keep their parts."""
    return reserved_name("mpu", bucket)


def xml_response(el, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(status=status, body=xml.dump(el), headers=headers,
                        content_type="application/xml")


async def small_body(s3: S3Request, limit: int = xml.MAX_BODY,
                     header_sums: bool = True) -> bytes:
    """A request body meant as a document (XML), its signature and checksums checked."""
    mode = payload.payload_mode(s3.auth)
    length = payload.decoded_length(s3.request.headers, mode)
    if length is None:
        if s3.request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise S3Error("MissingContentLength", 411,
                          "You must provide the Content-Length HTTP header.")
        length = 0
    if length > limit:
        raise S3Error("MaxMessageLengthExceeded", 400, "Your request was too big.")
    return b"".join([c async for c in payload.body(s3.request, s3.auth, s3.signing_key,
                                                     length, header_sums=header_sums)])


def parse_xml(body: bytes):
    try:
        return xml.parse(body)
    except xml.BadXml:
        raise malformed_xml() from None


def owner(parent, s3: S3Request) -> None:
    el = xml.sub(parent, "Owner")
    xml.sub(el, "ID", s3.account)
    xml.sub(el, "DisplayName", s3.owner_name)


@route("service", "GET")
@route("service", "HEAD")
async def list_buckets(s3: S3Request) -> web.StreamResponse:
    if s3.ident is None:
        raise access_denied()
    root = xml.root("ListAllMyBucketsResult")
    owner(root, s3)
    buckets = xml.sub(root, "Buckets")
    marker = ""
    while True:
        resp = await s3.swift("GET", query=f"format=json&marker={quote(marker)}")
        if resp.status == 404:
            break
        if resp.status // 100 != 2:
            raise await error_of(resp, None, None)
        rows = json.loads(await answer_body(resp) or b"[]")
        if not rows:
            break
        for row in rows:
            name = row["name"]
            if name.startswith("\x00"):
                continue
            b = xml.sub(buckets, "Bucket")
            xml.sub(b, "Name", name)
            xml.sub(b, "CreationDate", iso_ms(row.get("last_modified", "1970-01-01T00:00:00")))
        marker = rows[-1]["name"]
    return xml_response(root)


def acl_headers(s3: S3Request) -> dict[str, str]:
    h = s3.request.headers
    if any(k.lower().startswith("x-amz-grant-") for k in h):
        raise not_implemented("Grant headers are not supported; use x-amz-acl.")
    canned = h.get("X-Amz-Acl")
    if canned is None:
        return {}
    if canned not in CANNED:
        raise not_implemented(f"The canned ACL {canned} is not supported.")
    return {"X-Container-Read": CANNED[canned]}


@route("bucket", "PUT")
async def create_bucket(s3: S3Request) -> web.StreamResponse:
    name = s3.bucket or ""
    if not valid_new_name(name):
        raise S3Error("InvalidBucketName", 400, "The specified bucket is not valid.",
                      BucketName=name)
    if s3.ident is None:
        raise access_denied()
    body = await small_body(s3)
    if body.strip():
        doc = parse_xml(body)
        if doc.tag != "CreateBucketConfiguration":
            raise malformed_xml()
        where = xml.text(doc, "LocationConstraint")
        if where and where != s3.conf.location:
            raise S3Error("InvalidLocationConstraint", 400,
                          "The specified location-constraint is not valid",
                          LocationConstraint=where)
    headers = acl_headers(s3)
    head = await s3.swift("HEAD", name)
    if head.status // 100 == 2 and s3.conf.location == "us-east-1":
        return web.Response(status=200, headers={"Location": "/" + name})  # S3's old rule
    if head.status // 100 == 2:
        raise S3Error("BucketAlreadyOwnedByYou", 409, "Your previous request to create the "
                      "named bucket succeeded and you already own it.", BucketName=name)
    if head.status in (401, 403):
        raise S3Error("BucketAlreadyExists", 409, "The requested bucket name is not "
                      "available.", BucketName=name)
    await s3.swift_ok("PUT", name, headers=headers)
    return web.Response(status=200, headers={"Location": "/" + name})


@route("bucket", "HEAD")
async def head_bucket(s3: S3Request) -> web.StreamResponse:
    await s3.swift_ok("HEAD", s3.bucket)
    return web.Response(status=200, headers={"x-amz-bucket-region": s3.conf.location})


@route("bucket", "DELETE")
async def delete_bucket(s3: S3Request) -> web.StreamResponse:
    resp = await s3.swift("DELETE", s3.bucket)
    if resp.status == 409:
        raise S3Error("BucketNotEmpty", 409, "The bucket you tried to delete is not empty",
                      BucketName=s3.bucket)
    if resp.status // 100 != 2:
        raise await error_of(resp, s3.bucket, None)
    # Parts of uploads never completed go with it (their container is ours, not the user's).
    await s3.swift("DELETE", uploads_container(s3.bucket or ""), reserved=True)
    return web.Response(status=204)


@route("bucket", "GET", "location")
async def location(s3: S3Request) -> web.StreamResponse:
    await s3.swift_ok("HEAD", s3.bucket)
    root = xml.root("LocationConstraint")
    if s3.conf.location != "us-east-1":
        root.text = s3.conf.location
    return xml_response(root)


@route("bucket", "GET", "versioning")
async def versioning(s3: S3Request) -> web.StreamResponse:
    head = await s3.swift_ok("HEAD", s3.bucket)
    root = xml.root("VersioningConfiguration")
    enabled = head.headers.get("X-Versions-Enabled")
    if enabled is not None:
        xml.sub(root, "Status", "Enabled" if enabled.lower() == "true" else "Suspended")
    return xml_response(root)


@route("bucket", "PUT", "versioning")
async def put_versioning(s3: S3Request) -> web.StreamResponse:
    """`Enabled` / `Suspended` as Swift's object versioning on / off (MFA delete: no)."""
    doc = parse_xml(await small_body(s3))
    status = xml.text(doc, "Status") if doc.tag == "VersioningConfiguration" else None
    if status not in ("Enabled", "Suspended") or \
            (xml.text(doc, "MfaDelete") or "Disabled") != "Disabled":
        raise malformed_xml()
    await s3.swift_ok("POST", s3.bucket,
                      headers={"X-Versions-Enabled": str(status == "Enabled").lower()})
    return web.Response(status=200)


ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


@route("bucket", "PUT", "acl")
async def put_bucket_acl(s3: S3Request) -> web.StreamResponse:
    """A canned `x-amz-acl`, or a policy document that is one: the owner's full control,
    with everyone's READ or not (public-read or private)."""
    headers = acl_headers(s3)
    body = await small_body(s3)
    if not headers:
        if not body.strip():
            raise malformed_xml()
        doc = parse_xml(body)
        if doc.tag != "AccessControlPolicy":
            raise malformed_xml()
        grants = set()
        for g in doc.iter("Grant"):
            grantee = g.find("Grantee")
            who = None if grantee is None else \
                (xml.text(grantee, "URI") or xml.text(grantee, "ID"))
            grants.add((who, xml.text(g, "Permission")))
        grants.discard((s3.account, "FULL_CONTROL"))
        if grants - {(ALL_USERS, "READ")}:
            raise not_implemented("Only the private and public-read ACLs are supported.")
        headers = {"X-Container-Read": CANNED["public-read" if grants else "private"]}
    await s3.swift_ok("POST", s3.bucket, headers=headers)
    return web.Response(status=200)


@route("bucket", "GET", "acl")
@route("bucket", "HEAD", "acl")
@route("object", "GET", "acl")
@route("object", "HEAD", "acl")
async def get_acl(s3: S3Request) -> web.StreamResponse:
    """The owner's full control, and everyone's read where the container is public."""
    head = await s3.swift_ok("HEAD", s3.bucket, s3.key, err_key=s3.key)
    root = xml.root("AccessControlPolicy")
    owner(root, s3)
    grants = xml.sub(root, "AccessControlList")

    def grant(kind: str, permission: str, who: str) -> None:
        g = xml.sub(grants, "Grant")
        grantee = xml.sub(g, "Grantee")
        grantee.set("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance")
        grantee.set("xsi:type", kind)
        if kind == "CanonicalUser":
            xml.sub(grantee, "ID", who)
            xml.sub(grantee, "DisplayName", s3.owner_name)
        else:
            xml.sub(grantee, "URI", who)
        xml.sub(g, "Permission", permission)
    grant("CanonicalUser", "FULL_CONTROL", s3.account)
    if s3.key is None and ".r:*" in head.headers.get("X-Container-Read", ""):
        grant("Group", "READ", ALL_USERS)
    return xml_response(root)
