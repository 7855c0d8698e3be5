"""Streaming encoder: body chunks in, bytes to append to each of the k + m archives out.

The body's length need not be known in advance (chunked uploads): the encoder cuts full
segments as they fill and the last, short one at `finish()`, so it holds at most one
segment of the body (less the chunk being fed). It also computes what the archives'
metadata needs: the body's MD5 (its ETag), its length and each archive's fast check (for a
footer, `footer_metadata`) or, with `archive_md5`, its MD5 (for a whole `ArchiveInfo`).
"""

from __future__ import annotations

import hashlib

import xxhash

from swiftlite.common.ec.meta import (
    EC_ARCHIVE_CHECK,
    EC_ARCHIVE_ETAG,
    ArchiveInfo,
)
from swiftlite.common.ec.scheme import ECScheme
from swiftlite.common.hashing import fast_check


class Encoder:
    def __init__(self, scheme: ECScheme, archive_md5: bool = True) -> None:
        self.scheme = scheme
        self._buf = bytearray()
        self._body_md5 = hashlib.md5()
        self._archive_sums: list = [hashlib.md5() if archive_md5 else xxhash.xxh3_64()
                                    for _ in range(scheme.n)]
        self._md5 = archive_md5
        self.body_length = 0
        self.archive_length = 0
        self.finished = False

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Bytes to append to each archive (index i: archive i) for this chunk of the body;
        all empty while no segment is complete."""
        if self.finished:
            raise ValueError("feed() after finish()")
        view = memoryview(data).cast("B")
        self._body_md5.update(view)
        self.body_length += len(view)
        size = self.scheme.segment_size
        segments: list[list[bytes]] = []
        if self._buf:  # top up the held segment first
            take = size - len(self._buf)
            self._buf += view[:take]
            view = view[take:]
            if len(self._buf) < size:
                return self._out(segments)
            segments.append(self.scheme.encode_segment(bytes(self._buf)))
            self._buf.clear()
        # Whole segments straight from the chunk (a full segment is the same whether or not
        # it turns out to be the last); only the short tail is held.
        while len(view) >= size:
            segments.append(self.scheme.encode_segment(bytes(view[:size])))
            view = view[size:]
        self._buf += view
        return self._out(segments)

    def finish(self) -> list[bytes]:
        """The archives' last bytes (the last segment's fragments; none for an empty body)."""
        if self.finished:
            raise ValueError("finish() called twice")
        self.finished = True
        segments = [self.scheme.encode_segment(bytes(self._buf))] if self._buf else []
        self._buf = bytearray()
        return self._out(segments)

    def _out(self, segments: list[list[bytes]]) -> list[bytes]:
        if not segments:
            return [b""] * self.scheme.n
        if len(segments) == 1:
            out = segments[0]
        else:
            out = [b"".join(seg[i] for seg in segments) for i in range(self.scheme.n)]
        for h, piece in zip(self._archive_sums, out, strict=True):
            h.update(piece)
        self.archive_length += len(out[0])
        return out

    @property
    def etag(self) -> str:
        """MD5 (hex) of the body fed so far: the object's ETag once finished."""
        return self._body_md5.hexdigest()

    def archive_etag(self, index: int) -> str:
        """MD5 (hex) of archive `index`'s bytes returned so far (with `archive_md5`)."""
        if not self._md5:
            raise ValueError("an Encoder made without archive_md5 keeps no archive MD5")
        return self._archive_sums[index].hexdigest()

    def archive_info(self, index: int) -> ArchiveInfo:
        """What archive `index` stores beside its bytes (call after finish(); needs
        `archive_md5`)."""
        if not self.finished:
            raise ValueError("archive_info() before finish()")
        return ArchiveInfo(self.scheme, self.body_length, index, self.etag,
                           self.archive_etag(index))

    def footer_metadata(self, index: int) -> dict[str, str]:
        """What archive `index`'s footer says (call after finish()): its ArchiveInfo with
        the archive's fast check in place of its MD5, which the object server computes."""
        if not self.finished:
            raise ValueError("footer_metadata() before finish()")
        if self._md5:
            return self.archive_info(index).to_metadata()
        md = ArchiveInfo(self.scheme, self.body_length, index, self.etag,
                         "0" * 32).to_metadata()
        del md[EC_ARCHIVE_ETAG]
        md[EC_ARCHIVE_CHECK] = fast_check(self._archive_sums[index])
        return md
