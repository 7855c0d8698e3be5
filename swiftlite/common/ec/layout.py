"""Where a body's bytes sit in its fragment archives, and which archive bytes a range needs.

A body of L bytes is cut into segments of `segment_size` bytes, the last one short (1 to
segment_size bytes; none at all for an empty body). Each segment is encoded on its own into
k + m fragments, all of one size; fragment archive i is fragment i of every segment, in
order. Every segment but the last is full, so its fragments all have the full segment's
fragment size F, and segment j's fragment starts at j * F in every archive: a range of the
body maps to one contiguous byte range of each archive, known from L and the scheme alone.

(pyeclib's get_segment_info would fold a short last segment into the one before it; this
layout does not, so an encoder streaming a body of unknown length never holds more than one
segment, and offsets stay j * F.)
"""

from __future__ import annotations

from dataclasses import dataclass

from swiftlite.common.ec.scheme import ECScheme


@dataclass(frozen=True)
class Layout:
    """The segments of one body of `body_length` bytes under `scheme`."""

    scheme: ECScheme
    body_length: int

    def __post_init__(self) -> None:
        if self.body_length < 0:
            raise ValueError(f"negative body length {self.body_length}")

    @property
    def num_segments(self) -> int:
        return -(-self.body_length // self.scheme.segment_size)

    def segment_length(self, j: int) -> int:
        """Body bytes in segment j."""
        self._check(j)
        if j < self.num_segments - 1:
            return self.scheme.segment_size
        return self.body_length - j * self.scheme.segment_size

    def fragment_length(self, j: int) -> int:
        """Bytes of each of segment j's fragments."""
        return self.scheme.fragment_size(self.segment_length(j))

    def fragment_range(self, j: int) -> tuple[int, int]:
        """Segment j's fragment in every archive: (first, last) byte, inclusive."""
        self._check(j)
        start = j * self.scheme.fragment_size()
        return start, start + self.fragment_length(j) - 1

    @property
    def archive_length(self) -> int:
        """Bytes of every fragment archive (all k + m have this length)."""
        if self.num_segments == 0:
            return 0
        return self.fragment_range(self.num_segments - 1)[1] + 1

    def segment_of(self, offset: int) -> int:
        """The segment holding body byte `offset`."""
        if not 0 <= offset < self.body_length:
            raise ValueError(f"offset {offset} outside a body of {self.body_length} bytes")
        return offset // self.scheme.segment_size

    def plan(self, first: int, last: int) -> RangePlan:
        """How to read body bytes first..last (inclusive, as in an HTTP Range): the caller
        resolves open and suffix ranges against the body length first."""
        if not 0 <= first <= last < self.body_length:
            raise ValueError(f"range {first}-{last} outside a body of {self.body_length} bytes")
        first_seg, last_seg = self.segment_of(first), self.segment_of(last)
        return RangePlan(
            first_segment=first_seg, last_segment=last_seg,
            archive_range=(self.fragment_range(first_seg)[0], self.fragment_range(last_seg)[1]),
            skip=first - first_seg * self.scheme.segment_size, length=last - first + 1)

    def _check(self, j: int) -> None:
        if not 0 <= j < self.num_segments:
            raise IndexError(f"segment {j} of {self.num_segments}")


@dataclass(frozen=True)
class RangePlan:
    """A client range as segments and archive bytes.

    - segments `first_segment..last_segment` (inclusive) hold the range;
    - `archive_range` (first, last inclusive) is what to read from each archive used, the
      same for all of them: those segments' fragments, back to back;
    - of the decoded segments, concatenated, the client's bytes are `length` bytes from
      `skip` (`trim` applies it one segment at a time).
    """

    first_segment: int
    last_segment: int
    archive_range: tuple[int, int]
    skip: int
    length: int

    @property
    def segments(self) -> range:
        return range(self.first_segment, self.last_segment + 1)

    def trim(self, j: int, segment: bytes, segment_size: int) -> bytes:
        """The client's part of decoded segment j."""
        start, end = self.bounds(j, len(segment), segment_size)
        return segment[start:end]

    def bounds(self, j: int, segment_length: int, segment_size: int) -> tuple[int, int]:
        """Where the client's part of segment j (`segment_length` bytes) starts and ends."""
        start = self.skip if j == self.first_segment else 0
        # The client's bytes end at skip + length past the first segment's start.
        end = self.skip + self.length - (j - self.first_segment) * segment_size
        return start, min(end, segment_length)
