"""ListObjectVersions (`GET /bucket?versions`) from Swift's `?versions` container listing.

Swift's object versioning lists every version of each name, newest first, with its
`version_id` (`null` for an object written while versioning was off, which is all of an
unversioned bucket's) and `is_latest`; a delete marker is a version of the deleted type.
`key-marker` resumes after that key, and with `version-id-marker` after that version of it
(Swift's `version_marker`); `null` names the last version a key can have, so listing
resumes after the key.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.context import S3Request, iso_ms
from swiftlite.proxy.s3.documents import owner
from swiftlite.proxy.s3.errors import invalid_argument
from swiftlite.proxy.s3.listing import (
    common_prefixes,
    encoder,
    encoding_type,
    etag_of,
    max_keys_of,
    page_fields,
    swift_rows,
)
from swiftlite.proxy.s3.routes import route

NULL = "null"
DELETED = "application/x-deleted;swift_versions_deleted=1"


@route("bucket", "GET", "versions")
async def list_versions(s3: S3Request) -> web.StreamResponse:
    q = s3.query
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    key_marker = q.get("key-marker", "")
    vid_marker = q.get("version-id-marker")
    if vid_marker is not None and not key_marker:
        raise invalid_argument("A version-id marker cannot be specified without a key "
                               "marker.", "version-id-marker", vid_marker)
    max_keys = max_keys_of(q.get("max-keys"))
    encode = encoding_type(s3)
    enc = encoder(encode)
    rows, truncated = await swift_rows(s3, prefix, delimiter, key_marker, max_keys,
                                       versions=vid_marker or "")

    root = xml.root("ListVersionsResult")
    xml.sub(root, "Name", s3.bucket)
    xml.sub(root, "Prefix", enc(prefix))
    xml.sub(root, "KeyMarker", enc(key_marker))
    xml.sub(root, "VersionIdMarker", vid_marker or "")
    if truncated and rows:
        last = rows[-1].get("name", rows[-1].get("subdir"))
        xml.sub(root, "NextKeyMarker", enc(last))
        if "name" in rows[-1]:
            xml.sub(root, "NextVersionIdMarker", rows[-1].get("version_id", NULL))
    page_fields(root, max_keys, delimiter, encode, truncated, enc)
    for row in rows:
        if "subdir" in row:
            continue
        marker = row.get("content_type", "").startswith(DELETED)
        v = xml.sub(root, "DeleteMarker" if marker else "Version")
        xml.sub(v, "Key", enc(row["name"]))
        xml.sub(v, "VersionId", NULL if row.get("was_null") else row.get("version_id") or NULL)
        xml.sub(v, "IsLatest", "true" if row.get("is_latest", True) else "false")
        xml.sub(v, "LastModified", iso_ms(row["last_modified"]))
        if marker:
            owner(v, s3)
            continue
        xml.sub(v, "ETag", etag_of(row))
        xml.sub(v, "Size", row["bytes"])
        owner(v, s3)
        xml.sub(v, "StorageClass", "STANDARD")
    return common_prefixes(root, rows, enc)
