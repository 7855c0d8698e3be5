"""Byte ranges and conditional requests for GET/HEAD, with Swift's (RFC 7233/7232) rules.

A malformed Range header is ignored (the whole object is served), as Swift does; a valid one
none of whose ranges can be satisfied is a 416.
"""

from __future__ import annotations

import email.utils
import os

# Request headers besides its name that a read's answer depends on: its conditions, and Range.
CONDITIONS = ("If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since")
RANGE_AND_CONDITIONS = ("Range", *CONDITIONS)
MAX_RANGES = 50  # more than this and the header is ignored (defends against amplification)
# Larger than any object: a bound past it is as good as infinite. Client-chosen digit strings
# are never given to int() whole (Python refuses more than 4,300 digits: a 500 on every
# replica, which would once have error-limited them all).
HUGE = 10**18
_HUGE_DIGITS = len(str(HUGE))


def _digits(text: str) -> str | None:
    """ASCII digits without leading zeros ("0" for zero); None if not a number. (str.isdigit
    alone takes "²" and Arabic-Indic digits.)"""
    if not text.isascii() or not text.isdigit():
        return None
    return text.lstrip("0") or "0"


def _value(digits: str) -> int:
    return HUGE if len(digits) >= _HUGE_DIGITS else int(digits)


def _less(a: str, b: str) -> bool:
    """a < b for digit strings without leading zeros, of any length."""
    return (len(a), a) < (len(b), b)


def parse_range(header: str | None, length: int) -> list[tuple[int, int]] | None:
    """[(start, end exclusive)] satisfiable ranges; None to ignore the header; [] for 416."""
    if not header:
        return None
    units, sep, spec = header.strip().partition("=")
    if not sep or units.strip().lower() != "bytes":
        return None
    parsed: list[tuple[int | None, int | None]] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        first, last = first.strip(), last.strip()
        if not dash or (not first and not last):
            return None
        da = _digits(first) if first else ""
        db = _digits(last) if last else ""
        if da is None or db is None or (da and db and _less(db, da)):
            return None
        parsed.append((_value(da) if da else None, _value(db) if db else None))
    if not parsed or len(parsed) > MAX_RANGES:
        return None
    out: list[tuple[int, int]] = []
    for a, b in parsed:
        if a is None:  # suffix range: the last b bytes
            if b == 0 or length == 0:
                continue
            out.append((max(0, length - b), length))
        elif a < length:
            out.append((a, length if b is None else min(b + 1, length)))
    return out


def _etags(header: str) -> list[str]:
    return [t.strip().removeprefix("W/").strip('"') for t in header.split(",") if t.strip()]


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        dt = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    return dt.timestamp()


def check_conditions(headers, etag: str, last_modified: int) -> int | None:
    """The status a conditional GET/HEAD answers instead of 200 (304/412), or None.

    `last_modified` is whole seconds (as sent in Last-Modified).
    """
    im = headers.get("If-Match")
    if im is not None:
        tags = _etags(im)
        if "*" not in tags and etag not in tags:
            return 412
    inm = headers.get("If-None-Match")
    if inm is not None:
        tags = _etags(inm)
        if "*" in tags or etag in tags:
            return 304
    ius = _http_date(headers.get("If-Unmodified-Since"))
    if ius is not None and last_modified > ius:
        return 412
    if inm is None:
        ims = _http_date(headers.get("If-Modified-Since"))
        if ims is not None and last_modified <= ims:
            return 304
    return None


def boundary() -> str:
    return os.urandom(16).hex()


def multipart_parts(ranges: list[tuple[int, int]], length: int, content_type: str,
                    bound: str) -> tuple[list[bytes], bytes, int]:
    """(a header block per range, closing delimiter, total body length) of a byteranges body."""
    heads = []
    total = 0
    for a, b in ranges:
        h = (f"--{bound}\r\nContent-Type: {content_type}\r\n"
             f"Content-Range: bytes {a}-{b - 1}/{length}\r\n\r\n").encode()
        heads.append(h)
        total += len(h) + (b - a) + 2  # body + CRLF after it
    tail = f"--{bound}--\r\n".encode()
    return heads, tail, total + len(tail)
