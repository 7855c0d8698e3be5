"""Path hashing shared by the ring, the object server and the DB servers.

Every placement and on-disk name derives from `hash_path`, so there is exactly one copy.
"""

from __future__ import annotations

import xxhash

# A body's fast check as stored and sent: "xxh3-64:" and xxh3-64 in hex (obj/engine/bodysum.py keeps
# one per stored body; an EC archive's footer carries one, common/ec/encode.py).
FAST_CHECK_PREFIX = "xxh3-64:"


def fast_check(h: xxhash.xxh3_64) -> str:
    return FAST_CHECK_PREFIX + h.hexdigest()


# Set once per process from the [hash] section of swiftlite.conf (see config.load_hash_config).
_PREFIX = b""
_SUFFIX = b""


def set_hash_path_affixes(prefix: str, suffix: str) -> None:
    global _PREFIX, _SUFFIX
    _PREFIX = prefix.encode()
    _SUFFIX = suffix.encode()


def path_key(account: str, container: str | None = None, obj: str | None = None) -> bytes:
    if obj is not None and container is None:
        raise ValueError("an object path needs a container")
    parts = ["", account]
    if container is not None:
        parts.append(container)
    if obj is not None:
        parts.append(obj)
    return "/".join(parts).encode("utf-8", "surrogateescape")


def hash_path_digest(account: str, container: str | None = None, obj: str | None = None) -> bytes:
    """16-byte xxh3_128 of prefix + "/a[/c[/o]]" + suffix."""
    return xxhash.xxh3_128_digest(_PREFIX + path_key(account, container, obj) + _SUFFIX)


def hash_path(account: str, container: str | None = None, obj: str | None = None) -> str:
    """32 hex digits; the name of the object's (or DB's) hash directory."""
    return hash_path_digest(account, container, obj).hex()


def suffix_of(hexhash: str) -> str:
    """The suffix directory: the last 3 hex digits of the hash (4096 per partition)."""
    return hexhash[-3:]


def partition_of(hexhash: str, part_power: int) -> int:
    """Top `part_power` bits of the 128-bit hash."""
    return int(hexhash[:16], 16) >> (64 - part_power)
