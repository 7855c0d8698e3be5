"""Tagging: Put/Get/DeleteBucketTagging and Put/Get/DeleteObjectTagging.

A bucket's tag set is kept with its container as sysmeta (JSON), which no Swift client can
set or see; S3's limits apply (at most 50 tags, keys up to 128 characters, values up to 256,
no key twice).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import parse_qsl, quote, urlencode

from aiohttp import web

from swiftlite.common.sysmeta import MUTABLE_SYSMETA
from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.bucket_settings import bucket_setting
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import parse_xml, small_body, xml_response
from swiftlite.proxy.s3.errors import S3Error, invalid_argument, malformed_xml
from swiftlite.proxy.s3.routes import route

BUCKET_TAGS = "X-Container-Sysmeta-S3api-Tagging"
MAX_TAGS = 50
MAX_KEY, MAX_VALUE = 128, 256


def invalid_tag(message: str) -> S3Error:
    return S3Error("InvalidTag", 400, message)


def parse_tagging(body: bytes, limit: int = MAX_TAGS) -> list[tuple[str, str]]:
    """The (key, value) pairs of a `<Tagging><TagSet><Tag>` document, checked."""
    doc = parse_xml(body)
    tagset = doc.find("TagSet") if doc.tag == "Tagging" else None
    if tagset is None:
        raise malformed_xml()
    tags: list[tuple[str, str]] = []
    for el in tagset.findall("Tag"):
        key, value = xml.text(el, "Key"), xml.text(el, "Value")
        if key is None or value is None:
            raise malformed_xml()
        if not key or len(key) > MAX_KEY:
            raise invalid_tag("The TagKey you have provided is invalid")
        if len(value) > MAX_VALUE:
            raise invalid_tag("The TagValue you have provided is invalid")
        if any(k == key for k, _ in tags):
            raise invalid_tag("Cannot provide multiple Tags with the same key")
        tags.append((key, value))
    if len(tags) > limit:
        raise invalid_tag(f"Object tags cannot be greater than {limit}" if limit != MAX_TAGS
                          else "Bucket tag count cannot be greater than 50")
    return tags


def tagging_document(tags: list[tuple[str, str]]) -> web.Response:
    root = xml.root("Tagging")
    tagset = xml.sub(root, "TagSet")
    for key, value in tags:
        tag = xml.sub(tagset, "Tag")
        xml.sub(tag, "Key", key)
        xml.sub(tag, "Value", value)
    return xml_response(root)


async def _store_bucket_tags(s3: S3Request, body: bytes) -> dict[str, str]:
    return {BUCKET_TAGS: json.dumps(parse_tagging(body))}


def _bucket_tags(meta: Mapping[str, str]) -> list[tuple[str, str]] | None:
    stored = meta.get(BUCKET_TAGS)
    if not stored:
        return None
    try:
        return [(str(k), str(v)) for k, v in json.loads(stored)]
    except (ValueError, TypeError):
        raise invalid_argument("The stored tag set is unreadable") from None


def _no_tag_set(bucket: str | None) -> S3Error:
    return S3Error("NoSuchTagSet", 404, "The TagSet does not exist", BucketName=bucket)


bucket_setting("tagging", BUCKET_TAGS, load=_bucket_tags, missing=_no_tag_set,
               document=tagging_document, store=_store_bucket_tags, put_status=204)


# ---- object tagging ---------------------------------------------------------------------------
# An object's (a version's) tags are mutable object sysmeta (common/sysmeta.py): set with the
# object (`x-amz-tagging`), changed by a patch POST that keeps its metadata, gone with it.

OBJECT_TAGS = MUTABLE_SYSMETA.title() + "S3-Tagging"
MAX_OBJECT_TAGS = 10


def encode_tags(tags: list[tuple[str, str]]) -> str:
    """Stored sorted by key, the order S3 answers them in."""
    return urlencode(sorted(tags), quote_via=quote)


def decode_tags(value: str | None) -> list[tuple[str, str]]:
    return parse_qsl(value, keep_blank_values=True) if value else []


def check_tags(tags: list[tuple[str, str]], limit: int = MAX_OBJECT_TAGS) -> None:
    seen: set[str] = set()
    for key, value in tags:
        if not key or len(key) > MAX_KEY:
            raise invalid_tag("The TagKey you have provided is invalid")
        if len(value) > MAX_VALUE:
            raise invalid_tag("The TagValue you have provided is invalid")
        if key in seen:
            raise invalid_tag("Cannot provide multiple Tags with the same key")
        seen.add(key)
    if len(tags) > limit:
        raise invalid_tag(f"Object tags cannot be greater than {limit}")


def header_tags(s3: S3Request) -> list[tuple[str, str]] | None:
    """The tags of `x-amz-tagging` (`k1=v1&k2`, as a query string), checked; None: none
    given."""
    raw = s3.request.headers.get("x-amz-tagging")
    if raw is None:
        return None
    try:
        tags = parse_qsl(raw, keep_blank_values=True)  # `k` alone: an empty value
    except ValueError:
        raise invalid_argument("The header 'x-amz-tagging' shall be encoded as UTF-8 then "
                               "URLEncoded URL query parameters without tag name "
                               "duplicates.", "x-amz-tagging", raw) from None
    check_tags(tags)
    return tags


def tag_count(value: str | None) -> int:
    return len(decode_tags(value))


def _version(s3: S3Request) -> tuple[str, dict[str, str]]:
    vid = s3.query.get("versionId")
    return ("version-id=" + quote(vid, safe="") if vid else ""), \
        ({"x-amz-version-id": vid} if vid else {})


async def _patch(s3: S3Request, value: str) -> dict[str, str]:
    query, out = _version(s3)
    resp = await s3.swift_ok("POST", s3.bucket, s3.key, headers={OBJECT_TAGS: value},
                             query=query, err_key=s3.key)
    if "X-Object-Version-Id" in resp.headers and not out:
        out["x-amz-version-id"] = resp.headers["X-Object-Version-Id"]
    return out


@route("object", "PUT", "tagging")
async def put_object_tagging(s3: S3Request) -> web.StreamResponse:
    tags = parse_tagging(await small_body(s3), limit=MAX_OBJECT_TAGS)
    return web.Response(status=200, headers=await _patch(s3, encode_tags(tags)))


@route("object", "DELETE", "tagging")
async def delete_object_tagging(s3: S3Request) -> web.StreamResponse:
    return web.Response(status=204, headers=await _patch(s3, ""))


@route("object", "GET", "tagging")
async def get_object_tagging(s3: S3Request) -> web.StreamResponse:
    query, out = _version(s3)
    head = await s3.swift_ok("HEAD", s3.bucket, s3.key, query=query, err_key=s3.key)
    resp = tagging_document(decode_tags(head.headers.get(OBJECT_TAGS)))
    vid = head.headers.get("X-Object-Version-Id")
    if vid:
        resp.headers["x-amz-version-id"] = vid
    resp.headers.update(out)
    return resp
