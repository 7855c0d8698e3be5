"""S3's additional checksums: CRC32, CRC32C, CRC64NVME, SHA-1 and SHA-256.

A PUT (or UploadPart) may carry `x-amz-checksum-<algorithm>: <base64>` or name one in
`x-amz-trailer` of an aws-chunked body; payload.py verifies it as the body streams (BadDigest,
nothing stored, on a mismatch). The value is kept as object sysmeta, `X-Object-Sysmeta-S3-
Checksum: <algorithm> <TYPE> <base64>`, and shown on GET/HEAD only to a request with
`x-amz-checksum-mode: ENABLED` (never on a range: it is the whole object's).

A multipart upload names its algorithm (and type) at creation; the marker keeps it as
`X-Object-Sysmeta-S3-Checksum-Algorithm: <algorithm> <TYPE>`, and every part's checksum in
that algorithm is computed (or verified, when the client sent one) and kept on the part. The
completed object's checksum is, for COMPOSITE, the checksum of the concatenated raw part
checksums with `-<parts>` appended; for FULL_OBJECT (CRCs only), the CRC of the whole object,
combined from the parts' CRCs and sizes without reading the data again.

The CRCs come from awscrt (the AWS common runtime, which botocore itself uses for CRC32C and
CRC64NVME): a few ms per 8 MiB in C, where a pure-Python CRC would hold the event loop for
seconds.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from awscrt import checksums as crt

from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.errors import S3Error

SYSMETA = "X-Object-Sysmeta-S3-Checksum"
UPLOAD_SYSMETA = "X-Object-Sysmeta-S3-Checksum-Algorithm"
PREFIX = "x-amz-checksum-"
# algorithm -> (digest bytes, S3's member name suffix)
ALGORITHMS = {"crc32": (4, "CRC32"), "crc32c": (4, "CRC32C"), "crc64nvme": (8, "CRC64NVME"),
              "sha1": (20, "SHA1"), "sha256": (32, "SHA256")}
CRCS: dict[str, tuple[Callable[..., int], Callable[[int, int, int], int]]] = {
    "crc32": (crt.crc32, crt.combine_crc32),
    "crc32c": (crt.crc32c, crt.combine_crc32c),
    "crc64nvme": (crt.crc64nvme, crt.combine_crc64nvme),
}
COMPOSITE, FULL_OBJECT = "COMPOSITE", "FULL_OBJECT"


class Crc:
    """A CRC fed piece by piece, with hashlib's update/digest."""

    def __init__(self, algorithm: str) -> None:
        self.fn = CRCS[algorithm][0]
        self.width = ALGORITHMS[algorithm][0]
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = self.fn(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(self.width, "big")


def hasher(algorithm: str) -> Any:
    """A hasher for `algorithm` (lowercase), None for one S3 does not define here."""
    if algorithm in CRCS:
        return Crc(algorithm)
    if algorithm in ("sha1", "sha256"):
        return hashlib.new(algorithm)
    return None


def invalid_request(message: str) -> S3Error:
    return S3Error("InvalidRequest", 400, message)


def bad_digest(name: str) -> S3Error:
    return S3Error("BadDigest", 400, f"The {name} you specified did not match the "
                   "calculated checksum.")


def decode(name: str, value: str) -> bytes:
    """The raw checksum of header `name` (`x-amz-checksum-<algorithm>`); a value that is no
    checksum of that algorithm cannot match the body: BadDigest."""
    width = ALGORITHMS[name[len(PREFIX):]][0]
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise bad_digest(name) from None
    if len(raw) != width:
        raise bad_digest(name)
    return raw


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def requested(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The request's `x-amz-checksum-<algorithm>` headers as (algorithm, value); more than
    one is InvalidRequest, as S3 has it."""
    found = []
    for k, v in headers.items():
        lk = k.lower()
        if lk.startswith(PREFIX) and lk[len(PREFIX):] in ALGORITHMS:
            found.append((lk[len(PREFIX):], v))
    if len(found) > 1:
        raise invalid_request("Expecting a single x-amz-checksum- header. Multiple checksum "
                              "Types are not allowed.")
    return found


def stored_value(algorithm: str, value: str, kind: str = FULL_OBJECT) -> str:
    return f"{algorithm} {kind} {value}"


def parse_stored(value: str | None) -> tuple[str, str, str] | None:
    """(algorithm, type, base64 value) of SYSMETA's value, None when absent or unreadable."""
    if not value:
        return None
    parts = value.split(" ")
    if len(parts) != 3 or parts[0] not in ALGORITHMS:
        return None
    return parts[0], parts[1], parts[2]


def headers_of(stored: tuple[str, str, str] | None) -> dict[str, str]:
    """The response headers that show a stored checksum."""
    if stored is None:
        return {}
    algorithm, kind, value = stored
    return {PREFIX + algorithm: value, "x-amz-checksum-type": kind}


def wanted(request_headers: Mapping[str, str]) -> bool:
    return request_headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"


# ---- multipart -------------------------------------------------------------------------------

def upload_choice(headers: Mapping[str, str]) -> str | None:
    """The marker's `<algorithm> <TYPE>` for CreateMultipartUpload's headers (None: no
    checksum); a combination S3 refuses is InvalidRequest."""
    algorithm = headers.get("x-amz-checksum-algorithm", "").strip().lower()
    kind = headers.get("x-amz-checksum-type", "").strip().upper()
    if not algorithm:
        if kind:
            raise invalid_request("The x-amz-checksum-type header can only be used with the "
                                  "x-amz-checksum-algorithm header.")
        return None
    if algorithm not in ALGORITHMS:
        raise invalid_request("Checksum algorithm provided is unsupported. Please try again "
                              "with any of the valid types: [CRC32, CRC32C, CRC64NVME, SHA1, "
                              "SHA256]")
    if not kind:
        kind = FULL_OBJECT if algorithm == "crc64nvme" else COMPOSITE
    if kind not in (COMPOSITE, FULL_OBJECT) or (kind == FULL_OBJECT and algorithm not in CRCS) \
            or (kind == COMPOSITE and algorithm == "crc64nvme"):
        raise invalid_request(f"The {kind} checksum type cannot be used with the "
                              f"{algorithm.upper()} checksum algorithm.")
    return f"{algorithm} {kind}"


def parse_choice(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    algorithm, _, kind = value.partition(" ")
    return (algorithm, kind) if algorithm in ALGORITHMS and kind else None


def combined(algorithm: str, kind: str, parts: list[tuple[bytes, int]]) -> str:
    """The completed object's checksum from its parts' (raw checksum, size), in order."""
    if kind == FULL_OBJECT:
        combine = CRCS[algorithm][1]
        crc = int.from_bytes(parts[0][0], "big")
        for raw, size in parts[1:]:
            crc = combine(crc, int.from_bytes(raw, "big"), size)
        return b64(crc.to_bytes(ALGORITHMS[algorithm][0], "big"))
    h = hasher(algorithm)
    for raw, _ in parts:
        h.update(raw)
    return f"{b64(h.digest())}-{len(parts)}"


def member(algorithm: str) -> str:
    """S3's XML member name: `ChecksumSHA256`."""
    return "Checksum" + ALGORITHMS[algorithm][1]


# ---- hooks for PUT / UploadPart (obj.store) ------------------------------------------------

# A body whose checksum comes in a trailer is buffered up to this size, so that its value,
# known only at the end, can still go down with the PUT as sysmeta (a larger one is verified
# but its checksum is not kept).
TRAILER_BUFFER = 16 * 1024 * 1024


def buffer_whole(headers: Mapping[str, str], length: int, compute: str | None) -> bool:
    """Whether the checksum to keep is known only once the body has passed."""
    sent = [a for a, _ in requested(headers)]
    late = (compute is not None and compute not in sent) or (not sent and any(
        n.strip().lower().startswith(PREFIX) for n in headers.get("X-Amz-Trailer", "")
        .split(",")))
    return late and length <= TRAILER_BUFFER


def keep(headers: Any, request_headers: Mapping[str, str], found: Mapping[str, str],
         compute: str | None = None) -> None:
    """The object's SYSMETA: the checksum in `compute`'s algorithm (a multipart upload's),
    else the one the client sent in a header (known before the body, which is refused if it
    does not match), else one trailed (known once the body was buffered)."""
    sent = requested(request_headers)
    if compute is not None:
        value = next((v.strip() for a, v in sent if a == compute), None) or \
            found.get(PREFIX + compute)
        if value:
            headers[SYSMETA] = stored_value(compute, value)
        return
    if sent:
        headers[SYSMETA] = stored_value(sent[0][0], sent[0][1].strip())
        return
    for name, value in found.items():
        headers[SYSMETA] = stored_value(name[len(PREFIX):], value)
        return


def echo(s3: Any) -> dict[str, str]:
    """The checksum headers a PUT / UploadPart answers with."""
    out = {PREFIX + a: v.strip() for a, v in requested(s3.request.headers)}
    for name, value in s3.extra.get("checksums", {}).items():
        out.setdefault(name, value)
    if out:
        out["x-amz-checksum-type"] = FULL_OBJECT
    return out


# ---- hooks for multipart uploads (multipart.py) --------------------------------------------

def create_headers(choice: str | None) -> dict[str, str]:
    """CreateMultipartUpload's answer headers for the marker's choice."""
    parsed = parse_choice(choice)
    if parsed is None:
        return {}
    return {"x-amz-checksum-algorithm": parsed[0].upper(), "x-amz-checksum-type": parsed[1]}


async def stored_of(s3: Any, container: str, names: list[str],
                    fanout: int = 16) -> list[tuple[str, str, str] | None]:
    """The stored checksums of objects in a reserved container (parts), in order."""
    limit = asyncio.Semaphore(fanout)

    async def one(name: str) -> tuple[str, str, str] | None:
        async with limit:
            head = await s3.swift("HEAD", container, name, reserved=True)
            close_answer(head)
            return parse_stored(head.headers.get(SYSMETA)) if head.status // 100 == 2 \
                else None
    return list(await asyncio.gather(*(one(n) for n in names)))


def complete(choice: tuple[str, str], request_headers: Mapping[str, str],
             given: list[str | None], stored: list[tuple[str, str, str] | None],
             sizes: list[int]) -> str:
    """The completed upload's checksum from its parts' stored ones; a part checksum the
    client names that differs from the stored one is InvalidPart, a whole-object one that
    differs from ours BadDigest."""
    algorithm, kind = choice
    raws = []
    for number, (want, have) in enumerate(zip(given, stored, strict=True), 1):
        if have is None or have[0] != algorithm:
            raise invalid_request(f"Part {number} has no {algorithm.upper()} checksum; the "
                                  "upload was created with that checksum algorithm.")
        if want is not None and want.strip() != have[2]:
            raise S3Error("InvalidPart", 400, "One or more of the specified parts could not "
                          "be found.  The part may not have been uploaded, or the specified "
                          "entity tag may not match the part's entity tag.",
                          PartNumber=number)
        raws.append(base64.b64decode(have[2]))
    value = combined(algorithm, kind, list(zip(raws, sizes, strict=True)))
    for name, sent in requested(request_headers):
        name = PREFIX + name
        if name != PREFIX + algorithm or sent.strip() not in (value, value.split("-")[0]):
            raise bad_digest(name)
    return value


def xml_members(parent: Any, stored: tuple[str, str, str] | None) -> None:
    """Checksum<ALGORITHM> and ChecksumType elements of an XML answer."""
    if stored is None:
        return
    xml.sub(parent, member(stored[0]), stored[2])
    xml.sub(parent, "ChecksumType", stored[1])
