"""Multipart uploads, kept as Swift objects in a hidden container per bucket.

An upload of `key` in `bucket` is, in the reserved container `\\x00mpu\\x00<bucket>` of the
same account: a marker object `\\x00<key>\\x00<upload id>` holding the object's future
headers (content type, metadata), and one object `\\x00<key>\\x00<upload id>\\x00<NNNNN>`
per part. Completing PUTs an SLO manifest of the chosen parts at `bucket/key` through the
pipeline (`?multipart-manifest=put`, so the SLO feature checks every part), with S3's ETag
(MD5 of the parts' binary MD5s, `-<count>`) in object sysmeta and in the container listing
(`s3_etag`), then drops the marker; the parts stay as the SLO's segments, deleted with it.

Reserved names are reached only by this feature's own sub-requests (request.ALLOW_RESERVED),
which the core treats as the owner's: so every operation first has the caller judged as a
Swift write to (or read of) the bucket itself.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from urllib.parse import quote, urlencode

from aiohttp import web

from swiftlite.common.http import HTTPError
from swiftlite.common.reserved import reserved_name, split_reserved
from swiftlite.common.sysmeta import OVERRIDE_ETAG
from swiftlite.proxy.request import AUTHORIZER, IDENTITY, sub_request
from swiftlite.proxy.response import answer_body
from swiftlite.proxy.s3 import (
    access,
    acl,
    checksum,
    completion,
    conditional,
    encryption,
    object_state,
    sse_headers,
    sse_keys,
    xml,
)
from swiftlite.proxy.s3.access import OBJECT_ACL
from swiftlite.proxy.s3.context import S3Request, error_of, iso_ms
from swiftlite.proxy.s3.documents import (
    owner,
    parse_xml,
    small_body,
    uploads_container,
    xml_response,
)
from swiftlite.proxy.s3.errors import (
    S3Error,
    access_denied,
    from_swift,
    invalid_argument,
    malformed_xml,
)
from swiftlite.proxy.s3.obj import (
    S3_ETAG,
    S3_PARTS,
    check_key,
    check_source,
    copy_source,
    copy_version,
    store,
)
from swiftlite.proxy.s3.object_request import copy_result, object_headers
from swiftlite.proxy.s3.routes import route

KEPT = ("content-type", "content-encoding", "content-disposition", "content-language",
        "cache-control", "expires")


def no_such_upload(upload_id: str) -> S3Error:
    return S3Error("NoSuchUpload", 404, "The specified upload does not exist. The upload ID "
                   "may be invalid, or the upload may have been aborted or completed.",
                   UploadId=upload_id)


def marker_name(key: str, upload_id: str) -> str:
    return reserved_name(key, upload_id)


def part_name(key: str, upload_id: str, number: int) -> str:
    return reserved_name(key, upload_id, f"{number:05d}")


async def judge(s3: S3Request, write: bool) -> None:
    """Raise unless the caller may write (or read) the bucket, as the core would judge a
    Swift request to it (404: NoSuchBucket)."""
    auth = next((mw for mw in s3.proxy.middleware if mw.name == "tempauth"), None)
    who = s3.acting or s3.ident  # the owner's rights where access.authorize granted them
    if who is None or auth is None:
        raise access_denied()
    sub = sub_request(s3.request, "HEAD", s3.path(s3.bucket))
    sub[IDENTITY] = await auth.grant_for(sub, who, s3.account)
    sub[AUTHORIZER] = auth
    target = s3.proxy.target(sub, s3.account, s3.bucket, None)
    try:
        await s3.proxy.authorize_container(sub, target, write=write)
    except HTTPError as exc:
        raise from_swift(exc.status, s3.bucket) from None


def _upload_id(s3: S3Request) -> str:
    upload_id = s3.query.get("uploadId", "")
    if not upload_id or not all(c in "0123456789abcdef" for c in upload_id) or \
            len(upload_id) != 32:
        raise no_such_upload(upload_id)
    return upload_id


async def _marker(s3: S3Request, upload_id: str) -> web.StreamResponse:
    head = await s3.swift("HEAD", uploads_container(s3.bucket or ""),
                          marker_name(s3.key or "", upload_id), reserved=True)
    if head.status == 404:
        raise no_such_upload(upload_id)
    if head.status // 100 != 2:
        raise await error_of(head, s3.bucket, s3.key)
    return head


async def _listing(s3: S3Request, prefix: str, marker: str = "",
                   limit: int = 10000) -> list[dict]:
    query = urlencode({"format": "json", "prefix": prefix, "marker": marker,
                       "limit": str(limit)}, quote_via=quote)
    resp = await s3.swift("GET", uploads_container(s3.bucket or ""), query=query,
                          reserved=True)
    if resp.status == 404:
        await answer_body(resp)
        return []
    if resp.status // 100 != 2:
        raise await error_of(resp, s3.bucket, None)
    return json.loads(await answer_body(resp) or b"[]")


async def _all_parts(s3: S3Request, upload_id: str) -> list[dict]:
    prefix = part_name(s3.key or "", upload_id, 0)[:-5]
    rows: list[dict] = []
    marker = ""
    while True:
        page = await _listing(s3, prefix, marker)
        rows += page
        if len(page) < 10000:
            return rows
        marker = page[-1]["name"]


@route("object", "POST", "uploads")
async def create(s3: S3Request) -> web.StreamResponse:
    key = s3.key or ""
    check_key(key)
    await judge(s3, write=True)
    headers = object_headers(s3)
    sse = await encryption.for_write(s3, s3.bucket or "", headers, multipart=True)
    headers.update(await acl.upload_headers(s3))  # the object's ACL, who initiated
    await object_state.on_write(s3, headers, final=False)
    choice = checksum.upload_choice(s3.request.headers)
    if choice:
        headers[checksum.UPLOAD_SYSMETA] = choice
    upload_id = secrets.token_hex(16)
    hidden = uploads_container(s3.bucket or "")
    resp = await s3.swift("PUT", hidden, reserved=True)
    if resp.status // 100 != 2:
        raise await error_of(resp, s3.bucket, None)
    headers["Content-Length"] = "0"
    await s3.swift_ok("PUT", hidden, marker_name(key, upload_id), headers, b"",
                      reserved=True)
    root = xml.root("InitiateMultipartUploadResult")
    xml.sub(root, "Bucket", s3.bucket)
    xml.sub(root, "Key", key)
    xml.sub(root, "UploadId", upload_id)
    out = xml_response(root, headers=checksum.create_headers(choice))
    if sse is not None:
        out.headers.update(sse.answer_headers())
    return out


def _part_number(s3: S3Request) -> int:
    value = s3.query.get("partNumber", "")
    if not value.isdigit() or not 1 <= int(value) <= s3.conf.max_parts:
        raise invalid_argument(f"Part number must be an integer between 1 and "
                               f"{s3.conf.max_parts}, inclusive", "partNumber", value)
    return int(value)


@route("object", "PUT", "uploadId")
@route("object", "PUT", "partNumber")
async def upload_part(s3: S3Request) -> web.StreamResponse:
    upload_id = _upload_id(s3)
    number = _part_number(s3)
    await judge(s3, write=True)
    marker = await _marker(s3, upload_id)
    sse = encryption.for_part(s3, marker.headers)
    hidden = uploads_container(s3.bucket or "")
    name = part_name(s3.key or "", upload_id, number)
    if "X-Amz-Copy-Source" in s3.request.headers:
        out = await _copy_part(s3, hidden, name, sse, number)
    else:
        choice = checksum.parse_choice(marker.headers.get(checksum.UPLOAD_SYSMETA))
        resp = await store(s3, hidden, name, object_headers(s3), reserved=True, sse=sse,
                           part=number, compute=choice[0] if choice else None)
        out = web.Response(status=200, headers={
            "ETag": '"' + resp.headers.get("ETag", "").strip('"') + '"',
            **checksum.echo(s3)})
    if sse is not None:
        out.headers.update(sse.answer_headers())
    return out


async def _copy_part(s3: S3Request, hidden: str, name: str, sse: sse_keys.Sse | None,
                     number: int) -> web.StreamResponse:
    src_bucket, src_key = copy_source(s3)
    src_account = await access.authorize_source(s3, src_bucket, src_key)
    head = await check_source(s3, src_bucket, src_key, src_account)
    headers = {"X-Copy-From": quote(f"/{src_bucket}/{src_key}"), "Content-Length": "0",
               "X-Fresh-Metadata": "true"}
    if src_account != s3.account:
        headers["X-Copy-From-Account"] = src_account
    rng = s3.request.headers.get("X-Amz-Copy-Source-Range")
    if rng is not None:
        size = int(head.headers.get("Content-Length", "0"))
        first, _, last = rng.removeprefix("bytes=").partition("-")
        if rng.startswith("bytes=") and first.isdigit() and last.isdigit() and \
                int(first) <= int(last) and int(last) >= size:
            raise S3Error("InvalidRange", 416, "The requested range is not satisfiable",
                          RangeRequested=rng, ActualObjectSize=size)
        if not rng.startswith("bytes=") or not first.isdigit() or not last.isdigit() or \
                int(first) > int(last):
            raise S3Error("InvalidArgument", 400, "The x-amz-copy-source-range value must be "
                          "of the form bytes=first-last where first and last are the "
                          "zero-based offsets of the first and last bytes to copy",
                          ArgumentName="x-amz-copy-source-range", ArgumentValue=rng)
        headers["Range"] = rng
    if sse is not None or encryption.encrypted(head.headers) or \
            sse_headers.customer_key(s3.request.headers, sse_keys.COPY_PREFIX):
        resp = await encryption.copy_part(s3, src_bucket, src_key, head, hidden, name,
                                          headers.get("Range"), sse, number, src_account)
    else:
        resp = await s3.swift("PUT", hidden, name, headers, reserved=True,
                              query=copy_version(s3))
    if resp.status // 100 != 2:
        raise await error_of(resp, src_bucket, src_key)
    return copy_result(resp, "CopyPartResult")


@route("object", "POST", "uploadId")
async def complete(s3: S3Request) -> web.StreamResponse:
    upload_id = _upload_id(s3)
    key = s3.key or ""
    await judge(s3, write=True)
    try:
        marker = await _marker(s3, upload_id)
    except S3Error as exc:
        # Completed already: the same answer again (a client's retry).
        done = await completion.completed(s3, upload_id)
        if done is None:
            raise exc from None
        return done
    sse = encryption.for_part(s3, marker.headers)
    doc = parse_xml(await small_body(s3, header_sums=False))
    if doc.tag != "CompleteMultipartUpload":
        raise malformed_xml()
    wanted: list[tuple[int, str]] = []
    choice = checksum.parse_choice(marker.headers.get(checksum.UPLOAD_SYSMETA))
    given: list[str | None] = []
    for el in doc.findall("Part"):
        number, etag = xml.text(el, "PartNumber"), xml.text(el, "ETag")
        if not number or not number.strip().isdigit() or etag is None:
            raise malformed_xml()
        if wanted and wanted[-1][0] == int(number):  # a part sent twice: the last one
            wanted.pop()
            given.pop()
        wanted.append((int(number), etag.strip().strip('"').lower()))
        given.append(xml.text(el, checksum.member(choice[0])) if choice else None)
    if not wanted:
        raise malformed_xml()
    if any(a[0] >= b[0] for a, b in zip(wanted, wanted[1:], strict=False)):
        raise S3Error("InvalidPartOrder", 400, "The list of parts was not in ascending "
                      "order. Parts must be ordered by part number.", UploadId=upload_id)
    stored = {split_reserved(r["name"])[-1]: r for r in await _all_parts(s3, upload_id)}
    hidden = uploads_container(s3.bucket or "")
    manifest = []
    md5s = b""
    for index, (number, etag) in enumerate(wanted):
        row = stored.get(f"{number:05d}")
        if row is None or row["hash"] != etag:
            raise S3Error("InvalidPart", 400, "One or more of the specified parts could not "
                          "be found.  The part may not have been uploaded, or the specified "
                          "entity tag may not match the part's entity tag.",
                          UploadId=upload_id, PartNumber=number, ETag=etag)
        if index < len(wanted) - 1 and row["bytes"] < s3.conf.min_part_size:
            raise S3Error("EntityTooSmall", 400, "Your proposed upload is smaller than the "
                          "minimum allowed object size.", ProposedSize=row["bytes"],
                          MinSizeAllowed=s3.conf.min_part_size, PartNumber=number,
                          ETag=etag)
        manifest.append({"path": f"/{hidden}/{row['name']}", "etag": etag,
                         "size_bytes": row["bytes"]})
        md5s += bytes.fromhex(etag)
    s3_etag = f"{hashlib.md5(md5s, usedforsecurity=False).hexdigest()}-{len(wanted)}"
    headers = {k: v for k, v in marker.headers.items()
               if k.lower() in KEPT or k.lower().startswith("x-object-meta-") or
               k.lower() == OBJECT_ACL.lower()}
    await object_state.on_complete(s3, marker, headers)
    object_sum = None
    if choice:
        names = [m["path"][len(hidden) + 2:] for m in manifest]
        value = checksum.complete(choice, s3.request.headers, given,
                                  await checksum.stored_of(s3, hidden, names),
                                  [m["size_bytes"] for m in manifest])
        object_sum = (choice[0], choice[1], value)
        headers[checksum.SYSMETA] = checksum.stored_value(choice[0], value, choice[1])
    headers[completion.UPLOAD_ID] = upload_id
    old_segments = await completion.replaced_segments(s3, key)
    headers[S3_ETAG] = s3_etag
    headers[S3_PARTS] = str(len(wanted))
    headers.update(encryption.upload_sysmeta(marker.headers))
    headers[OVERRIDE_ETAG] = f"s3_etag={s3_etag}"
    body = json.dumps(manifest).encode()
    headers["Content-Length"] = str(len(body))
    cond = await conditional.check_write(s3, key)
    headers.update(cond.headers)
    resp = await s3.swift("PUT", s3.bucket, key, headers, body,
                          query="multipart-manifest=put", reserved=True, backend=cond.backend)
    if resp.status // 100 != 2:
        raise cond.refused(resp) or await error_of(resp, s3.bucket, key)
    await answer_body(resp)
    await completion.drop(s3, old_segments, {m["path"] for m in manifest})
    # Parts uploaded but not chosen go; the marker last (the upload is then over).
    chosen = {f"{n:05d}" for n, _ in wanted}
    for suffix, row in stored.items():
        if suffix not in chosen:
            await s3.swift("DELETE", hidden, row["name"], reserved=True)
    await s3.swift("DELETE", hidden, marker_name(key, upload_id), reserved=True)
    root = xml.root("CompleteMultipartUploadResult")
    xml.sub(root, "Location", f"/{s3.bucket}/{key}")
    xml.sub(root, "Bucket", s3.bucket)
    xml.sub(root, "Key", key)
    xml.sub(root, "ETag", f'"{s3_etag}"')
    checksum.xml_members(root, object_sum)
    vid = resp.headers.get("X-Object-Version-Id")
    out = xml_response(root, headers={"x-amz-version-id": vid}
                       if vid and vid != "null" else None)
    if sse is not None:
        out.headers.update(sse.answer_headers())
    return out


@route("object", "DELETE", "uploadId")
async def abort(s3: S3Request) -> web.StreamResponse:
    upload_id = _upload_id(s3)
    await judge(s3, write=True)
    await _marker(s3, upload_id)
    hidden = uploads_container(s3.bucket or "")
    for row in await _all_parts(s3, upload_id):
        await s3.swift("DELETE", hidden, row["name"], reserved=True)
    await s3.swift("DELETE", hidden, marker_name(s3.key or "", upload_id), reserved=True)
    return web.Response(status=204)


def _max(s3: S3Request, name: str, default: int) -> int:
    value = s3.query.get(name)
    if value is None:
        return default
    if not value.isdigit():
        raise invalid_argument(f"Provided {name} not an integer or within integer range",
                               name, value)
    return min(int(value), default)


def _initiator(parent, s3: S3Request, who: str | None = None) -> None:
    el = xml.sub(parent, "Initiator")
    who = who or (s3.ident.user if s3.ident is not None else s3.account)
    xml.sub(el, "ID", who)
    xml.sub(el, "DisplayName", who)


@route("object", "GET", "uploadId")
async def list_parts(s3: S3Request) -> web.StreamResponse:
    upload_id = _upload_id(s3)
    await judge(s3, write=False)
    marker = await _marker(s3, upload_id)
    max_parts = _max(s3, "max-parts", 1000)
    after = s3.query.get("part-number-marker", "0")
    if not after.isdigit():
        raise invalid_argument("Invalid part-number-marker", "part-number-marker", after)
    prefix = part_name(s3.key or "", upload_id, 0)[:-5]
    rows = await _listing(s3, prefix, prefix + f"{int(after):05d}" if int(after) else "",
                          max_parts + 1)
    truncated = len(rows) > max_parts
    rows = rows[:max_parts]
    root = xml.root("ListPartsResult")
    xml.sub(root, "Bucket", s3.bucket)
    xml.sub(root, "Key", s3.key)
    xml.sub(root, "UploadId", upload_id)
    _initiator(root, s3, marker.headers.get(acl.INITIATOR))
    owner(root, s3, acl.upload_owner(marker.headers))
    xml.sub(root, "StorageClass", "STANDARD")
    xml.sub(root, "PartNumberMarker", int(after))
    numbers = [int(split_reserved(r["name"])[-1]) for r in rows]
    xml.sub(root, "NextPartNumberMarker", numbers[-1] if numbers else 0)
    xml.sub(root, "MaxParts", max_parts)
    xml.sub(root, "IsTruncated", "true" if truncated else "false")
    choice = checksum.parse_choice(marker.headers.get(checksum.UPLOAD_SYSMETA))
    sums = await checksum.stored_of(s3, uploads_container(s3.bucket or ""),
                                    [r["name"] for r in rows]) if choice else [None] * len(rows)
    if choice:
        xml.sub(root, "ChecksumAlgorithm", choice[0].upper())
        xml.sub(root, "ChecksumType", choice[1])
    for number, row, sum_ in zip(numbers, rows, sums, strict=True):
        p = xml.sub(root, "Part")
        xml.sub(p, "PartNumber", number)
        xml.sub(p, "LastModified", iso_ms(row["last_modified"]))
        xml.sub(p, "ETag", f'"{row["hash"]}"')
        xml.sub(p, "Size", row["bytes"])
        if sum_ is not None:
            xml.sub(p, checksum.member(sum_[0]), sum_[2])
    return xml_response(root)


@route("bucket", "GET", "uploads")
async def list_uploads(s3: S3Request) -> web.StreamResponse:
    await judge(s3, write=False)
    max_uploads = _max(s3, "max-uploads", 1000)
    prefix = s3.query.get("prefix", "")
    key_marker = s3.query.get("key-marker", "")
    id_marker = s3.query.get("upload-id-marker", "")
    uploads: list[tuple[str, str, str]] = []
    marker = reserved_name(key_marker, id_marker or "\U0010ffff") if key_marker else ""
    truncated = False
    while True:
        rows = await _listing(s3, "\x00" + prefix, marker)
        for row in rows:
            parts = split_reserved(row["name"])
            if len(parts) == 2:
                if len(uploads) == max_uploads:
                    truncated = True
                    break
                uploads.append((parts[0], parts[1], row["last_modified"]))
        if truncated or len(rows) < 10000:
            break
        marker = rows[-1]["name"]
    root = xml.root("ListMultipartUploadsResult")
    xml.sub(root, "Bucket", s3.bucket)
    xml.sub(root, "KeyMarker", key_marker)
    xml.sub(root, "UploadIdMarker", id_marker)
    xml.sub(root, "NextKeyMarker", uploads[-1][0] if truncated and uploads else "")
    xml.sub(root, "NextUploadIdMarker", uploads[-1][1] if truncated and uploads else "")
    if prefix:
        xml.sub(root, "Prefix", prefix)
    xml.sub(root, "MaxUploads", max_uploads)
    xml.sub(root, "IsTruncated", "true" if truncated else "false")
    initiators = await acl.initiators(s3, uploads_container(s3.bucket or ""),
                                      [marker_name(k, i) for k, i, _ in uploads])
    for (key, upload_id, when), who in zip(uploads, initiators, strict=True):
        u = xml.sub(root, "Upload")
        xml.sub(u, "Key", key)
        xml.sub(u, "UploadId", upload_id)
        _initiator(u, s3, who)
        owner(u, s3, who)
        xml.sub(u, "StorageClass", "STANDARD")
        xml.sub(u, "Initiated", iso_ms(when))
    return xml_response(root)
