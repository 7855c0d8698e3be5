"""Decoding a body, or a range of it, segment by segment from any k of its k + m archives.

Each segment is decoded from k fragments that passed their check: right length, a header
pyeclib accepts, the fragment index and segment length expected, and the payload's CRC
(pyeclib's decode itself would decode a corrupted payload silently into wrong bytes). A
fragment that fails, or an archive that cannot be read, is replaced by one of another
archive when more than k were given; the failing archive is tried last from then on.

Archives are bytes-like (random access) or readers (`ArchiveReader`): a reader is asked only
for the fragments of the segments being decoded, one segment at a time, so neither a range
read nor a whole one needs an archive in memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol, runtime_checkable

from swiftlite.common.ec.frag_header import fragment_ok, join_data
from swiftlite.common.ec.layout import Layout
from swiftlite.common.ec.scheme import ECDecodeError, ECScheme, as_bytes


@runtime_checkable
class ArchiveReader(Protocol):
    def read_range(self, first: int, last: int) -> bytes:
        """Bytes first..last (inclusive) of the archive; may raise (the archive then counts
        as lost for this segment) or return fewer bytes (the fragment then fails its check)."""
        ...


Archive = bytes | bytearray | memoryview | ArchiveReader


def fragment_problem(scheme: ECScheme, fragment: bytes | memoryview, index: int,
                     segment_length: int, fragment_length: int) -> str | None:
    """Why `fragment` cannot be segment data at `index`, or None when it checks out (read
    in Python when the header allows, frag_header.py; else, and to say why not, by
    pyeclib)."""
    from pyeclib.ec_iface import ECDriverError
    if fragment_ok(scheme, fragment, index, segment_length, fragment_length):
        return None
    if len(fragment) != fragment_length:
        return f"{len(fragment)} bytes, not {fragment_length}"
    fragment = as_bytes(fragment)
    try:
        # Verifies the header's own checksum and computes the payload's CRC.
        info = scheme.driver.get_metadata(fragment, 1)
    except ECDriverError as e:
        return f"bad header ({e.__class__.__name__})"
    if info["chksum_mismatch"]:
        return "payload checksum mismatch"
    if info["index"] != index:
        return f"holds fragment index {info['index']}"
    if info["orig_data_size"] != segment_length:
        return f"is of a {info['orig_data_size']}-byte segment, not {segment_length}"
    if info["backend_id"] != scheme.ec_type:
        return f"was made by {info['backend_id']}"
    return None


def decode_segment(scheme: ECScheme, segment_length: int,
                   fragments: Mapping[int, bytes]) -> bytes:
    """One segment from k or more of its fragments (index -> fragment), each checked first."""
    fragment_length = scheme.fragment_size(segment_length)
    good: list[bytes] = []
    problems: list[str] = []
    for index in sorted(fragments):
        if len(good) == scheme.k:
            break
        fragment = as_bytes(fragments[index])
        problem = fragment_problem(scheme, fragment, index, segment_length, fragment_length)
        if problem:
            problems.append(f"fragment {index}: {problem}")
        else:
            good.append(fragment)
    return _decode(scheme, segment_length, good, problems)


def decode_checked(scheme: ECScheme, segment_length: int,
                   fragments: list[bytes | memoryview]) -> bytes:
    """One segment from k fragments the caller already checked with `fragment_problem`
    (a streaming reader checks each as it arrives, to know which archive to replace)."""
    return _decode(scheme, segment_length, fragments, [])


def _decode(scheme: ECScheme, segment_length: int, good: list[bytes | memoryview],
            problems: list[str]) -> bytes:
    from pyeclib.ec_iface import ECDriverError
    if len(good) < scheme.k:
        raise ECDecodeError(f"{len(good)} good fragments of the {scheme.k} needed"
                            + (f" ({'; '.join(problems)})" if problems else ""))
    # The k data fragments, in order: the segment is their payloads (a copy, no pyeclib).
    data = join_data(scheme, segment_length, good[:scheme.k])
    if data is not None and len(data) == segment_length:
        return data
    try:
        data = scheme.driver.decode([as_bytes(f) for f in good])
    except ECDriverError as e:
        raise ECDecodeError(f"pyeclib could not decode checked fragments: {e}") from e
    if len(data) != segment_length:
        raise ECDecodeError(f"decoded {len(data)} bytes, not {segment_length}")
    return data


def decode_segments(scheme: ECScheme, body_length: int, archives: Mapping[int, Archive],
                    first_segment: int = 0, last_segment: int | None = None) -> Iterator[bytes]:
    """Segments first_segment..last_segment (default: to the end) of the body, decoded one
    at a time from `archives` (fragment index -> archive). Raises ECDecodeError at the first
    segment that fewer than k archives can give."""
    layout = Layout(scheme, body_length)
    if last_segment is None:
        last_segment = layout.num_segments - 1
    for index in archives:
        if not 0 <= index < scheme.n:
            raise ValueError(f"fragment index {index} outside 0..{scheme.n - 1}")
    # Data fragments first: decoding from fragments 0..k-1 is a copy, not arithmetic.
    # A failure sends an archive to the back of the queue (`failures` sorts first).
    failures = dict.fromkeys(archives, 0)
    for j in range(first_segment, last_segment + 1):
        segment_length = layout.segment_length(j)
        first, last = layout.fragment_range(j)
        good: list[bytes] = []
        problems: list[str] = []
        for index in sorted(archives, key=lambda i: (failures[i], i)):
            if len(good) == scheme.k:
                break
            try:
                fragment = _read(archives[index], first, last)
            except Exception as e:  # a reader's failure is one lost fragment, whatever it is
                problem: str | None = f"unreadable ({e.__class__.__name__}: {e})"
            else:
                problem = fragment_problem(scheme, fragment, index, segment_length,
                                           last - first + 1)
            if problem:
                failures[index] += 1
                problems.append(f"archive {index}: {problem}")
            else:
                good.append(fragment)
        try:
            yield _decode(scheme, segment_length, good, problems)
        except ECDecodeError as e:
            raise ECDecodeError(f"segment {j} of {layout.num_segments}: {e}") from None


def decode_range(scheme: ECScheme, body_length: int, archives: Mapping[int, Archive],
                 first: int, last: int) -> Iterator[bytes]:
    """Body bytes first..last (inclusive), in pieces of at most a segment, reading only the
    fragments of the segments they lie in (`Layout.plan(first, last).archive_range`)."""
    plan = Layout(scheme, body_length).plan(first, last)
    segments = decode_segments(scheme, body_length, archives, plan.first_segment,
                               plan.last_segment)
    for j, segment in zip(plan.segments, segments, strict=True):
        piece = plan.trim(j, segment, scheme.segment_size)
        if piece:
            yield piece


def decode_body(scheme: ECScheme, body_length: int, archives: Mapping[int, Archive]) -> bytes:
    """The whole body (tests, tools; a server streams decode_segments instead)."""
    return b"".join(decode_segments(scheme, body_length, archives))


def _read(archive: Archive, first: int, last: int) -> bytes:
    if isinstance(archive, bytes | bytearray | memoryview):
        return as_bytes(archive[first:last + 1])
    return as_bytes(archive.read_range(first, last))
