"""What a fragment archive stores beside its bytes, as object sysmeta (strings only).

An object server keeps these with the archive's .data and returns them on GET/HEAD, so a
reader given any archive knows how to find and decode the others: the scheme, the body's
length (archives alone cannot say where the body ends), which fragment index this archive
holds, the body's ETag (what the client is answered; the archive's own bytes have another
MD5) and the archive's MD5 (checked by whoever reads or audits the whole archive; range reads
rely on each fragment's own CRC instead, decode.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from swiftlite.common.ec.layout import Layout
from swiftlite.common.ec.scheme import ECError, ECScheme

EC_SCHEME = "X-Object-Sysmeta-Ec-Scheme"  # "<ec_type> <k>+<m>", e.g. "liberasurecode_rs_vand 4+2"
EC_SEGMENT_SIZE = "X-Object-Sysmeta-Ec-Segment-Size"
EC_CONTENT_LENGTH = "X-Object-Sysmeta-Ec-Content-Length"  # the body's, not the archive's
EC_FRAG_INDEX = "X-Object-Sysmeta-Ec-Frag-Index"  # 0..k+m-1; 0..k-1 hold the data
EC_ETAG = "X-Object-Sysmeta-Ec-Etag"  # the body's MD5 (hex): the object's ETag
EC_ARCHIVE_ETAG = "X-Object-Sysmeta-Ec-Archive-Etag"  # MD5 (hex) of this archive's bytes
KEYS = (EC_SCHEME, EC_SEGMENT_SIZE, EC_CONTENT_LENGTH, EC_FRAG_INDEX, EC_ETAG, EC_ARCHIVE_ETAG)
# What a proxy's footer carries instead of the archive's MD5: its fast check (xxh3-64,
# common/hashing.fast_check). The object server computes the MD5 of what it stores anyway and
# records that; six archive MD5s were a quarter of the proxy's CPU per EC PUT.
EC_ARCHIVE_CHECK = "X-Object-Sysmeta-Ec-Archive-Check"
FOOTER_KEYS = (*KEYS[:-1], EC_ARCHIVE_CHECK)

_SCHEME = re.compile(r"^([a-z0-9_]+) ([0-9]{1,2})\+([0-9]{1,2})$")
_MD5 = re.compile(r"^[0-9a-f]{32}$")
_INT = re.compile(r"^[0-9]{1,19}$")


class ECMetadataError(ECError, ValueError):
    """Archive metadata that is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class ArchiveInfo:
    scheme: ECScheme
    body_length: int
    frag_index: int
    etag: str
    archive_etag: str

    def __post_init__(self) -> None:
        if not 0 <= self.frag_index < self.scheme.n:
            raise ECMetadataError(
                f"fragment index {self.frag_index} outside 0..{self.scheme.n - 1}")
        if self.body_length < 0:
            raise ECMetadataError(f"negative body length {self.body_length}")
        for name in ("etag", "archive_etag"):
            if not _MD5.match(getattr(self, name)):
                raise ECMetadataError(f"{name} is not an MD5 in hex: {getattr(self, name)!r}")

    @property
    def layout(self) -> Layout:
        return Layout(self.scheme, self.body_length)

    def to_metadata(self) -> dict[str, str]:
        s = self.scheme
        return {EC_SCHEME: f"{s.ec_type} {s.k}+{s.m}", EC_SEGMENT_SIZE: str(s.segment_size),
                EC_CONTENT_LENGTH: str(self.body_length), EC_FRAG_INDEX: str(self.frag_index),
                EC_ETAG: self.etag, EC_ARCHIVE_ETAG: self.archive_etag}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> ArchiveInfo:
        """Parsed from an archive's metadata (header names matched case-insensitively)."""
        lower = {k.lower(): v for k, v in metadata.items()}

        def get(key: str) -> str:
            value = lower.get(key.lower())
            if value is None:
                raise ECMetadataError(f"missing {key}")
            return value.strip()

        def integer(key: str) -> int:
            value = get(key)
            if not _INT.match(value):
                raise ECMetadataError(f"{key} is not a non-negative integer: {value!r}")
            return int(value)

        m = _SCHEME.match(get(EC_SCHEME))
        if not m:
            raise ECMetadataError(f"{EC_SCHEME} is not '<ec_type> <k>+<m>': {get(EC_SCHEME)!r}")
        try:
            scheme = ECScheme(int(m.group(2)), int(m.group(3)), m.group(1),
                              integer(EC_SEGMENT_SIZE))
        except ECMetadataError:
            raise
        except ECError as e:
            raise ECMetadataError(str(e)) from e
        return cls(scheme, integer(EC_CONTENT_LENGTH), integer(EC_FRAG_INDEX),
                   get(EC_ETAG).lower(), get(EC_ARCHIVE_ETAG).lower())

    def check_archive(self, archive: bytes | bytearray | memoryview) -> None:
        """Raise ECMetadataError unless `archive` (a whole archive) has the length and MD5
        this metadata says: what catches a flip in bytes no fragment checksum covers."""
        if len(archive) != self.layout.archive_length:
            raise ECMetadataError(f"archive {self.frag_index} has {len(archive)} bytes, "
                                  f"not {self.layout.archive_length}")
        if hashlib.md5(archive).hexdigest() != self.archive_etag:
            raise ECMetadataError(f"archive {self.frag_index} does not match its MD5")
