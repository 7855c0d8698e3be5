"""The cipher of S3 server-side encryption: AES-256 in CTR mode over a streamed body.

Sizes stay equal, and a range decrypts from its own offset (the counter of byte `o` is
IV + o // 16), without reading from 0. A multipart upload's parts share the upload's data key;
part N's counter starts at HMAC-SHA256(data key, IV || N || nonce)[:16], the nonce derived
from the SHA-256 the part's request declares (verified before the part is stored: the same
bytes resent give the same ETag, other bytes another keystream), else random; it is kept as a
parameter of the part object's Content-Type, which the SLO manifest records per segment. So
parts are encrypted apart (in any order, copied or uploaded) and a GET walks the manifest's
parts, each from its own counter.

Here are the byte streams only (encrypting a PUT's body, decrypting a GET's answer); which
key to use and when is encryption.py's.
"""

from __future__ import annotations

import hmac
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from multidict import CIMultiDict

from swiftlite.common.reserved import split_reserved
from swiftlite.proxy.response import BodyResponse, after_first_chunk, answer_body, close_answer
from swiftlite.proxy.s3.errors import S3Error
from swiftlite.proxy.s3.sse_keys import SSE, Sse

SLICE = 1024 * 1024  # AES over at most this much at once: ~0.5 ms, never a long loop stall


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


async def body_chunks(resp: web.StreamResponse) -> AsyncIterator[bytes]:
    if isinstance(resp, BodyResponse):
        async for chunk in resp.chunks():
            yield chunk
    else:
        body = getattr(resp, "body", None)
        if isinstance(body, bytes) and body:
            yield body


def first_byte(resp: web.StreamResponse) -> int:
    rng = resp.headers.get("Content-Range", "")
    m = re.match(r"bytes (\d+)-\d+/", rng)
    return int(m.group(1)) if m else 0


Fetch = Callable[[str], Awaitable[web.StreamResponse]]


async def manifest_segments(fetch_manifest: Fetch, resp: web.StreamResponse,
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
        segments = await manifest_segments(fetch_manifest, resp, sse)
    except BaseException:
        close_answer(resp)
        raise
    body = transform(body_chunks(resp), sse.data_key, segments, first_byte(resp))
    return await after_first_chunk(resp.status, headers, body, length)

