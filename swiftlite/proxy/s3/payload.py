"""A PUT's body as the S3 client framed it, checked, as an async iterator of its data.

- plain: Content-Length bytes; a signed SHA-256 (x-amz-content-sha256) and any
  `x-amz-checksum-*` / Content-MD5 header are checked as the bytes pass.
- `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` (aws-chunked): `<hex size>;chunk-signature=<sig>\\r\\n
  <data>\\r\\n` ... `0;chunk-signature=<sig>\\r\\n\\r\\n`; each chunk's signature chains from
  the previous one (the first from the request's).
- `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: `<hex size>\\r\\n<data>\\r\\n` ... `0\\r\\n`, then
  trailer lines (`x-amz-checksum-crc32:<b64>`) and an empty line; the trailer checksum is
  checked.
- `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks as the first, the last one
  (`0;chunk-signature=<sig>\\r\\n`) followed by trailer lines and `x-amz-trailer-signature:
  <sig>`, which chains from the last chunk's signature over the trailer lines.

Every check is made before the last data goes down: the iterator holds each piece back until
the next is verified, so a body that fails a check raises (S3Error) with its end unsent, and the
object servers, cut short, store nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

from swiftlite.proxy.s3 import checksum
from swiftlite.proxy.s3.errors import S3Error, invalid_argument
from swiftlite.proxy.s3.sigv4 import (
    STREAMING,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED,
    V4,
    keyed,
    signature_mismatch,
)

READ = 64 * 1024
MAX_CHUNK = 16 * 1024 * 1024


def incomplete() -> S3Error:
    return S3Error("IncompleteBody", 400, "You did not provide the number of bytes specified "
                   "by the Content-Length HTTP header")


def bad_digest(what: str) -> S3Error:
    return S3Error("BadDigest", 400, f"The {what} you specified did not match the "
                   "calculated checksum.")


class Checks:
    """Digests a body must match, fed as it passes."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, bytes | None, str]] = []

    def add(self, hasher: Any, expected: bytes | None, what: str) -> Any:
        self.items.append((hasher, expected, what))
        return hasher

    def update(self, data: bytes) -> None:
        for h, _, _ in self.items:
            h.update(data)

    def verify(self) -> None:
        for h, expected, what in self.items:
            if expected is not None and h.digest() != expected:
                raise bad_digest(what)


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise invalid_argument(f"The {what} you specified is not valid.") from None


def header_checks(headers, trailer: bool, compute: str | None = None,
                  header_sums: bool = True) -> tuple[Checks, dict[str, Any]]:
    """The checks the request's headers ask for; trailer hashers by header name. `compute`
    names an algorithm whose checksum is wanted even if the client sent none."""
    checks = Checks()
    md5 = headers.get("Content-MD5")
    if md5 is not None:
        raw = _b64(md5, "Content-MD5")
        if len(raw) != 16:
            raise S3Error("InvalidDigest", 400, "The Content-MD5 you specified was invalid.")
        checks.add(hashlib.md5(usedforsecurity=False), raw, "Content-MD5")
    trailing: dict[str, Any] = {}
    names = [n.strip().lower() for n in headers.get("X-Amz-Trailer", "").split(",")
             if n.strip()] if trailer else []
    for name in names:
        h = checksum.hasher(name[len(checksum.PREFIX):]) \
            if name.startswith(checksum.PREFIX) else None
        if h is None:
            raise invalid_argument("Unsupported trailer", "x-amz-trailer", name)
        trailing[name] = h
    for algorithm, value in checksum.requested(headers) if header_sums else ():
        name = checksum.PREFIX + algorithm
        checks.add(checksum.hasher(algorithm), checksum.decode(name, value), name)
    if compute is not None and not any(n == checksum.PREFIX + compute
                                       for n in (*trailing, *(w for _, _, w in checks.items))):
        checks.add(checksum.hasher(compute), None, checksum.PREFIX + compute)
    return checks, trailing


async def _line(stream) -> bytes:
    try:
        line = await stream.readline()
    except ValueError:
        raise incomplete() from None
    if not line.endswith(b"\r\n"):
        raise incomplete()
    return line[:-2]


async def _exactly(stream, n: int) -> bytes:
    try:
        return await stream.readexactly(n)
    except Exception:  # IncompleteReadError: the client stopped short
        raise incomplete() from None


CHUNKED = (STREAMING, STREAMING_UNSIGNED_TRAILER, STREAMING_SIGNED_TRAILER)
TRAILER_SIGNATURE = "x-amz-trailer-signature"


def _check_trailer_signature(auth: V4, key: bytes | None, previous: str,
                             lines: list[tuple[str, str]]) -> None:
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER: the trailer's own signature, chained
    from the last chunk's, over its headers as `name:value\n` each (its signature line
    aside)."""
    given = [v for n, v in lines if n == TRAILER_SIGNATURE]
    text = "".join(f"{n}:{v}\n" for n, v in lines if n != TRAILER_SIGNATURE)
    sts = "\n".join(("AWS4-HMAC-SHA256-TRAILER", auth.amz_date, auth.scope, previous,
                     hashlib.sha256(text.encode("latin-1")).hexdigest()))
    want = keyed(key or b"").hexdigest(sts.encode())
    if len(given) != 1 or not hmac.compare_digest(want.encode(), given[0].encode()):
        raise signature_mismatch(auth.access_key)


def decoded_length(headers, mode: str) -> int | None:
    if mode in CHUNKED:
        value = headers.get("X-Amz-Decoded-Content-Length", "")
        if not value.isdigit():
            raise S3Error("MissingContentLength", 411, "You must provide the "
                          "x-amz-decoded-content-length header for an aws-chunked body.")
        return int(value)
    value = headers.get("Content-Length")
    return int(value) if value is not None and value.isdigit() else None


def payload_mode(auth: Any) -> str:
    """How the body is framed and signed: a V4 mode, or UNSIGNED (V2, presigned)."""
    if isinstance(auth, V4):
        mode = auth.payload_hash
        if mode.startswith("STREAMING-") and mode not in CHUNKED:
            raise S3Error("NotImplemented", 501, f"{mode} is not supported")
        return mode
    return UNSIGNED


async def body(request, auth: Any, key: bytes | None, length: int,
               found: dict[str, str] | None = None, compute: str | None = None,
               header_sums: bool = True) -> AsyncIterator[bytes]:
    """The request's decoded body, checked (see the module's docstring). `found` receives
    the additional checksums verified or computed (`x-amz-checksum-<algorithm>` -> base64),
    once the whole body has passed; `compute` names one to compute if the client sent none.
    `header_sums=False`: the x-amz-checksum-* headers are about something else (the object
    that CompleteMultipartUpload makes), not this body."""
    mode = payload_mode(auth)
    stream = request.get(_HELD) or request.content
    signed = mode in (STREAMING, STREAMING_SIGNED_TRAILER)
    trailer = mode in (STREAMING_UNSIGNED_TRAILER, STREAMING_SIGNED_TRAILER)
    checks, trailing = header_checks(request.headers, trailer, compute, header_sums)
    if mode not in (*CHUNKED, UNSIGNED):
        try:
            want = bytes.fromhex(mode)
        except ValueError:
            raise invalid_argument("x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                                   "STREAMING-... or a SHA-256 in hex", "x-amz-content-sha256",
                                   mode) from None
        sha = hashlib.sha256()
        checks.items.append((sha, want, "x-amz-content-sha256"))
    pending = b""
    total = 0
    if mode in CHUNKED:
        previous = getattr(auth, "signature", "")
        while True:
            header = await _line(stream)
            size_text, _, ext = header.partition(b";")
            try:
                size = int(size_text, 16)
            except ValueError:
                raise incomplete() from None
            if size > MAX_CHUNK or total + size > length:
                raise incomplete()
            data = await _exactly(stream, size) if size else b""
            if signed:
                if not ext.startswith(b"chunk-signature="):
                    raise incomplete()
                given = ext[len(b"chunk-signature="):]
                want_sig = auth.chunk_signature(key, previous,
                                                hashlib.sha256(data).hexdigest())
                if not hmac.compare_digest(want_sig.encode(), given):
                    raise signature_mismatch(auth.access_key)
                previous = want_sig
            if size or mode == STREAMING:
                if await _exactly(stream, 2) != b"\r\n":
                    raise incomplete()
            total += size
            checks.update(data)
            for h in trailing.values():
                h.update(data)
            if pending:
                yield pending
            pending = data
            if size == 0:
                break
        if trailer:
            lines: list[tuple[str, str]] = []
            while True:
                line = await _line(stream)
                if not line:
                    break
                name, _, value = line.decode("latin-1").partition(":")
                lines.append((name.strip().lower(), value.strip()))
            if signed:
                _check_trailer_signature(auth, key, previous, lines)
            for lname, value in lines:
                h = trailing.pop(lname, None)
                if h is not None:
                    if h.digest() != checksum.decode(lname, value):
                        raise bad_digest(lname)
                    if found is not None:
                        found[lname] = checksum.b64(h.digest())
            if trailing:
                raise S3Error("MalformedTrailerError", 400, "The request contained trailing "
                              "data that was not well-formed or did not conform to our "
                              "published schema.")
    else:
        while total < length:
            try:
                data = await stream.read(min(READ, length - total))
            except Exception:
                raise incomplete() from None
            if not data:
                raise incomplete()
            total += len(data)
            checks.update(data)
            if pending:
                yield pending
            pending = data
    if total != length:
        raise incomplete()
    checks.verify()
    if found is not None:
        for h, _, what in checks.items:
            if what.startswith(checksum.PREFIX):
                found[what] = checksum.b64(h.digest())
    if pending:
        yield pending


class _Held:
    """A body read ahead, served again to `body` as the stream it came from."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self, n: int = -1) -> bytes:
        out, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        return out


async def small_chunked(request, limit: int) -> int | None:
    """The length of a `Transfer-Encoding: chunked` body (no Content-Length) of at most
    `limit` bytes, read ahead and kept for `body`; None for any other body."""
    if "chunked" not in request.headers.get("Transfer-Encoding", "").lower() or \
            request.get(_HELD) is not None:
        return None
    data = b""
    while len(data) <= limit:
        piece = await request.content.read(limit + 1 - len(data))
        if not piece:
            request[_HELD] = _Held(data)
            return len(data)
        data += piece
    return None


_HELD = "swiftlite.s3.held_body"
