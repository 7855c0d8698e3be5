"""The key side of S3 server-side encryption: the proxy's key store (its KMS), the header
names SSE uses, and each object's data key wrapped by a key-encryption key.

Every encrypted object (every multipart upload) has a random 256-bit data key and 128-bit IV.
The data key is stored only wrapped (AES-256-GCM, random nonce) by a key-encryption key: the
customer's key (SSE-C), or the key store's key of the named KMS key id (SSE-KMS), or the key
store's internal SSE-S3 key. Nothing else derived from a customer key is kept: a wrong key
fails the wrap's authentication tag, which is the check (400, nothing read). What is needed to
decrypt is one object sysmeta header (SSE, JSON: kind, KMS key id, IV, wrapped key, multipart
or not), which no client can set or see.

The key store (`[filter:s3api]`): `kms_keys = <id>:<base64 of 32 bytes>, ...` names keys
outright; `kms_root_secret` derives a key for any key id (HMAC-SHA256). Neither has a default:
with none, SSE-KMS and SSE-S3 requests answer 400 (KMS.NotFoundException). `swiftlite up`
writes a random kms_root_secret per cluster.

Kept apart from the request hooks (encryption.py) and the cipher (sse_cipher.py) so that the
key handling, the part that must be right for secrets to stay secret, reads on its own.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from swiftlite.common.sysmeta import S3_SSE
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.errors import S3Error

SSE = S3_SSE
H_SSE = "x-amz-server-side-encryption"
H_KMS_ID = "x-amz-server-side-encryption-aws-kms-key-id"
H_C_ALG = "x-amz-server-side-encryption-customer-algorithm"
H_C_KEY = "x-amz-server-side-encryption-customer-key"
H_C_MD5 = "x-amz-server-side-encryption-customer-key-md5"
COPY_PREFIX = "x-amz-copy-source-"  # x-amz-copy-source-server-side-encryption-customer-*
S3_INTERNAL_ID = "\x00sse-s3"  # the SSE-S3 key's id in the key store: no client can name it
DEFAULT_KMS_ID = "aws/s3"  # a bucket default of aws:kms naming no key
KMS_ID = re.compile(r"[A-Za-z0-9:/_.+=@-]{1,256}")  # a KMS key id a client may name


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


@dataclass
class Wanted:
    """The encryption a request names: SSE-C with its key, or a KMS / SSE-S3 one."""
    kind: str
    kid: str = ""
    customer_key: bytes = b""
    key_md5: str = ""


def named(prefix: str, name: str) -> str:
    """An SSE header's name as a copy's source names it (`prefix` "x-amz-copy-source-")."""
    return prefix + name[len("x-amz-"):] if prefix else name


def store_of(s3: S3Request) -> KeyStore:
    """The proxy's key store (built once from `[filter:s3api]`, middleware.py)."""
    return s3.conf.kms


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
                          ArgumentName=named(prefix, H_C_KEY))
        key_md5 = given.key_md5
    else:
        if given is not None:
            raise S3Error("InvalidRequest", 400, "The encryption parameters are not "
                          "applicable to this object.",
                          ArgumentName=named(prefix, H_C_ALG))
        data_key = _unwrap(store.key(kid), meta["key"], _aad(kind, kid))
        if data_key is None:
            raise S3Error("KMS.InvalidCiphertextException", 500,
                          "The object's data key could not be unwrapped by its KMS key.")
        key_md5 = ""
    return Sse(kind, kid, base64.b64decode(meta["iv"]), data_key, bool(meta.get("mp")),
               key_md5)

