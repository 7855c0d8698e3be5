"""Objects: PutObject, GetObject, HeadObject, DeleteObject, CopyObject, DeleteObjects.

Metadata maps one to one (`x-amz-meta-*` <-> `X-Object-Meta-*`); ETags are quoted, and a
multipart upload's object shows S3's multipart ETag (kept in object sysmeta, multipart.py).
A PUT's body is checked as it streams (payload.py) and its end is held back until every
check passes, so a body that fails one is never stored.
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import header_names_pattern
from swiftlite.proxy.response import answer_body, close_answer
from swiftlite.proxy.s3 import (
    access,
    acl,
    checksum,
    completion,
    conditional,
    encryption,
    lock,
    object_state,
    parts,
    payload,
    sse_cipher,
    sse_headers,
    sse_keys,
    versioned,
    xml,
)
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.documents import parse_xml, small_body, xml_response
from swiftlite.proxy.s3.errors import (
    S3Error,
    from_swift,
    invalid_argument,
    malformed_xml,
    no_such_bucket,
)
from swiftlite.proxy.s3.object_request import (
    AMZ_META,
    copy_result,
    object_headers,
    version_query,
)
from swiftlite.proxy.s3.routes import route

S3_ETAG = "X-Object-Sysmeta-S3api-Etag"
S3_PARTS = "X-Object-Sysmeta-S3api-Parts"
META = "x-object-meta-"
# Bodies up to this size (the proxy's put_buffer_size default, which a Swift PUT buffers as
# well) are checked whole, then sent in one piece: their write's timestamp is then taken
# once the body is in, so of two writers of a key the one that finishes last wins, as in S3.
SMALL = 1024 * 1024
OVERRIDES = {"response-content-type": "Content-Type",
             "response-content-language": "Content-Language",
             "response-expires": "Expires", "response-cache-control": "Cache-Control",
             "response-content-disposition": "Content-Disposition",
             "response-content-encoding": "Content-Encoding"}
CONDITIONS = ("If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since")
MAX_KEY_BYTES = 1024
# Swift answer headers an S3 client is not shown.
DROPPED = frozenset(("x-timestamp", "x-static-large-object", "x-manifest-etag"))
ETAG_IS_AT = {"X-Backend-Etag-Is-At": S3_ETAG}
# The answer headers s3_headers renames (user metadata) or drops, found in one search.
_REWRITTEN = re.compile("^(?:" + "|".join(
    [re.escape(META) + "[^\n]*", "x-object-sysmeta-[^\n]*",
     *(re.escape(d) + "(?=\n|$)" for d in sorted(DROPPED))]) + ")",
    re.IGNORECASE | re.MULTILINE)
_SYSMETA = header_names_pattern((), ("x-object-sysmeta-",))
# A read's headers that get_object passes on or acts on (besides its signature): without
# any, and without a query, the read is a plain one (_plain_read).
_READ_EXTRAS = header_names_pattern(("Range", *CONDITIONS, "x-amz-checksum-mode"),
                                    ("x-amz-server-side-encryption",))


def check_key(key: str) -> None:
    if len(key.encode("utf-8", "surrogateescape")) > MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", 400, "Your key is too long")


def s3_headers(resp: web.StreamResponse) -> None:
    """A Swift object answer's headers in S3's form, in place."""
    h = resp.headers
    names = "\n".join(h)
    if _SYSMETA.search(names) is not None:  # tags, lock, expiry: all kept as sysmeta
        object_state.answer_headers(h)
    etag = h.get(S3_ETAG) or h.get("ETag", "")
    parts = h.get(S3_PARTS)
    meta, dropped = [], []
    for k in _REWRITTEN.findall(names):
        (meta if k[:len(META)].lower() == META else dropped).append(k)
    for k in meta:
        for item in h.popall(k, ()):
            h.add(AMZ_META + k[len(META):].lower(), item)
    for k in dropped:
        h.popall(k, None)
    if etag:
        h["ETag"] = '"' + etag.strip('"') + '"'
    if parts:
        h["x-amz-mp-parts-count"] = parts
    vid = h.popall("X-Object-Version-Id", None)
    if vid:
        h["x-amz-version-id"] = vid[0]


async def _versions_enabled(s3: S3Request) -> bool:
    head = await s3.swift("HEAD", s3.bucket)
    close_answer(head)
    return head.headers.get("X-Versions-Enabled", "").lower() == "true"


async def _bucket_missing(s3: S3Request) -> bool:
    head = await s3.swift("HEAD", s3.bucket)
    return head.status == 404


@route("object", "PUT")
async def put_object(s3: S3Request) -> web.StreamResponse:
    if "X-Amz-Copy-Source" in s3.request.headers:
        return await copy_object(s3)
    key = s3.key or ""
    check_key(key)
    headers = object_headers(s3)
    await object_state.on_write(s3, headers)
    sse = await encryption.for_write(s3, s3.bucket or "", headers)
    headers.update(await acl.object_create_headers(s3))
    cond = await conditional.check_write(s3, key)
    headers.update(cond.headers)
    resp = await store(s3, s3.bucket or "", key, headers, sse=sse, cond=cond)
    out = web.Response(status=200, headers={"ETag": '"' + resp.headers.get("ETag", "")
                                            .strip('"') + '"'})
    if sse is not None:
        out.headers.update(sse.answer_headers())
    if "X-Object-Version-Id" in resp.headers:
        out.headers["x-amz-version-id"] = resp.headers["X-Object-Version-Id"]
    out.headers.update(checksum.echo(s3))
    return out


async def store(s3: S3Request, bucket: str, key: str, headers: CIMultiDict[str],
                reserved: bool = False, sse: sse_keys.Sse | None = None,
                part: int | None = None, compute: str | None = None,
                cond: conditional.WriteConditions | None = None) -> web.StreamResponse:
    """PUT the request's body as `bucket/key` (encrypted with `sse`, as part `part` of its
    upload if given, under the write conditions `cond`); the Swift answer (2xx), else
    raise. Its additional checksums (and `compute`'s) are kept with it (checksum.py)."""
    mode = payload.payload_mode(s3.auth)
    length = payload.decoded_length(s3.request.headers, mode)
    if length is None:
        length = await payload.small_chunked(s3.request, SMALL)
    if length is None:
        raise S3Error("MissingContentLength", 411,
                      "You must provide the Content-Length HTTP header.")
    if length > s3.proxy.max_file_size:
        raise S3Error("EntityTooLarge", 400, "Your proposed upload exceeds the maximum "
                      "allowed object size.", ProposedSize=length,
                      MaxSizeAllowed=s3.proxy.max_file_size)
    if "Content-MD5" in s3.request.headers and sse is None:
        raw = payload._b64(s3.request.headers["Content-MD5"], "Content-MD5")
        headers["ETag"] = raw.hex()
    found: dict[str, str] = s3.extra.setdefault("checksums", {})
    body = payload.body(s3.request, s3.auth, s3.signing_key, length, found, compute)
    buffered = length <= SMALL or checksum.buffer_whole(s3.request.headers, length, compute)
    data = b"".join([c async for c in body]) if buffered else body
    checksum.keep(headers, s3.request.headers, found, compute)
    if sse is not None:
        data = sse_cipher.encrypt_body(data, sse, part, headers, s3.request.headers)
    headers["Content-Length"] = str(length)
    resp = await s3.swift("PUT", bucket, key, headers, data, reserved=reserved,
                          backend=cond.backend if cond else None)
    refused = cond.refused(resp) if cond else None
    if refused is not None:
        raise refused
    if resp.status // 100 != 2:
        if resp.status == 404 and not reserved:
            raise no_such_bucket(bucket)
        raise await error_of(resp, bucket, key)
    return resp


# What the image feature answers for a variant it will not make (middleware/image_variants.py).
IMAGE_REFUSALS = (400, 415, 422, 429)


@route("object", "GET")
@route("object", "HEAD")
async def get_object(s3: S3Request) -> web.StreamResponse:
    req = s3.request
    if not s3.query and _READ_EXTRAS.search("\n".join(req.headers)) is None:
        return await _plain_read(s3)
    headers: CIMultiDict[str] = CIMultiDict()
    for k in ("Range", *CONDITIONS):
        if k in req.headers:
            headers[k] = req.headers[k]
    query = ""
    part = s3.query.get("partNumber")
    if part is not None:
        if not part.isdigit() or not 1 <= int(part) <= 10000:
            raise invalid_argument("Part number must be an integer between 1 and 10000, "
                                   "inclusive", "partNumber", part)
        if "Range" in headers:
            raise invalid_argument("Cannot specify both Range header and partNumber query "
                                   "parameter", "partNumber", part)
        query = f"part-number={int(part)}"
    vq = version_query(s3.query.get("versionId"))
    # An image variant (middleware/image_variants.py) is asked for on the Swift read, which
    # S3's own signature (the query is in it) has authorized.
    image = s3.query.get("image")
    iq = f"image={quote(image, safe='')}" if image is not None else ""
    query = "&".join(p for p in (query, vq, iq) if p)
    overrides = {OVERRIDES[k]: v for k, v in s3.query.items() if k in OVERRIDES}
    if overrides and s3.ident is None:
        raise invalid_argument("Request specific response headers cannot be used for "
                               "anonymous GET requests.")
    # Conditions on a multipart upload's object are about its S3 ETag (then an SLO's).
    resp = await s3.swift(req.method, s3.bucket, s3.key, headers, query=query,
                          backend=ETAG_IS_AT if any(c in headers for c in CONDITIONS)
                          else None)
    status = resp.status
    if status == 304:
        close_answer(resp)
        out = web.Response(status=304)
        for k in ("ETag", "Last-Modified"):
            if k in resp.headers:
                out.headers[k] = resp.headers[k]
        s3_headers(out)
        return out
    parts.check_part(resp, part)
    if status // 100 != 2:
        if status == 404:
            raise await versioned.not_found(s3, resp, req.method == "GET")
        if image is not None and status in IMAGE_REFUSALS:
            # A variant that cannot be made keeps its status and reason (Swift's 422 is not
            # a bad digest here, nor its 429 a 503).
            reason = (await answer_body(resp)).decode("utf-8", "replace").strip()[:200]
            raise S3Error("InvalidImageVariant", status, reason or "Image variant refused")
        raise await error_of(resp, s3.bucket, s3.key)
    extra = await parts.checksum_headers(s3, resp, part, vq)
    resp = await encryption.on_read(s3, resp, query)
    s3_headers(resp)
    resp.headers.update(extra)
    resp.headers.update(overrides)
    resp.headers.setdefault("Accept-Ranges", "bytes")
    return resp


async def _plain_read(s3: S3Request) -> web.StreamResponse:
    """A GET/HEAD with no query and none of the headers a read may carry besides its
    signature (range, conditions, SSE-C key, checksum mode): most reads of an image service.
    What get_object does for those is skipped, not changed: nothing to pass down, no part,
    version, variant or overrides, no checksum headers; an answer without S3's encryption
    mark needs no key checked."""
    resp = await s3.swift(s3.request.method, s3.bucket, s3.key)
    status = resp.status
    if status // 100 != 2:
        if status == 404:
            raise await versioned.not_found(s3, resp, s3.request.method == "GET")
        raise await error_of(resp, s3.bucket, s3.key)
    if sse_keys.SSE in resp.headers:
        resp = await encryption.on_read(s3, resp, "")
    s3_headers(resp)
    resp.headers.setdefault("Accept-Ranges", "bytes")
    return resp


async def delete_one(s3: S3Request, key: str, vid: str | None = None) -> web.StreamResponse:
    """DELETE `key` (or one version of it); an S3 multipart upload's object takes its parts
    with it."""
    vq = version_query(vid)
    head = await s3.swift("HEAD", s3.bucket, key, query=vq)
    close_answer(head)
    ver = head.headers.get("X-Object-Version-Id")
    if head.status // 100 == 2 and S3_ETAG in head.headers and not vid and \
            (ver is None or (ver == "null" and not await _versions_enabled(s3))):
        # A version's parts stay with the version (a delete marker hides it).
        resp = await s3.swift("DELETE", s3.bucket, key, query="multipart-manifest=delete",
                              reserved=True)
        await answer_body(resp)
        return resp
    current = False
    if vid and vid != "null" and head.status // 100 == 2:
        now = await s3.swift("HEAD", s3.bucket, key)
        close_answer(now)
        current = now.headers.get("X-Object-Version-Id") == vid
    segments: list[str] = []
    if vid and vid != "null" and head.status // 100 == 2 and S3_ETAG in head.headers:
        # A multipart version deleted for good takes its parts (no other version has them).
        segments = [str(i["name"]) for i in await parts.manifest(s3, vq, key) or ()
                    if "name" in i]
    resp = await s3.swift("DELETE", s3.bucket, key, query=vq,
                          headers=lock.delete_headers(s3))
    if segments and resp.status // 100 == 2:
        await completion.drop(s3, segments, set())
    if vid and resp.status in (409, 412):
        # A concurrent delete of the same version got there first (a newer tombstone, or
        # the link already gone): the version is deleted, as this request wanted.
        close_answer(resp)
        resp = web.Response(status=204)
    if vid and versioned.is_marker(head):
        resp.headers[versioned.MARKER] = "true"
    if current and resp.status // 100 == 2:
        await versioned.promote(s3, key)
    return resp


@route("object", "DELETE")
async def delete_object(s3: S3Request) -> web.StreamResponse:
    vid = s3.query.get("versionId")
    refused = await conditional.check_delete(
        s3, s3.key or "", vid, conditional.DeleteConditions.from_headers(s3))
    if isinstance(refused, S3Error):
        raise refused
    if refused == conditional.NOTHING:
        return web.Response(status=204)
    resp = await delete_one(s3, s3.key or "", vid)
    if resp.status == 404 and await _bucket_missing(s3):
        raise no_such_bucket(s3.bucket or "")
    if resp.status // 100 != 2 and resp.status != 404:
        raise await error_of(resp, s3.bucket, s3.key)
    return web.Response(status=204, headers=versioned.delete_headers(resp, vid))


def copy_source(s3: S3Request) -> tuple[str, str]:
    value = s3.request.headers["X-Amz-Copy-Source"]
    value, _, extra = value.partition("?")
    if extra and not extra.startswith("versionId="):
        raise invalid_argument("Invalid copy source", "x-amz-copy-source", value)
    ref = unquote(value)
    if ref.startswith("/"):
        ref = ref[1:]
    bucket, _, key = ref.partition("/")
    if not bucket or not key or "\x00" in ref:
        raise invalid_argument("Copy Source must mention the source bucket and key: "
                               "sourcebucket/sourcekey", "x-amz-copy-source", value)
    return bucket, key


def copy_version(s3: S3Request) -> str:
    """The Swift query naming the copy source's version (`versionId=` in the header)."""
    _, _, extra = s3.request.headers["X-Amz-Copy-Source"].partition("?")
    return version_query(unquote(extra[len("versionId="):])) if extra else ""


def source_conditions(s3: S3Request) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for cond in CONDITIONS:
        v = s3.request.headers.get("X-Amz-Copy-Source-" + cond)
        if v is not None:
            out[cond] = v
    return out


async def check_source(s3: S3Request, bucket: str, key: str,
                       account: str | None = None) -> web.StreamResponse:
    """HEAD the copy's source with its conditions: any failed one is S3's 412."""
    conditions = source_conditions(s3)
    head = await s3.swift("HEAD", bucket, key, conditions, query=copy_version(s3),
                          backend=ETAG_IS_AT if conditions else None, account=account)
    if head.status in (304, 412):
        raise from_swift(412)
    if head.status == 404:
        close_answer(head)
        where = await s3.swift("HEAD", bucket)
        close_answer(where)
        if where.status == 404:
            raise no_such_bucket(bucket)
    if head.status // 100 != 2:
        raise await error_of(head, bucket, key)
    return head


async def copy_object(s3: S3Request) -> web.StreamResponse:
    src_bucket, src_key = copy_source(s3)
    check_key(s3.key or "")
    directive = s3.request.headers.get("X-Amz-Metadata-Directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise invalid_argument("Unknown metadata directive.", "x-amz-metadata-directive",
                               directive)
    if (src_bucket, src_key) == (s3.bucket, s3.key) and directive == "COPY" and \
            not sse_headers.requested(s3.request.headers, sse_keys.store_of(s3)):
        raise S3Error("InvalidRequest", 400, "This copy request is illegal because it is "
                      "trying to copy an object to itself without changing the object's "
                      "metadata, storage class, website redirect location or encryption "
                      "attributes.")
    src_account = await access.authorize_source(s3, src_bucket, src_key)
    source = await check_source(s3, src_bucket, src_key, src_account)
    if await encryption.copy_needed(s3, source):
        return await encryption.copy_object(s3, src_bucket, src_key, source, directive,
                                            src_account)
    headers = object_headers(s3) if directive == "REPLACE" else CIMultiDict()
    await object_state.on_copy(s3, source, headers)
    if directive == "REPLACE":
        headers["X-Fresh-Metadata"] = "true"
    headers.update(await acl.object_create_headers(s3))
    headers["X-Copy-From"] = quote(f"/{src_bucket}/{src_key}")
    if src_account != s3.account:
        headers["X-Copy-From-Account"] = src_account
    headers["Content-Length"] = "0"
    resp = await s3.swift("PUT", s3.bucket, s3.key, headers, query=copy_version(s3))
    if resp.status // 100 != 2:
        if resp.status == 404 and await _bucket_missing(s3):
            raise no_such_bucket(s3.bucket or "")
        raise await error_of(resp, s3.bucket, src_key)
    return copy_result(resp)


@route("bucket", "POST", "delete")
async def delete_objects(s3: S3Request) -> web.StreamResponse:
    doc = parse_xml(await small_body(s3))
    if doc.tag != "Delete":
        raise malformed_xml()
    quiet = (xml.text(doc, "Quiet") or "").strip().lower() == "true"
    keys, vids = [], []
    conds: dict[tuple[str, str | None], conditional.DeleteConditions] = {}
    for el in doc.findall("Object"):
        key = xml.text(el, "Key")
        if not key:
            raise malformed_xml()
        keys.append(key)
        vids.append(xml.text(el, "VersionId"))
        conds[key, vids[-1]] = conditional.DeleteConditions.from_xml(
            xml.text(el, "ETag"), xml.text(el, "LastModifiedTime"), xml.text(el, "Size"))
    if not keys or len(keys) > 1000:
        raise malformed_xml()
    if await _bucket_missing(s3):
        raise no_such_bucket(s3.bucket or "")
    limit = asyncio.Semaphore(8)
    marks: dict[tuple[str, str | None], dict[str, str]] = {}

    async def one(key: str, vid: str | None) -> S3Error | None:
        async with limit:
            if "\x00" in key or len(key.encode()) > MAX_KEY_BYTES:
                return S3Error("InvalidArgument", 400, "Invalid key")
            try:  # each key as its own DeleteObject: a policy may deny some of them
                await access.authorize(s3, "s3:DeleteObjectVersion" if vid else
                                       "s3:DeleteObject", key)
            except S3Error as exc:
                return exc
            refused = await conditional.check_delete(s3, key, vid, conds[key, vid])
            if isinstance(refused, S3Error):
                return refused
            if refused == conditional.NOTHING:
                return None
            resp = await delete_one(s3, key, vid)
            if resp.status // 100 == 2 or resp.status == 404:
                marks[key, vid] = versioned.delete_headers(resp, vid)
                return None
            return await error_of(resp, s3.bucket, key)
    results = await asyncio.gather(*(one(k, v) for k, v in zip(keys, vids, strict=True)))
    root = xml.root("DeleteResult")
    for key, vid, err in zip(keys, vids, results, strict=True):
        if err is None:
            if not quiet:
                d = xml.sub(root, "Deleted")
                xml.sub(d, "Key", key)
                if vid:
                    xml.sub(d, "VersionId", vid)
                mark = marks.get((key, vid), {})
                if mark.get(versioned.MARKER):
                    xml.sub(d, "DeleteMarker", "true")
                    if not vid:
                        xml.sub(d, "DeleteMarkerVersionId", mark["x-amz-version-id"])
        else:
            e = xml.sub(root, "Error")
            xml.sub(e, "Key", key)
            if vid:
                xml.sub(e, "VersionId", vid)
            xml.sub(e, "Code", err.code)
            xml.sub(e, "Message", err.message)
    return xml_response(root)
