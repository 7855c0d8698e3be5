"""An erasure-coding scheme (k data + m parity fragments of fixed-size segments) and its driver.

A scheme is plain, hashable data (it will come from a storage policy's config and from an
archive's metadata); the pyeclib driver that does the arithmetic is made lazily, once per
process per (k, m, ec_type), and never shared across a fork (see `_after_fork_in_child`).

pyeclib notes that shape this module (pyeclib 1.8.0 manylinux wheel, checked by the tests):
- only `bytes` may be given to encode/decode/get_metadata: a bytearray is refused by encode
  and *aborts the process* (a C assertion) in decode, so `as_bytes` converts first;
- decode does not check fragment payloads, even with `inline_crc32`: a flipped payload byte
  decodes silently to wrong bytes. Fragments are made with `inline_crc32` so that each one
  can be checked (decode.py) before it is trusted;
- `isa_l_rs_vand` with m >= 5 has stripes that cannot be decoded from some k fragments
  (10+5: 10 of the 3003 subsets fail here), so such schemes are refused.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

DEFAULT_EC_TYPE = "liberasurecode_rs_vand"  # in every liberasurecode build; no ISA-L needed
DEFAULT_SEGMENT_SIZE = 1 << 20
MIN_SEGMENT_SIZE = 1024
# liberasurecode's own limit on k + m (EC_MAX_FRAGMENTS); a policy wider than this could not
# be placed sensibly on a ring anyway.
MAX_FRAGMENTS = 32
# Each fragment is one checksummed header plus its share of the segment: see module doc.
CHECKSUM_TYPE = "inline_crc32"


class ECError(Exception):
    """An EC scheme that cannot be used (bad parameters, ec_type missing from this build)."""


class ECDecodeError(ECError):
    """A body (or a range of it) that cannot be decoded from the fragments given."""


@dataclass(frozen=True)
class ECScheme:
    k: int
    m: int
    ec_type: str = DEFAULT_EC_TYPE
    segment_size: int = DEFAULT_SEGMENT_SIZE

    def __post_init__(self) -> None:
        for name in ("k", "m", "segment_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ECError(f"{name} must be an integer, not {value!r}")
        if self.k < 1 or self.m < 1:
            raise ECError(f"k and m must be at least 1 (got {self.k}+{self.m})")
        if self.k + self.m > MAX_FRAGMENTS:
            raise ECError(f"k + m must be at most {MAX_FRAGMENTS} (got {self.k}+{self.m})")
        if self.segment_size < MIN_SEGMENT_SIZE:
            raise ECError(f"segment_size must be at least {MIN_SEGMENT_SIZE} "
                          f"(got {self.segment_size})")
        if not isinstance(self.ec_type, str) or not self.ec_type:
            raise ECError(f"invalid ec_type {self.ec_type!r}")
        if self.ec_type == "isa_l_rs_vand" and self.m >= 5:
            raise ECError("isa_l_rs_vand cannot decode every k-subset when m >= 5; "
                          "use isa_l_rs_cauchy or liberasurecode_rs_vand")

    @property
    def n(self) -> int:
        """Fragments per segment (and fragment archives per object): k + m."""
        return self.k + self.m

    @property
    def write_quorum(self) -> int:
        """Archives that must be durable before a write succeeds: k + 1 (k alone would
        leave no margin for one more loss), as Swift's default."""
        return min(self.k + 1, self.n)

    def __str__(self) -> str:
        return f"{self.ec_type} {self.k}+{self.m}"

    @property
    def driver(self) -> Any:
        """This process's pyeclib ECDriver for the scheme (made on first use)."""
        return _driver(self.k, self.m, self.ec_type)

    def fragment_size(self, segment_length: int | None = None) -> int:
        """Bytes of each fragment (header included) of a segment of `segment_length` bytes
        (a full segment when None). Every fragment of a segment has this same size."""
        if segment_length is None:
            segment_length = self.segment_size
        if not 1 <= segment_length <= self.segment_size:
            raise ValueError(f"segment length {segment_length} outside 1..{self.segment_size}")
        return _fragment_size(self.k, self.m, self.ec_type, segment_length)

    def encode_segment(self, segment: bytes) -> list[bytes]:
        """The k + m fragments of one segment (1..segment_size bytes), by index."""
        if not 1 <= len(segment) <= self.segment_size:
            raise ValueError(f"segment of {len(segment)} bytes outside 1..{self.segment_size}")
        return self.driver.encode(as_bytes(segment))


def as_bytes(data: Any) -> bytes:
    """`data` as bytes, copying only what is not bytes already (see module doc: pyeclib)."""
    return data if type(data) is bytes else bytes(data)


@lru_cache(maxsize=4096)
def _fragment_size(k: int, m: int, ec_type: str, segment_length: int) -> int:
    # Asked of pyeclib rather than computed: the header size and the payload's alignment
    # belong to liberasurecode and its backend. A segment no longer than the segment size
    # given is one segment, so `fragment_size` is exactly what encode() returns for it.
    info = _driver(k, m, ec_type).get_segment_info(segment_length, segment_length)
    return int(info["fragment_size"])


# --- one driver per process per (k, m, ec_type) ---

_lock = threading.Lock()
_drivers: dict[tuple[int, int, str], Any] = {}
_pid = os.getpid()
# Drivers a forked child inherited: kept referenced, never used nor closed in the child.
# Closing one runs liberasurecode's instance teardown, which takes its global registry lock;
# a parent thread may have held that lock at the fork, and then the child would hang.
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    global _lock, _pid
    _inherited.extend(_drivers.values())
    _drivers.clear()
    _lock = threading.Lock()  # the parent's may have been held by a thread that is gone
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _driver(k: int, m: int, ec_type: str) -> Any:
    if os.getpid() != _pid:  # a fork the hook did not see (it always should)
        _after_fork_in_child()
    key = (k, m, ec_type)
    driver = _drivers.get(key)
    if driver is not None:
        return driver
    with _lock:
        driver = _drivers.get(key)
        if driver is None:
            driver = _drivers[key] = _make_driver(k, m, ec_type)
    return driver


def _make_driver(k: int, m: int, ec_type: str) -> Any:
    # Imported here so that importing swiftlite.common (every server) loads no C extension
    # it does not use.
    from pyeclib.ec_iface import ECDriver, ECDriverError
    try:
        return ECDriver(k=k, m=m, ec_type=ec_type, chksum_type=CHECKSUM_TYPE)
    except ECDriverError as e:
        raise ECError(f"ec_type {ec_type!r} with {k}+{m} is not usable here: {e}") from e


def available_ec_types(k: int = 4, m: int = 2) -> list[str]:
    """The ec_types that pyeclib lists and that encode and decode a k+m stripe here."""
    from pyeclib.ec_iface import VALID_EC_TYPES
    works = []
    for ec_type in VALID_EC_TYPES:
        try:
            scheme = ECScheme(k, m, ec_type)
            body = bytes(range(256)) * 8
            fragments = scheme.encode_segment(body)
            if scheme.driver.decode(fragments[m:]) == body:
                works.append(ec_type)
        except Exception:  # an ec_type this build cannot use, whatever pyeclib raises
            continue
    return works
