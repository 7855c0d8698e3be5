"""Buckets: ListBuckets, CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation, and the
read side of versioning and ACLs. A bucket is a container of the requester's account."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from aiohttp import web

from swiftlite.proxy.response import answer_body
from swiftlite.proxy.s3 import access, acl, ownership, usage, xml
from swiftlite.proxy.s3.context import S3Request, error_of, iso_ms
from swiftlite.proxy.s3.documents import (
    owner,
    parse_xml,
    small_body,
    uploads_container,
    xml_response,
)
from swiftlite.proxy.s3.errors import S3Error, access_denied, malformed_xml
from swiftlite.proxy.s3.routes import route

# S3's rule for new buckets: 3-63 of lowercase letters, digits, dots and hyphens, starting
# and ending with a letter or digit, no `..`, and not shaped like an IP address.
_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP = re.compile(r"\d+\.\d+\.\d+\.\d+")


def valid_new_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and ".." not in name and ".-" not in name and \
        "-." not in name and not _IP.fullmatch(name)


@route("service", "GET")
@route("service", "HEAD")
async def list_buckets(s3: S3Request) -> web.StreamResponse:
    root = xml.root("ListAllMyBucketsResult")
    if s3.ident is None:  # anonymous: owns no bucket
        xml.sub(root, "Buckets")
        return xml_response(root)
    owner(root, s3)
    buckets = xml.sub(root, "Buckets")
    page = usage.BucketPage(s3.query)
    marker = page.marker
    while True:
        resp = await s3.swift("GET", query=f"format=json&marker={quote(marker)}" +
                              page.swift_query())
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
            if not page.take(name):
                break
            b = xml.sub(buckets, "Bucket")
            xml.sub(b, "Name", name)
            xml.sub(b, "CreationDate", iso_ms(row.get("last_modified", "1970-01-01T00:00:00")))
        if page.done:
            break
        marker = rows[-1]["name"]
    page.finish(root)
    return xml_response(root)


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
    new_acl = acl.new_bucket_acl(s3)
    from swiftlite.proxy.s3 import lock  # lock.py builds on this module
    headers = {**acl.new_bucket_headers(new_acl), **ownership.create_headers(s3),
               **lock.create_headers(s3)}
    claimed = await access.claim_bucket(s3, name, new_acl)
    if claimed is None:
        return web.Response(status=200, headers={"Location": "/" + name})
    try:
        await usage.check_room(s3)
    except S3Error:
        if claimed:
            await access.release_bucket(s3, name)
        raise
    resp = await s3.swift("PUT", name, headers=headers)
    if resp.status // 100 != 2:
        if claimed:
            await access.release_bucket(s3, name)
        raise await error_of(resp, name, None)
    return web.Response(status=200, headers={"Location": "/" + name})


@route("bucket", "HEAD")
async def head_bucket(s3: S3Request) -> web.StreamResponse:
    head = await s3.swift_ok("HEAD", s3.bucket)
    out = web.Response(status=200, headers={"x-amz-bucket-region": s3.conf.location})
    if "read-stats" in s3.query:
        out.headers.update(usage.stats_headers(head, usage.max_buckets(s3)))
    return out


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
    await access.release_bucket(s3, s3.bucket or "")
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
    from swiftlite.proxy.s3 import lock  # lock.py builds on this module
    await lock.check_versioning(s3, status)
    await s3.swift_ok("POST", s3.bucket,
                      headers={"X-Versions-Enabled": str(status == "Enabled").lower()})
    return web.Response(status=200)
