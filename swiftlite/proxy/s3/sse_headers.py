"""The SSE headers of an S3 request, checked: which encryption a write asks for
(SSE-C with its customer key, SSE-KMS with a key id, SSE-S3), the customer key a read or a
copy's source gives, and the settings a read may not carry. Every header mistake is the
client's 400 (InvalidArgument) before anything is read or stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

from swiftlite.proxy.s3.errors import S3Error, invalid_argument
from swiftlite.proxy.s3.sse_keys import (
    H_C_ALG,
    H_C_KEY,
    H_C_MD5,
    H_KMS_ID,
    H_SSE,
    KMS_ID,
    S3_INTERNAL_ID,
    KeyStore,
    Wanted,
    kms_not_found,
    named,
)


def _bad(message: str, name: str = "", value: str = "") -> S3Error:
    return invalid_argument(message, name, value)


def customer_key(headers: Mapping[str, str], prefix: str = "") -> Wanted | None:
    """SSE-C headers (`prefix` "x-amz-copy-source-" for a copy's source), checked; None when
    none is given."""
    n_alg, n_key, n_md5 = (named(prefix, h) for h in (H_C_ALG, H_C_KEY, H_C_MD5))
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
        if not KMS_ID.fullmatch(kid):
            raise kms_not_found(kid)
        store.key(kid)  # raises for an unknown id
        return Wanted("kms", kid)
    raise _bad("The encryption method specified is not supported", H_SSE, sse)


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

