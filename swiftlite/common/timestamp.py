"""Timestamps: the one clock every write is ordered by (newest wins everywhere).

A timestamp is seconds since the epoch with 5 decimals ("1700000000.12345"), optionally
followed by "_" and a 16-hex-digit offset that orders internal writes made at the same
instant (e.g. a tombstone reclaimed and rewritten). Fixed width keeps string order equal
to time order, so file names and SQLite columns sort correctly as plain text.
"""

from __future__ import annotations

import functools
import time
from functools import total_ordering

PRECISION = 5
_SCALE = 10**PRECISION
_MAX_TICKS = 10**(10 + PRECISION)  # year 2286


@functools.lru_cache(maxsize=4096)
def _http_date(secs: int) -> str:
    # Every GET and HEAD formats one; objects written in the same second share it.
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(secs))


class TimestampError(ValueError):
    pass


@total_ordering
class Timestamp:
    __slots__ = ("ticks", "offset")

    def __init__(self, ticks: int, offset: int = 0) -> None:
        if not 0 <= ticks < _MAX_TICKS:
            raise TimestampError("timestamp out of range")
        if not 0 <= offset < 2**64:
            raise TimestampError("timestamp offset out of range")
        self.ticks = ticks
        self.offset = offset

    @classmethod
    def now(cls) -> Timestamp:
        return cls(int(time.time() * _SCALE))

    @classmethod
    def parse(cls, value: str | float | Timestamp) -> Timestamp:
        """Accept "1700000000.12345", "1700000000.1", "1700000000", "..._000000000000000a"."""
        if isinstance(value, Timestamp):
            return value
        if isinstance(value, float):
            return cls(int(round(value * _SCALE)))
        s = str(value).strip()
        offset = 0
        if "_" in s:
            s, off = s.split("_", 1)
            if not off or len(off) > 16:
                raise TimestampError(f"bad timestamp offset {value!r}")
            try:
                offset = int(off, 16)
            except ValueError:
                raise TimestampError(f"bad timestamp {value!r}") from None
        whole, _, frac = s.partition(".")
        if not whole.isdigit() or (frac and not frac.isdigit()) or len(whole) > 10:
            raise TimestampError(f"bad timestamp {value!r}")
        frac = (frac + "0" * PRECISION)[:PRECISION]
        return cls(int(whole) * _SCALE + int(frac), offset)

    @property
    def normal(self) -> str:
        """The public form, as sent in X-Timestamp: 10.5 digits, no offset."""
        whole, frac = divmod(self.ticks, _SCALE)
        return f"{whole:010d}.{frac:05d}"

    @property
    def internal(self) -> str:
        """The form used in file names and DB rows: offset appended only when non-zero."""
        if self.offset:
            return f"{self.normal}_{self.offset:016x}"
        return self.normal

    def __float__(self) -> float:
        return self.ticks / _SCALE

    @property
    def seconds(self) -> int:
        return self.ticks // _SCALE

    def http_date(self) -> str:
        """RFC 7231 date for Last-Modified (rounded up, as clients compare whole seconds)."""
        return _http_date(-(-self.ticks // _SCALE))

    def iso(self) -> str:
        """ISO 8601 with microseconds, as in listings' last_modified."""
        whole, frac = divmod(self.ticks, _SCALE)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{frac * 10:06d}"

    def _key(self) -> tuple[int, int]:
        return (self.ticks, self.offset)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timestamp):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: Timestamp) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.internal

    def __repr__(self) -> str:
        return f"Timestamp({self.internal!r})"


ZERO = Timestamp(0)


def from_header(value: str | None) -> Timestamp | None:
    """A timestamp a peer sent in a header (X-Timestamp, X-Backend-Timestamp); None when it
    sent none or one that does not parse (a peer's bad header is not our error)."""
    try:
        return Timestamp.parse(value) if value else None
    except TimestampError:
        return None
