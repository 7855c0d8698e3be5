"""S3 server-side encryption: SSE-C (customer keys), SSE-KMS (keys of the proxy's own key
store), SSE-S3 (its internal key), and bucket default encryption (Put/Get/DeleteBucketEncryption).

Bodies are encrypted in the S3 front end as they stream, before any Swift sub-request stores
them, so the object servers only ever hold ciphertext:

- Every object (every multipart upload) gets a random 256-bit data key and a random 128-bit
  IV. The body is AES-256 in CTR mode: sizes stay equal, and a range decrypts from its own
  offset (the counter of byte `o` is IV + o // 16), without reading from 0.
- A multipart upload's parts share the upload's data key; part N's counter starts at
  HMAC-SHA256(data key, IV || N || nonce)[:16], the nonce derived from the SHA-256 the part's
  request declares (verified before the part is stored: the same bytes resent give the same
  ETag, other bytes another keystream), else random; it is kept as a parameter of the part
  object's Content-Type, which the SLO manifest records per segment. So parts are encrypted
  apart (in any order, copied or uploaded) and a GET walks the manifest's parts, each from its
  own counter.
- The data key is stored only wrapped (AES-256-GCM, random nonce) by a key-encryption key: the
  customer's key (SSE-C), or the key store's key of the named KMS key id (SSE-KMS), or the key
  store's internal SSE-S3 key. Nothing else derived from a customer key is kept: a wrong key
  fails the wrap's authentication tag, which is the check (400, nothing read).
- What is needed to decrypt is one object sysmeta header (SSE, JSON: kind, KMS key id, IV,
  wrapped key, multipart or not), which no client can set or see.

ETags are those of the stored ciphertext (S3 says an SSE-C or SSE-KMS object's ETag is not
the MD5 of its data); Content-MD5 and x-amz-checksum-* are checked on the plaintext as it
arrives (payload.py). Content-Length, Content-Range and listings show plaintext sizes.

The key store (`[filter:s3api]`): `kms_keys = <id>:<base64 of 32 bytes>, ...` names keys
outright; `kms_root_secret` derives a key for any key id (HMAC-SHA256). Neither has a default:
with none, SSE-KMS and SSE-S3 requests answer 400 (KMS.NotFoundException). `swiftlite up`
writes a random kms_root_secret per cluster.

Reads through the Swift API (`/v1`): an SSE-KMS or SSE-S3 object is decrypted as for S3; an
SSE-C object cannot be (the key is the client's) and answers 400 rather than ciphertext.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from multidict import CIMultiDict

from swiftlite.common.reserved import split_reserved
from swiftlite.common.sysmeta import S3_SSE
from swiftlite.proxy.response import BodyResponse, after_first_chunk, answer_body, close_answer
from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.documents import parse_xml, small_body, xml_response
from swiftlite.proxy.s3.errors import S3Error, invalid_argument, malformed_xml
from swiftlite.proxy.s3.routes import route

SSE = S3_SSE
BUCKET_SSE = "X-Container-Sysmeta-S3api-Encryption"
H_SSE = "x-amz-server-side-encryption"
H_KMS_ID = "x-amz-server-side-encryption-aws-kms-key-id"
H_C_ALG = "x-amz-server-side-encryption-customer-algorithm"
H_C_KEY = "x-amz-server-side-encryption-customer-key"
H_C_MD5 = "x-amz-server-side-encryption-customer-key-md5"
COPY_PREFIX = "x-amz-copy-source-"  # x-amz-copy-source-server-side-encryption-customer-*
S3_INTERNAL_ID = "\x00sse-s3"  # the SSE-S3 key's id in the key store: no client can name it
DEFAULT_KMS_ID = "aws/s3"  # a bucket default of aws:kms naming no key
SLICE = 1024 * 1024  # AES over at most this much at once: ~0.5 ms, never a long loop stall
_KMS_ID = re.compile(r"[A-Za-z0-9:/_.+=@-]{1,256}")


# ---- keys -----------------------------------------------------------------------------------

class KeyStore:
    """The proxy's KMS: named keys, and/or keys derived from a root secret."""

    def __init__(self, keys: Mapping[str, bytes], root: bytes | None) -> None:
        self.keys = dict(keys)
        self.root = root

    @classmethod
    def from_conf(cls, conf: Any) -> KeyStore:
        keys: dict[str, bytes] = {}
        for item in conf.get_str("kms_keys", "").split(","):
            item = item.strip()
            if not item:
                continue
            kid, sep, b64 = item.rpartition(":")
            try:
                raw = base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError):
                raw = b""
            if not sep or not kid or len(raw) != 32:
                raise ValueError("kms_keys: each item is <key id>:<base64 of 32 bytes>")
            keys[kid] = raw
        root = conf.get_str("kms_root_secret", "").strip()
        if root and len(root) < 16:
            raise ValueError("kms_root_secret: at least 16 characters")
        return cls(keys, root.encode() if root else None)

    @property
    def configured(self) -> bool:
        return bool(self.keys) or self.root is not None

    def key(self, kid: str) -> bytes:
        found = self.keys.get(kid)
        if found is not None:
            return found
        if self.root is not None:
            return hmac.new(self.root, b"swiftlite-kms\x00" + kid.encode(), "sha256").digest()
        raise kms_not_found(kid)


def kms_not_found(kid: str) -> S3Error:
    if kid == S3_INTERNAL_ID:
        return S3Error("KMS.NotFoundException", 400, "Server-side encryption is not "
                       "configured on this server (no kms_root_secret).")
    return S3Error("KMS.NotFoundException", 400, f"Invalid keyId {kid}")


def _wrap(kek: bytes, data_key: bytes, aad: bytes) -> str:
    nonce = os.urandom(12)
    return base64.b64encode(nonce + AESGCM(kek).encrypt(nonce, data_key, aad)).decode()


def _unwrap(kek: bytes, wrapped: str, aad: bytes) -> bytes | None:
    try:
        raw = base64.b64decode(wrapped)
        return AESGCM(kek).decrypt(raw[:12], raw[12:], aad)
    except (InvalidTag, ValueError, binascii.Error):
        return None


@dataclass
class Sse:
    """One object's (or upload's) encryption: how its data key is wrapped, and the key."""
    kind: str  # "c" (SSE-C), "kms", "s3"
    kid: str  # the KMS key id ("" for SSE-C)
    iv: bytes
    data_key: bytes
    multipart: bool = False
    key_md5: str = ""  # SSE-C: the client's key MD5 (b64), echoed in answers; never stored

    def sysmeta(self, kek: bytes) -> str:
        return json.dumps({"kind": self.kind, "kid": self.kid,
                           "iv": base64.b64encode(self.iv).decode(),
                           "key": _wrap(kek, self.data_key, _aad(self.kind, self.kid)),
                           "mp": int(self.multipart)}, separators=(",", ":"))

    def answer_headers(self) -> dict[str, str]:
        if self.kind == "c":
            return {H_C_ALG: "AES256", H_C_MD5: self.key_md5}
        if self.kind == "s3":
            return {H_SSE: "AES256"}
        return {H_SSE: "aws:kms", H_KMS_ID: self.kid}

    def part_iv(self, number: int, nonce: bytes) -> bytes:
        return hmac.new(self.data_key, self.iv + number.to_bytes(4, "big") + nonce,
                        "sha256").digest()[:16]


def _aad(kind: str, kid: str) -> bytes:
    return f"swiftlite-sse\x00{kind}\x00{kid}".encode()


# ---- what a request asks for ----------------------------------------------------------------

@dataclass
class Wanted:
    """The encryption a request names: SSE-C with its key, or a KMS / SSE-S3 one."""
    kind: str
    kid: str = ""
    customer_key: bytes = b""
    key_md5: str = ""


def _bad(message: str, name: str = "", value: str = "") -> S3Error:
    return invalid_argument(message, name, value)


def _named(prefix: str, name: str) -> str:
    return prefix + name[len("x-amz-"):] if prefix else name


def customer_key(headers: Mapping[str, str], prefix: str = "") -> Wanted | None:
    """SSE-C headers (`prefix` "x-amz-copy-source-" for a copy's source), checked; None when
    none is given."""
    n_alg, n_key, n_md5 = (_named(prefix, h) for h in (H_C_ALG, H_C_KEY, H_C_MD5))
    alg, key, md5 = headers.get(n_alg), headers.get(n_key), headers.get(n_md5)
    if alg is None and key is None and md5 is None:
        return None
    if alg is None:
        raise _bad("Requests specifying Server Side Encryption with Customer provided keys "
                   "must provide a valid encryption algorithm.", n_alg, "null")
    if alg != "AES256":
        raise _bad("The encryption algorithm specified is not valid.", n_alg, alg)
    if key is None:
        raise _bad("Requests specifying Server Side Encryption with Customer provided keys "
                   "must provide an appropriate secret key.", n_key, "null")
    try:
        raw = base64.b64decode(key.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise _bad("The secret key was invalid for the specified algorithm.", n_key, "")
    if md5 is None:
        raise _bad("Requests specifying Server Side Encryption with Customer provided keys "
                   "must provide the client calculated MD5 of the secret key.", n_md5, "null")
    want = base64.b64encode(hashlib.md5(raw, usedforsecurity=False).digest()).decode()
    if not hmac.compare_digest(md5.strip(), want):
        raise _bad("The calculated MD5 hash of the key did not match the hash that was "
                   "provided.", n_md5, "")
    return Wanted("c", customer_key=raw, key_md5=want)


def requested(headers: Mapping[str, str], store: KeyStore) -> Wanted | None:
    """The encryption a write names in its headers (None: none), checked."""
    sse = headers.get(H_SSE)
    kid = headers.get(H_KMS_ID)
    c = customer_key(headers)
    if c is not None:
        if sse is not None or kid is not None:
            raise _bad("Server Side Encryption with Customer provided key is incompatible "
                       "with the encryption method specified", H_SSE, sse or "")
        return c
    if sse is None:
        if kid is not None:
            raise _bad("Server Side Encryption with KMS managed key requires HTTP header "
                       "x-amz-server-side-encryption : aws:kms", H_SSE, "null")
        for k in headers:
            if k.lower().startswith("x-amz-server-side-encryption-context"):
                raise _bad("x-amz-server-side-encryption-context needs aws:kms", H_SSE, "")
        return None
    if sse == "AES256":
        if kid is not None:
            raise _bad("Server Side Encryption with KMS managed key requires HTTP header "
                       "x-amz-server-side-encryption : aws:kms", H_SSE, sse)
        if not store.configured:
            raise kms_not_found(S3_INTERNAL_ID)
        return Wanted("s3", S3_INTERNAL_ID)
    if sse in ("aws:kms", "aws:kms:dsse"):
        if kid is None or not kid.strip():
            raise _bad("Server Side Encryption with KMS managed key requires a key id "
                       "(x-amz-server-side-encryption-aws-kms-key-id)", H_KMS_ID, "")
        kid = kid.strip()
        if not _KMS_ID.fullmatch(kid):
            raise kms_not_found(kid)
        store.key(kid)  # raises for an unknown id
        return Wanted("kms", kid)
    raise _bad("The encryption method specified is not supported", H_SSE, sse)


def _kek(store: KeyStore, kind: str, kid: str, customer: bytes) -> bytes:
    return customer if kind == "c" else store.key(kid)


def new_sse(store: KeyStore, want: Wanted, multipart: bool = False) -> tuple[Sse, str]:
    """A fresh data key and IV for `want`; the Sse and its sysmeta value."""
    sse = Sse(want.kind, want.kid if want.kind != "c" else "", os.urandom(16),
              os.urandom(32), multipart, want.key_md5)
    return sse, sse.sysmeta(_kek(store, want.kind, want.kid, want.customer_key))


def stored_sse(value: str) -> dict[str, Any]:
    try:
        meta = json.loads(value)
        if not isinstance(meta, dict) or meta.get("kind") not in ("c", "kms", "s3"):
            raise ValueError
        return meta
    except ValueError:
        raise S3Error("InternalError", 500, "The object's encryption data is unreadable") \
            from None


def open_sse(store: KeyStore, value: str, given: Wanted | None, source: bool = False) -> Sse:
    """The Sse of a stored object (or upload) from its sysmeta, with the key a read gives:
    an SSE-C object needs its customer key (400 without it or with another)."""
    meta = stored_sse(value)
    kind, kid = meta["kind"], meta.get("kid", "")
    prefix = COPY_PREFIX if source else ""
    if kind == "c":
        if given is None:
            raise S3Error("InvalidRequest", 400, "The object was stored using a form of "
                          "Server Side Encryption. The correct parameters must be provided "
                          "to retrieve the object.")
        data_key = _unwrap(given.customer_key, meta["key"], _aad(kind, ""))
        if data_key is None:
            raise S3Error("InvalidRequest", 400, "The provided encryption parameters did not "
                          "match the ones used originally.",
                          ArgumentName=_named(prefix, H_C_KEY))
        key_md5 = given.key_md5
    else:
        if given is not None:
            raise S3Error("InvalidRequest", 400, "The encryption parameters are not "
                          "applicable to this object.",
                          ArgumentName=_named(prefix, H_C_ALG))
        data_key = _unwrap(store.key(kid), meta["key"], _aad(kind, kid))
        if data_key is None:
            raise S3Error("KMS.InvalidCiphertextException", 500,
                          "The object's data key could not be unwrapped by its KMS key.")
        key_md5 = ""
    return Sse(kind, kid, base64.b64decode(meta["iv"]), data_key, bool(meta.get("mp")),
               key_md5)


# ---- the cipher over a stream ----------------------------------------------------------------

def _cipher(key: bytes, iv: bytes, offset: int) -> Any:
    """An AES-256-CTR transform positioned at byte `offset` of the stream starting at `iv`."""
    counter = (int.from_bytes(iv, "big") + offset // 16) % (1 << 128)
    ctx = Cipher(algorithms.AES(key), modes.CTR(counter.to_bytes(16, "big"))).encryptor()
    if offset % 16:
        ctx.update(bytes(offset % 16))
    return ctx


def _update(ctx: Any, chunk: bytes) -> list[bytes]:
    if len(chunk) <= SLICE:
        return [ctx.update(chunk)]
    return [ctx.update(chunk[i:i + SLICE]) for i in range(0, len(chunk), SLICE)]


async def transform(source: AsyncIterator[bytes], key: bytes,
                    segments: list[tuple[int, int, bytes]],
                    offset: int) -> AsyncIterator[bytes]:
    """`source` (bytes from `offset` on) through CTR, `segments` being (start, length, iv) of
    the stream's independently counted pieces, in order (one for a plain object)."""
    index = 0
    while index < len(segments) - 1 and offset >= segments[index][0] + segments[index][1]:
        index += 1
    start, length, iv = segments[index]
    ctx = _cipher(key, iv, offset - start)
    end = start + length
    async for chunk in source:
        while chunk:
            if offset + len(chunk) <= end or index == len(segments) - 1:
                for out in _update(ctx, chunk):
                    yield out
                offset += len(chunk)
                break
            cut = end - offset
            for out in _update(ctx, chunk[:cut]):
                yield out
            chunk, offset = chunk[cut:], end
            index += 1
            start, length, iv = segments[index]
            ctx, end = _cipher(key, iv, 0), start + length


PART_TYPE = "application/octet-stream;swiftlite_sse_nonce="
_NONCE = re.compile(r";swiftlite_sse_nonce=([0-9a-f]{16})$")


def _part_nonce(sse: Sse, part: int, given: Mapping[str, str] | None) -> bytes:
    """A part's nonce: from the SHA-256 its request declares (checked against the body before
    its end is stored, payload.py), so the same bytes sent again are the same ciphertext and
    ETag (as clients retrying a part expect), and other bytes never share a keystream; random
    when no SHA-256 is declared."""
    if given is None:
        return os.urandom(8)
    sha = given.get("x-amz-content-sha256", "")
    if re.fullmatch(r"[0-9a-fA-F]{64}", sha):
        declared = sha.lower()
    else:
        declared = given.get("x-amz-checksum-sha256", "").strip()
    if not declared:
        return os.urandom(8)
    length = given.get("x-amz-decoded-content-length") or given.get("Content-Length", "")
    msg = f"part\x00{part}\x00{length}\x00{declared}".encode()
    return hmac.new(sse.data_key, msg, "sha256").digest()[:8]


def encrypt_body(body: Any, sse: Sse, part: int | None = None,
                 headers: CIMultiDict[str] | None = None,
                 given: Mapping[str, str] | None = None) -> Any:
    """A PUT body (bytes or an async iterator) encrypted: a whole object, or part `part` of
    an upload (`given`: its request's headers), whose nonce goes in the part's `headers` (its
    Content-Type, which the SLO manifest keeps per segment)."""
    iv = sse.iv
    if part is not None:
        nonce = _part_nonce(sse, part, given)
        if headers is not None:
            headers["Content-Type"] = PART_TYPE + nonce.hex()
        iv = sse.part_iv(part, nonce)
    if isinstance(body, bytes | bytearray):
        return b"".join(_update(_cipher(sse.data_key, iv, 0), bytes(body)))
    return transform(body, sse.data_key, [(0, 1 << 62, iv)], 0)


# ---- reads ------------------------------------------------------------------------------------

async def _chunks(resp: web.StreamResponse) -> AsyncIterator[bytes]:
    if isinstance(resp, BodyResponse):
        async for chunk in resp.chunks():
            yield chunk
    else:
        body = getattr(resp, "body", None)
        if isinstance(body, bytes) and body:
            yield body


def _first_byte(resp: web.StreamResponse) -> int:
    rng = resp.headers.get("Content-Range", "")
    m = re.match(r"bytes (\d+)-\d+/", rng)
    return int(m.group(1)) if m else 0


Fetch = Callable[[str], Awaitable[web.StreamResponse]]


async def _segments(fetch_manifest: Fetch, resp: web.StreamResponse,
                    sse: Sse) -> list[tuple[int, int, bytes]]:
    """(start, length, iv) per part of a multipart object, from its SLO manifest."""
    if not sse.multipart:
        return [(0, 1 << 62, sse.iv)]
    man = await fetch_manifest("multipart-manifest=get")
    body = await answer_body(man)
    want = resp.headers.get("X-Manifest-Etag")
    got = man.headers.get("ETag", "").strip('"')
    if man.status // 100 != 2 or (want and want.strip('"') != got):
        raise S3Error("ServiceUnavailable", 503, "The object changed while being read; "
                      "please retry.")
    out: list[tuple[int, int, bytes]] = []
    start = 0
    for item in json.loads(body):
        name = item["name"].lstrip("/").partition("/")[2]
        length = int(item["bytes"])
        m = _NONCE.search(item.get("content_type", ""))
        nonce = bytes.fromhex(m.group(1)) if m else b""
        out.append((start, length, sse.part_iv(int(split_reserved(name)[-1]), nonce)))
        start += length
    return out or [(0, 1 << 62, sse.iv)]


async def decrypted(resp: web.StreamResponse, sse: Sse, fetch_manifest: Fetch,
                    method: str) -> web.StreamResponse:
    """A GET/HEAD answer of an encrypted object, its body decrypted as it streams."""
    if method == "HEAD" or resp.status // 100 != 2 or resp.status == 204:
        resp.headers.pop(SSE, None)  # no body to decrypt
        return resp
    headers = CIMultiDict(resp.headers)
    headers.pop(SSE, None)
    if headers.get("Content-Type", "").startswith("multipart/byteranges"):
        close_answer(resp)
        raise S3Error("NotImplemented", 501, "Several ranges of an encrypted object in one "
                      "request are not supported.")
    length = resp.content_length
    try:
        segments = await _segments(fetch_manifest, resp, sse)
    except BaseException:
        close_answer(resp)
        raise
    body = transform(_chunks(resp), sse.data_key, segments, _first_byte(resp))
    return await after_first_chunk(resp.status, headers, body, length)


def read_headers_check(headers: Mapping[str, str]) -> None:
    """A read names no SSE-KMS/SSE-S3 settings (they are for writes only)."""
    for name in (H_SSE, H_KMS_ID):
        if name in headers:
            raise _bad(f"{name} header is not supported for this operation.", name,
                       headers[name])


def plain_given(given: Wanted | None) -> None:
    if given is not None:
        raise S3Error("InvalidRequest", 400, "The encryption parameters are not applicable to "
                      "this object.", ArgumentName=H_C_ALG)


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


def store_of(s3: S3Request) -> KeyStore:
    return s3.conf.kms


# ---- writes -----------------------------------------------------------------------------------

async def bucket_default(s3: S3Request, bucket: str) -> Wanted | None:
    """The bucket's default encryption (PutBucketEncryption), from the cached container info."""
    info = await s3.proxy.container_info(s3.request, s3.account, bucket)
    value = next((v for k, v in info.meta.items() if k.lower() == BUCKET_SSE.lower()), "")
    if not value:
        return None
    conf = json.loads(value)
    if conf.get("alg") == "AES256":
        return Wanted("s3", S3_INTERNAL_ID)
    return Wanted("kms", conf.get("kid") or DEFAULT_KMS_ID)


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
    segments = await _segments(manifest, resp, sse)
    length = resp.content_length or 0
    return sse, transform(_chunks(resp), sse.data_key, segments, _first_byte(resp)), length


def encrypted(headers: Mapping[str, str]) -> bool:
    return SSE in headers


async def copy_needed(s3: S3Request, head: web.StreamResponse) -> bool:
    """Whether a CopyObject must pass the bytes through here (decrypting its source,
    encrypting its copy) rather than have Swift copy them."""
    h = s3.request.headers
    names = (H_SSE, H_KMS_ID, H_C_ALG, H_C_KEY, _named(COPY_PREFIX, H_C_ALG),
             _named(COPY_PREFIX, H_C_KEY))
    if SSE in head.headers or any(n in h for n in names):
        return True
    return await bucket_default(s3, s3.bucket or "") is not None


async def _plain_source(s3: S3Request, bucket: str, key: str, rng: str | None,
                        account: str | None) -> tuple[AsyncIterator[bytes], int]:
    resp = await s3.swift("GET", bucket, key, {"Range": rng} if rng else {}, account=account)
    if resp.status // 100 != 2:
        close_answer(resp)
        raise S3Error("InternalError", 500, "The copy's source could not be read.")
    return _chunks(resp), int(resp.headers.get("Content-Length", "0"))


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
    from swiftlite.proxy.s3 import acl
    from swiftlite.proxy.s3.context import PASSED
    from swiftlite.proxy.s3.obj import _iso_from_http, no_such_bucket, object_headers

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
                      "the object.", ArgumentName=_named(COPY_PREFIX, H_C_ALG))
    stream, length = await _source(s3, src_bucket, src_key, head, None, account)
    headers["Content-Length"] = str(length)
    body = encrypt_body(stream, sse) if sse is not None else stream
    resp = await s3.swift("PUT", s3.bucket, s3.key, headers, body)
    if resp.status // 100 != 2:
        if resp.status == 404:
            close_answer(resp)
            raise no_such_bucket(s3.bucket or "")
        raise await error_of(resp, s3.bucket, s3.key)
    root = xml.root("CopyObjectResult")
    xml.sub(root, "LastModified", _iso_from_http(resp.headers.get("Last-Modified", "")))
    xml.sub(root, "ETag", '"' + resp.headers.get("ETag", "").strip('"') + '"')
    out = xml_response(root)
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


# ---- bucket default encryption -----------------------------------------------------------------

def no_config(bucket: str | None) -> S3Error:
    return S3Error("ServerSideEncryptionConfigurationNotFoundError", 404, "The server side "
                   "encryption configuration was not found", BucketName=bucket or "")


@route("bucket", "PUT", "encryption")
async def put_bucket_encryption(s3: S3Request) -> web.StreamResponse:
    doc = parse_xml(await small_body(s3))
    if doc.tag != "ServerSideEncryptionConfiguration":
        raise malformed_xml()
    rules = doc.findall("Rule")
    if len(rules) != 1:
        raise malformed_xml()
    default = rules[0].find("ApplyServerSideEncryptionByDefault")
    if default is None:
        raise malformed_xml()
    alg = (xml.text(default, "SSEAlgorithm") or "").strip()
    kid = (xml.text(default, "KMSMasterKeyID") or "").strip()
    if alg not in ("AES256", "aws:kms", "aws:kms:dsse"):
        raise malformed_xml()
    if alg == "AES256" and kid:
        raise invalid_argument("a KMSMasterKeyID needs SSEAlgorithm aws:kms",
                               "KMSMasterKeyID", kid)
    if kid and not _KMS_ID.fullmatch(kid):
        raise kms_not_found(kid)
    store = store_of(s3)
    if not store.configured:
        raise kms_not_found(S3_INTERNAL_ID if alg == "AES256" else kid)
    if kid:
        store.key(kid)
    value = json.dumps({"alg": "AES256" if alg == "AES256" else "aws:kms", "kid": kid})
    await s3.swift_ok("POST", s3.bucket, headers={BUCKET_SSE: value})
    return web.Response(status=200)


@route("bucket", "GET", "encryption")
async def get_bucket_encryption(s3: S3Request) -> web.StreamResponse:
    head = await s3.swift_ok("HEAD", s3.bucket)
    value = head.headers.get(BUCKET_SSE)
    if not value:
        raise no_config(s3.bucket)
    conf = json.loads(value)
    root = xml.root("ServerSideEncryptionConfiguration")
    rule = xml.sub(root, "Rule")
    default = xml.sub(rule, "ApplyServerSideEncryptionByDefault")
    xml.sub(default, "SSEAlgorithm", conf["alg"])
    if conf.get("kid"):
        xml.sub(default, "KMSMasterKeyID", conf["kid"])
    xml.sub(rule, "BucketKeyEnabled", "false")
    return xml_response(root)


@route("bucket", "DELETE", "encryption")
async def delete_bucket_encryption(s3: S3Request) -> web.StreamResponse:
    await s3.swift_ok("POST", s3.bucket, headers={BUCKET_SSE: ""})
    return web.Response(status=204)
