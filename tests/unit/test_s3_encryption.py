"""S3 server-side encryption's pieces: the key store has no working default, CTR streams
decrypt from any offset and across parts, a wrapped key opens only with its own key, and
`swiftlite up` gives an older root its own KMS secret."""

from __future__ import annotations

import asyncio
import base64
import configparser
import hashlib
import os
import random

import pytest

from swiftlite import allinone
from swiftlite.common.config import Section
from swiftlite.proxy.s3 import sse_cipher, sse_headers, sse_keys
from swiftlite.proxy.s3.errors import S3Error


def kms(**options: str) -> sse_keys.KeyStore:
    return sse_keys.KeyStore.from_conf(Section(options))


def test_no_key_store_by_default_refuses_sse_kms_and_sse_s3():
    store = kms()
    assert not store.configured
    for headers in ({"x-amz-server-side-encryption": "aws:kms",
                     "x-amz-server-side-encryption-aws-kms-key-id": "k"},
                    {"x-amz-server-side-encryption": "AES256"}):
        with pytest.raises(S3Error) as exc:
            sse_headers.requested(headers, store)
        assert (exc.value.status, exc.value.code) == (400, "KMS.NotFoundException")


def test_named_keys_and_root_secret():
    key = os.urandom(32)
    store = kms(kms_keys=f"alpha:{base64.b64encode(key).decode()}")
    assert store.key("alpha") == key
    with pytest.raises(S3Error):
        store.key("beta")  # only named keys without a root secret
    rooted = kms(kms_root_secret="r" * 32)
    assert rooted.key("beta") == rooted.key("beta") != rooted.key("gamma")
    assert kms(kms_root_secret="s" * 32).key("beta") != rooted.key("beta")
    for bad in ({"kms_keys": "alpha:c2hvcnQ="}, {"kms_keys": "nokey"},
                {"kms_root_secret": "short"}):
        with pytest.raises(ValueError):
            kms(**bad)


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def _pieces(data: bytes, sizes: list[int]):
    at = 0
    for n in sizes:
        yield data[at:at + n]
        at += n


async def _collect(it) -> bytes:
    return b"".join([c async for c in it])


def test_ctr_stream_decrypts_from_any_offset_and_across_parts():
    rnd = random.Random(7)
    key = os.urandom(32)
    parts = [os.urandom(n) for n in (1000, 17, 4096, 333)]
    ivs = [os.urandom(16) for _ in parts]
    cipher = b""
    segments, start = [], 0
    for data, iv in zip(parts, ivs, strict=True):
        cipher += run(_collect(sse_cipher.transform(_pieces(data, [len(data)]), key,
                                                    [(0, 1 << 62, iv)], 0)))
        segments.append((start, len(data), iv))
        start += len(data)
    plain = b"".join(parts)
    assert cipher != plain and len(cipher) == len(plain)
    for _ in range(60):
        first = rnd.randrange(len(plain))
        last = rnd.randrange(first, len(plain))
        chunk_sizes = [rnd.randrange(1, 700) for _ in range(len(plain) // 1 + 1)]
        out = run(_collect(sse_cipher.transform(_pieces(cipher[first:last + 1], chunk_sizes),
                                                key, segments, first)))
        assert out == plain[first:last + 1]


def test_wrapped_key_opens_only_with_its_customer_key():
    store = kms()
    customer = os.urandom(32)
    md5 = base64.b64encode(hashlib.md5(customer).digest()).decode()
    want = sse_headers.customer_key({
        sse_keys.H_C_ALG: "AES256", sse_keys.H_C_KEY: base64.b64encode(customer).decode(),
        sse_keys.H_C_MD5: md5})
    sse, meta = sse_keys.new_sse(store, want)
    assert base64.b64encode(customer).decode() not in meta and md5 not in meta
    assert sse_keys.open_sse(store, meta, want).data_key == sse.data_key
    other = os.urandom(32)
    wrong = sse_keys.Wanted("c", customer_key=other)
    with pytest.raises(S3Error) as exc:
        sse_keys.open_sse(store, meta, wrong)
    assert exc.value.status == 400
    with pytest.raises(S3Error):
        sse_keys.open_sse(store, meta, None)


def test_an_older_root_gets_its_own_kms_secret(tmp_path):
    proxy = tmp_path / "proxy.conf"
    proxy.write_text("[proxy-server]\nbind_ip = 127.0.0.1\n")
    plan = {"proxy_conf": str(proxy)}
    allinone._add_kms_secret(plan)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(proxy)
    secret = parser.get("filter:s3api", "kms_root_secret")
    assert len(secret) >= 32
    assert os.stat(proxy).st_mode & 0o077 == 0
    allinone._add_kms_secret(plan)  # kept on the next start
    parser.read(proxy)
    assert parser.get("filter:s3api", "kms_root_secret") == secret
