"""Streaming encoder: body chunks in, bytes to append to each of the k + m archives out.

The body's length need not be known in advance (chunked uploads): the encoder cuts full
segments as they fill and the last, short one at `finish()`, so it holds at most one
segment of the body (less the chunk being fed). It also computes what the archives'
metadata needs: the body's MD5 (its ETag), its length and the MD5 of each archive.
"""

from __future__ import annotations

import hashlib

from swiftlite.common.ec.meta import ArchiveInfo
from swiftlite.common.ec.scheme import ECScheme


class Encoder:
    def __init__(self, scheme: ECScheme) -> None:
        self.scheme = scheme
        self._buf = bytearray()
        self._body_md5 = hashlib.md5()
        self._archive_md5 = [hashlib.md5() for _ in range(scheme.n)]
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
        for md5, piece in zip(self._archive_md5, out, strict=True):
            md5.update(piece)
        self.archive_length += len(out[0])
        return out

    @property
    def etag(self) -> str:
        """MD5 (hex) of the body fed so far: the object's ETag once finished."""
        return self._body_md5.hexdigest()

    def archive_etag(self, index: int) -> str:
        """MD5 (hex) of archive `index`'s bytes returned so far."""
        return self._archive_md5[index].hexdigest()

    def archive_info(self, index: int) -> ArchiveInfo:
        """What archive `index` stores beside its bytes (call after finish())."""
        if not self.finished:
            raise ValueError("archive_info() before finish()")
        return ArchiveInfo(self.scheme, self.body_length, index, self.etag,
                           self.archive_etag(index))
