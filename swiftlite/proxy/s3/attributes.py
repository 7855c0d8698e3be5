"""GetObjectAttributes (`GET /bucket/key?attributes`, `x-amz-object-attributes: ETag,
Checksum,ObjectParts,StorageClass,ObjectSize`): an object's (or a version's) attributes
without its body.

The ETag, size and checksum come from one HEAD; ObjectParts, for a completed multipart
upload only, from its SLO manifest (parts.py), paged by `x-amz-max-parts` and
`x-amz-part-number-marker` (the number of the last part not wanted), with each part's
checksum when the upload had one.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import checksum, encryption, parts, versioned, xml
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.documents import xml_response
from swiftlite.proxy.s3.errors import S3Error, invalid_argument
from swiftlite.proxy.s3.obj import S3_ETAG, S3_PARTS
from swiftlite.proxy.s3.object_request import version_query
from swiftlite.proxy.s3.routes import route

KNOWN = frozenset(("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"))
MAX_PARTS = 1000


def _number(s3: S3Request, name: str, default: int) -> int:
    value = s3.request.headers.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise invalid_argument(f"Provided {name} not an integer or within integer range",
                               name, value)
    return int(value)


@route("object", "GET", "attributes")
async def get_object_attributes(s3: S3Request) -> web.StreamResponse:
    raw = s3.request.headers.get("x-amz-object-attributes", "")
    wanted = {a.strip() for a in raw.split(",") if a.strip()}
    if not wanted or wanted - KNOWN:
        raise S3Error("InvalidArgument", 400, "Invalid attribute name specified.",
                      ArgumentName="x-amz-object-attributes", ArgumentValue=raw)
    max_parts = min(_number(s3, "x-amz-max-parts", MAX_PARTS), MAX_PARTS)
    marker = _number(s3, "x-amz-part-number-marker", 0)
    vq = version_query(s3.query.get("versionId"))
    head = await s3.swift("HEAD", s3.bucket, s3.key, query=vq)
    close_answer(head)
    if head.status == 404:
        raise await versioned.not_found(s3, head, True)
    if head.status // 100 != 2:
        raise await error_of(head, s3.bucket, s3.key)
    encryption.check_key(s3, head.headers)  # an SSE-C object's facts need its key, as a GET
    h = head.headers
    out: dict[str, str] = {}
    if "Last-Modified" in h:
        out["Last-Modified"] = h["Last-Modified"]
    vid = h.get("X-Object-Version-Id")
    if vid:
        out["x-amz-version-id"] = vid
    root = xml.root("GetObjectAttributesResponse")
    if "ETag" in wanted:
        xml.sub(root, "ETag", (h.get(S3_ETAG) or h.get("ETag", "")).strip('"'))
    stored = checksum.parse_stored(h.get(checksum.SYSMETA))
    if "Checksum" in wanted and stored is not None:
        el = xml.sub(root, "Checksum")
        checksum.xml_members(el, stored)
    count = h.get(S3_PARTS)
    if "ObjectParts" in wanted and count:
        items = await parts.manifest(s3, vq) or []
        page = items[marker:marker + max_parts]
        sums = await parts.part_checksums(s3, page) if stored is not None else []
        el = xml.sub(root, "ObjectParts")
        xml.sub(el, "PartsCount", len(items))
        xml.sub(el, "PartNumberMarker", marker)
        xml.sub(el, "NextPartNumberMarker", marker + len(page))
        xml.sub(el, "MaxParts", max_parts)
        xml.sub(el, "IsTruncated", "true" if marker + len(page) < len(items) else "false")
        for number, item in enumerate(page, marker + 1):
            p = xml.sub(el, "Part")
            xml.sub(p, "PartNumber", number)
            xml.sub(p, "Size", item.get("bytes", 0))
            found = sums[number - marker - 1] if sums else None
            if found is not None and stored is not None and found[0] == stored[0]:
                xml.sub(p, checksum.member(found[0]), found[2])
    if "StorageClass" in wanted:
        xml.sub(root, "StorageClass", "STANDARD")
    if "ObjectSize" in wanted:
        xml.sub(root, "ObjectSize", h.get("Content-Length", "0"))
    return xml_response(root, headers=out)
