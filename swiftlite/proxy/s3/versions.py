"""ListObjectVersions (`GET /bucket?versions`) for buckets without versioning.

An unversioned bucket holds one version of each key, whose id is `null`: the listing is the
bucket's plain listing (the same Swift container listing as ListObjects) with each object
shown as its own latest version. `key-marker` resumes after that key; a `version-id-marker`
names a version of the marker key, and as a key has no version after its only one, listing
resumes after the key all the same.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.bucket import owner, xml_response
from swiftlite.proxy.s3.context import S3Request, iso_ms
from swiftlite.proxy.s3.errors import invalid_argument
from swiftlite.proxy.s3.listing import (
    encoder,
    encoding_type,
    etag_of,
    max_keys_of,
    swift_rows,
)

NULL = "null"


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
    rows, truncated = await swift_rows(s3, prefix, delimiter, key_marker, max_keys)

    root = xml.root("ListVersionsResult")
    xml.sub(root, "Name", s3.bucket)
    xml.sub(root, "Prefix", enc(prefix))
    xml.sub(root, "KeyMarker", enc(key_marker))
    xml.sub(root, "VersionIdMarker", vid_marker or "")
    if truncated and rows:
        last = rows[-1].get("name", rows[-1].get("subdir"))
        xml.sub(root, "NextKeyMarker", enc(last))
        if "name" in rows[-1]:
            xml.sub(root, "NextVersionIdMarker", NULL)
    xml.sub(root, "MaxKeys", max_keys)
    if delimiter:
        xml.sub(root, "Delimiter", enc(delimiter))
    if encode:
        xml.sub(root, "EncodingType", "url")
    xml.sub(root, "IsTruncated", "true" if truncated else "false")
    for row in rows:
        if "subdir" in row:
            continue
        v = xml.sub(root, "Version")
        xml.sub(v, "Key", enc(row["name"]))
        xml.sub(v, "VersionId", NULL)
        xml.sub(v, "IsLatest", "true")
        xml.sub(v, "LastModified", iso_ms(row["last_modified"]))
        xml.sub(v, "ETag", etag_of(row))
        xml.sub(v, "Size", row["bytes"])
        owner(v, s3)
        xml.sub(v, "StorageClass", "STANDARD")
    for row in rows:
        if "subdir" in row:
            xml.sub(xml.sub(root, "CommonPrefixes"), "Prefix", enc(row["subdir"]))
    return xml_response(root)
