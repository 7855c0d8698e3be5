"""S3 server-side encryption: SSE-C (customer keys), SSE-KMS (keys of the proxy's own key
store), SSE-S3 (its internal key), and bucket default encryption; this module is its request
hooks, which obj.py, multipart.py, postform.py, attributes.py and middleware.py call on a
write, a read, a copy and a Swift API read.

Bodies are encrypted in the S3 front end as they stream, before any Swift sub-request stores
them, so the object servers only ever hold ciphertext. Each object (each multipart upload) has
its own data key and IV; what decrypts it is one object sysmeta record (SSE) that no client can
set or see. The pieces, each in its own module:

- sse_keys.py: the key store (`kms_keys`, `kms_root_secret`; no default), data keys wrapped
  by a customer's or a KMS key, the stored SSE record.
- sse_headers.py: a request's SSE headers, checked (which encryption a write asks for, the
  customer key a read or a copy's source gives).
- sse_cipher.py: AES-256-CTR over streams, ranges from any offset, multipart parts each with
  their own counter.
- bucket_encryption.py: Put/Get/DeleteBucketEncryption and the default it gives a write.

ETags are those of the stored ciphertext (S3 says an SSE-C or SSE-KMS object's ETag is not
the MD5 of its data); Content-MD5 and x-amz-checksum-* are checked on the plaintext as it
arrives (payload.py). Content-Length, Content-Range and listings show plaintext sizes.

Reads through the Swift API (`/v1`): an SSE-KMS or SSE-S3 object is decrypted as for S3; an
SSE-C object cannot be (the key is the client's) and answers 400 rather than ciphertext.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import acl
from swiftlite.proxy.s3.bucket_encryption import bucket_default
from swiftlite.proxy.s3.context import PASSED, S3Request, error_of
from swiftlite.proxy.s3.errors import S3Error, no_such_bucket
from swiftlite.proxy.s3.object_request import copy_result, object_headers
from swiftlite.proxy.s3.sse_cipher import (
    body_chunks,
    decrypted,
    encrypt_body,
    first_byte,
    manifest_segments,
    transform,
)
from swiftlite.proxy.s3.sse_headers import (
    customer_key,
    plain_given,
    read_headers_check,
    requested,
)
from swiftlite.proxy.s3.sse_keys import (
    COPY_PREFIX,
    H_C_ALG,
    H_C_KEY,
    H_KMS_ID,
    H_SSE,
    SSE,
    KeyStore,
    Sse,
    kms_not_found,
    named,
    new_sse,
    open_sse,
    store_of,
    stored_sse,
)


async def on_read(s3: S3Request, resp: web.StreamResponse, query: str) -> web.StreamResponse:
    """GetObject/HeadObject: check the read's SSE headers against the object's (before any
    byte is sent) and decrypt. Called on a 2xx answer, before its headers become S3's."""
    headers = s3.request.headers
    try:
        read_headers_check(headers)
        given = customer_key(headers)
        value = resp.headers.get(SSE)
        if value is None:
            plain_given(given)
            return resp
        sse = open_sse(store_of(s3), value, given)
    except BaseException:
        close_answer(resp)
        raise

    async def manifest(q: str) -> web.StreamResponse:
        version = "&".join(p for p in query.split("&") if p.startswith("version-id="))
        return await s3.swift("GET", s3.bucket, s3.key,
                              query="&".join(p for p in (q, version) if p))
    out = await decrypted(resp, sse, manifest, s3.request.method)
    out.headers.update(sse.answer_headers())
    return out


def check_key(s3: S3Request, object_headers: Mapping[str, str]) -> None:
    """For operations about an object's facts (GetObjectAttributes): the request's SSE
    headers judged against the object's, as a GET's are (400 for an SSE-C object without its
    key or with another). `object_headers`: a HEAD sub-request's answer, sysmeta included."""
    read_headers_check(s3.request.headers)
    given = customer_key(s3.request.headers)
    value = object_headers.get(SSE)
    if value is None:
        plain_given(given)
    else:
        open_sse(store_of(s3), value, given)


# ---- writes -----------------------------------------------------------------------------------

async def for_write(s3: S3Request, bucket: str, headers: CIMultiDict[str],
                    multipart: bool = False,
                    given: Mapping[str, str] | None = None) -> Sse | None:
    """PutObject/CopyObject/CreateMultipartUpload: the new object's encryption (its request's
    headers, else the bucket's default), its sysmeta added to `headers`; None: plaintext.
    `given`: where the SSE settings are instead of the request's headers (a POST form's
    fields, in a case-insensitive mapping); then `encrypt_body(data, sse)` encrypts."""
    store = store_of(s3)
    want = requested(s3.request.headers if given is None else given, store)
    if want is None:
        want = await bucket_default(s3, bucket)
        if want is None:
            return None
        if not store.configured:
            raise kms_not_found(want.kid)
        store.key(want.kid)
    sse, meta = new_sse(store, want, multipart)
    headers[SSE] = meta
    headers.pop("ETag", None)  # Content-MD5 is the plaintext's: payload.py checks it
    return sse


def for_part(s3: S3Request, marker_headers: Mapping[str, str]) -> Sse | None:
    """UploadPart/UploadPartCopy/CompleteMultipartUpload: the upload's encryption, an SSE-C
    upload's key being required again (400 without it or with another). SSE-KMS headers on
    a part are ignored: the upload's settings rule (as S3's UploadPart takes none)."""
    value = marker_headers.get(SSE)
    given = customer_key(s3.request.headers)
    if value is None:
        plain_given(given)
        return None
    return open_sse(store_of(s3), value, given)


def upload_sysmeta(marker_headers: Mapping[str, str]) -> dict[str, str]:
    """The completed object's sysmeta, from its upload marker's."""
    value = marker_headers.get(SSE)
    return {SSE: value} if value else {}


async def source_reader(s3: S3Request, bucket: str, key: str,
                        head: web.StreamResponse, rng: str | None = None,
                        account: str | None = None,
                        ) -> tuple[Sse | None, AsyncIterator[bytes] | None, int]:
    """A copy's source (in `account`, default the request's): its Sse (None when plaintext)
    and, when encrypted, its plaintext bytes (`rng`: `bytes=a-b`) as a stream, with their
    length."""
    given = customer_key(s3.request.headers, COPY_PREFIX)
    value = head.headers.get(SSE)
    if value is None:
        plain_given(given)
        return None, None, 0
    sse = open_sse(store_of(s3), value, given, source=True)
    headers = {"Range": rng} if rng else {}
    resp = await s3.swift("GET", bucket, key, headers, account=account)
    if resp.status // 100 != 2:
        close_answer(resp)
        raise S3Error("InternalError", 500, "The copy's source could not be read.")

    async def manifest(q: str) -> web.StreamResponse:
        return await s3.swift("GET", bucket, key, query=q, account=account)
    segments = await manifest_segments(manifest, resp, sse)
    length = resp.content_length or 0
    return sse, transform(body_chunks(resp), sse.data_key, segments, first_byte(resp)), length


def encrypted(headers: Mapping[str, str]) -> bool:
    return SSE in headers


async def copy_needed(s3: S3Request, head: web.StreamResponse) -> bool:
    """Whether a CopyObject must pass the bytes through here (decrypting its source,
    encrypting its copy) rather than have Swift copy them."""
    h = s3.request.headers
    names = (H_SSE, H_KMS_ID, H_C_ALG, H_C_KEY, named(COPY_PREFIX, H_C_ALG),
             named(COPY_PREFIX, H_C_KEY))
    if SSE in head.headers or any(n in h for n in names):
        return True
    return await bucket_default(s3, s3.bucket or "") is not None


async def _plain_source(s3: S3Request, bucket: str, key: str, rng: str | None,
                        account: str | None) -> tuple[AsyncIterator[bytes], int]:
    resp = await s3.swift("GET", bucket, key, {"Range": rng} if rng else {}, account=account)
    if resp.status // 100 != 2:
        close_answer(resp)
        raise S3Error("InternalError", 500, "The copy's source could not be read.")
    return body_chunks(resp), int(resp.headers.get("Content-Length", "0"))


async def _source(s3: S3Request, bucket: str, key: str, head: web.StreamResponse,
                  rng: str | None, account: str | None) -> tuple[AsyncIterator[bytes], int]:
    """A copy's source bytes in plaintext, and how many."""
    _, stream, length = await source_reader(s3, bucket, key, head, rng, account)
    if stream is None:
        return await _plain_source(s3, bucket, key, rng, account)
    return stream, length


async def copy_object(s3: S3Request, src_bucket: str, src_key: str, head: web.StreamResponse,
                      directive: str, account: str | None = None) -> web.StreamResponse:
    """CopyObject through here: the source read (and decrypted) as it streams into the new
    object (encrypted as its request or bucket says)."""
    if directive == "REPLACE":
        headers = object_headers(s3)
    else:
        headers = CIMultiDict((k, v) for k, v in head.headers.items()
                              if k.lower() in PASSED or k.lower().startswith("x-object-meta-"))
    sse = await for_write(s3, s3.bucket or "", headers)
    headers.update(await acl.object_create_headers(s3))
    given = customer_key(s3.request.headers, COPY_PREFIX)
    if SSE not in head.headers:
        plain_given(given)
    elif stored_sse(head.headers[SSE])["kind"] == "c" and given is None:
        raise S3Error("InvalidRequest", 400, "The object was stored using a form of Server "
                      "Side Encryption. The correct parameters must be provided to retrieve "
                      "the object.", ArgumentName=named(COPY_PREFIX, H_C_ALG))
    stream, length = await _source(s3, src_bucket, src_key, head, None, account)
    headers["Content-Length"] = str(length)
    body = encrypt_body(stream, sse) if sse is not None else stream
    resp = await s3.swift("PUT", s3.bucket, s3.key, headers, body)
    if resp.status // 100 != 2:
        if resp.status == 404:
            close_answer(resp)
            raise no_such_bucket(s3.bucket or "")
        raise await error_of(resp, s3.bucket, s3.key)
    out = copy_result(resp)
    if sse is not None:
        out.headers.update(sse.answer_headers())
    return out


async def copy_part(s3: S3Request, src_bucket: str, src_key: str, head: web.StreamResponse,
                    hidden: str, name: str, rng: str | None, sse: Sse | None,
                    number: int, account: str | None = None) -> web.StreamResponse:
    """UploadPartCopy through here: the source's bytes (decrypted) into part `number`
    (encrypted as its upload is); the part's PUT answer."""
    stream, length = await _source(s3, src_bucket, src_key, head, rng, account)
    headers = CIMultiDict({"Content-Length": str(length),
                           "Content-Type": "application/octet-stream"})
    body = encrypt_body(stream, sse, number, headers) if sse is not None else stream
    return await s3.swift("PUT", hidden, name, headers, body, reserved=True)


NOT_FOR_MANIFEST = frozenset(("range", "if-match", "if-none-match", "if-modified-since",
                              "if-unmodified-since", "content-length"))


# ---- Swift API reads --------------------------------------------------------------------------

async def swift_read(store: KeyStore, request: web.Request, resp: web.StreamResponse,
                     app: Any) -> web.StreamResponse:
    """A Swift GET/HEAD of an object S3 encrypted: decrypted with its KMS key, or 400 for
    SSE-C (the key is the client's)."""
    from swiftlite.common.http import HTTPError
    from swiftlite.proxy.request import answer_of, sub_request

    value = resp.headers.get(SSE)
    if value is None or request.query.get("multipart-manifest") == "get":
        return resp  # (a manifest itself is plaintext JSON)
    meta = stored_sse(value)
    if meta["kind"] == "c":
        close_answer(resp)
        raise HTTPError(400, "This object is encrypted with a customer-provided key (S3 "
                        "SSE-C): read it through the S3 API with its key.")
    try:
        sse = open_sse(store, value, None)
    except S3Error as exc:
        close_answer(resp)
        raise HTTPError(503, exc.message) from None

    async def manifest(q: str) -> web.StreamResponse:
        version = request.query.get("version-id")
        query = q + (f"&version-id={version}" if version else "")
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in NOT_FOR_MANIFEST)
        sub = sub_request(request, "GET", request.rel_url.raw_path, headers, None,
                          query=query)
        return await answer_of(app, sub)
    try:
        return await decrypted(resp, sse, manifest, request.method)
    except S3Error as exc:
        raise HTTPError(exc.status, exc.message) from None

