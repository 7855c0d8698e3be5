"""ListObjects (v1) and ListObjectsV2 (`?list-type=2`) from Swift container listings.

Swift lists names after a marker, with `prefix`, `delimiter` (rolled-up `subdir` rows) and a
limit: one more row than max-keys is asked for, to know whether the listing is truncated.
A marker inside a rolled-up prefix (`photos/` with delimiter `/`) resumes after every name
under that prefix, as S3 does, so a common prefix is never listed twice.
"""

from __future__ import annotations

import base64
import binascii
import json
from urllib.parse import quote, urlencode

from aiohttp import web

from swiftlite.proxy.response import answer_body
from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.context import S3Request, error_of, iso_ms
from swiftlite.proxy.s3.documents import owner, xml_response
from swiftlite.proxy.s3.errors import invalid_argument
from swiftlite.proxy.s3.routes import route

MAX_KEYS = 1000


def max_keys_of(value: str | None) -> int:
    if value is None:
        return MAX_KEYS
    try:
        n = int(value)
    except ValueError:
        raise invalid_argument("Provided max-keys not an integer or within integer range",
                               "max-keys", value) from None
    if n < 0:
        raise invalid_argument("Argument maxKeys must be an integer between 0 and "
                               "2147483647", "max-keys", value)
    return min(n, MAX_KEYS)


def swift_marker(marker: str, prefix: str, delimiter: str) -> str:
    """Where Swift resumes: past the whole common prefix a marker falls in."""
    if delimiter and marker.startswith(prefix):
        cut = marker.find(delimiter, len(prefix))
        if cut >= 0:
            return marker[:cut + len(delimiter)] + "\U0010ffff"
    return marker


def encoding_type(s3: S3Request) -> str | None:
    encode = s3.query.get("encoding-type")
    if encode is not None and encode != "url":
        raise invalid_argument("Invalid Encoding Method specified in Request",
                               "encoding-type", encode)
    return encode


def encoder(encode: str | None):
    def enc(value: str) -> str:
        return quote(value, safe="/") if encode else value
    return enc


async def swift_rows(s3: S3Request, prefix: str, delimiter: str, marker: str,
                     max_keys: int, versions: str | None = None) -> tuple[list[dict], bool]:
    """Up to max_keys container rows (names and rolled-up subdirs) after marker, and
    whether more follow; with `versions` (a version marker, maybe empty), every version."""
    rows: list[dict] = []
    if max_keys > 0:
        params = {"format": "json", "limit": str(max_keys + 1), "prefix": prefix,
                  "marker": swift_marker(marker, prefix, delimiter)}
        if delimiter:
            params["delimiter"] = delimiter
        if versions is not None:
            params["versions"] = ""
            if versions and versions != "null" and marker:
                params["version_marker"] = versions
        resp = await s3.swift("GET", s3.bucket, query=urlencode(params, quote_via=quote))
        if resp.status // 100 != 2:
            raise await error_of(resp, s3.bucket, None)
        rows = json.loads(await answer_body(resp) or b"[]")
    else:
        await s3.swift_ok("HEAD", s3.bucket)
    return rows[:max_keys], len(rows) > max_keys


def _xml_safe(text: str) -> bool:
    return all(c >= " " or c in "\t\n\r" for c in text)


def etag_of(row: dict) -> str:
    return '"' + (row.get("s3_etag") or row.get("hash", "")).strip('"') + '"'


@route("bucket", "GET")
async def list_objects(s3: S3Request) -> web.StreamResponse:
    q = s3.query
    v2 = q.get("list-type") == "2"
    if "list-type" in q and not v2:
        raise invalid_argument("Invalid List Type specified", "list-type", q["list-type"])
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    if delimiter and q.get("allow-unordered", "").lower() == "true":
        # Listings are always in order here; asking for unordered ones says no delimiter.
        raise invalid_argument("allow-unordered cannot be used with a delimiter",
                               "allow-unordered", q["allow-unordered"])
    max_keys = max_keys_of(q.get("max-keys"))
    encode = encoding_type(s3)
    if v2:
        token = q.get("continuation-token")
        if token is not None:
            try:
                marker = base64.urlsafe_b64decode(token.encode()).decode()
            except (binascii.Error, ValueError):
                raise invalid_argument("The continuation token provided is incorrect",
                                       "continuation-token", token) from None
        else:
            marker = q.get("start-after", "")
    else:
        marker = q.get("marker", "")
    rows, truncated = await swift_rows(s3, prefix, delimiter, marker, max_keys)
    enc = encoder(encode)

    root = xml.root("ListBucketResult")
    xml.sub(root, "Name", s3.bucket)
    # S3 leaves v1's Prefix as it is (but what XML cannot carry is still encoded).
    xml.sub(root, "Prefix", prefix if not v2 and _xml_safe(prefix) else enc(prefix))
    if v2:
        if "continuation-token" in q:
            xml.sub(root, "ContinuationToken", q["continuation-token"])
        if "start-after" in q:
            xml.sub(root, "StartAfter", enc(q["start-after"]))
        xml.sub(root, "KeyCount", len(rows))
    else:
        xml.sub(root, "Marker", enc(marker))
    last = rows[-1].get("name", rows[-1].get("subdir")) if rows else ""
    if truncated:
        if v2:
            xml.sub(root, "NextContinuationToken",
                    base64.urlsafe_b64encode(last.encode()).decode())
        elif delimiter:
            xml.sub(root, "NextMarker", enc(last))
    page_fields(root, max_keys, delimiter, encode, truncated, enc)
    show_owner = not v2 or q.get("fetch-owner") == "true"
    for row in rows:
        if "subdir" in row:
            continue
        c = xml.sub(root, "Contents")
        xml.sub(c, "Key", enc(row["name"]))
        xml.sub(c, "LastModified", iso_ms(row["last_modified"]))
        xml.sub(c, "ETag", etag_of(row))
        xml.sub(c, "Size", row["bytes"])
        if show_owner:
            owner(c, s3)
        xml.sub(c, "StorageClass", "STANDARD")
    return common_prefixes(root, rows, enc)


def page_fields(root, max_keys: int, delimiter: str, encode: bool, truncated: bool,
                enc) -> None:
    """What every listing result says of its page (objects' and versions' alike)."""
    xml.sub(root, "MaxKeys", max_keys)
    if delimiter:
        xml.sub(root, "Delimiter", enc(delimiter))
    if encode:
        xml.sub(root, "EncodingType", "url")
    xml.sub(root, "IsTruncated", "true" if truncated else "false")


def common_prefixes(root, rows: list[dict], enc) -> web.Response:
    """The page's subdirs as CommonPrefixes, after its entries; the finished answer."""
    for row in rows:
        if "subdir" in row:
            xml.sub(xml.sub(root, "CommonPrefixes"), "Prefix", enc(row["subdir"]))
    return xml_response(root)
