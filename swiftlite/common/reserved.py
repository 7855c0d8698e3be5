"""The reserved namespace: container and object names that start with NUL.

Clients can never name them (a NUL in a client's path is Swift's 412), so pipeline features
keep their hidden state there: object versioning keeps each container's versions in
`\\x00versions\\x00<container>`, one object `\\x00<name>\\x00<inverted timestamp>` per version.
Only a feature's own sub-requests reach such names (the `request.ALLOW_RESERVED` key, never a
header), and storage servers list them only when the proxy asks
(`X-Backend-Allow-Reserved-Names`, which the gatekeeper keeps from clients).
"""

from __future__ import annotations

RESERVED = "\x00"


def reserved_name(*parts: str) -> str:
    """`\\x00a\\x00b...`: the parts may not contain NUL themselves."""
    if any(RESERVED in p for p in parts):
        raise ValueError("a reserved name's parts cannot contain NUL")
    return RESERVED + RESERVED.join(parts)


def split_reserved(name: str) -> list[str]:
    """The parts of a reserved name; ValueError for a name outside the namespace."""
    if not name.startswith(RESERVED):
        raise ValueError("not a reserved name")
    return name[1:].split(RESERVED)


def is_reserved(name: str) -> bool:
    return name.startswith(RESERVED)
