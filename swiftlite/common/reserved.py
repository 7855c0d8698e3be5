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
# Asks a DB server to list reserved names too (only ever sent for a feature's sub-request).
ALLOW_RESERVED_HEADER = "X-Backend-Allow-Reserved-Names"


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


def belongs_to(rcontainer: str, robj: str, container: str, obj: str) -> bool:
    """Whether the reserved object `rcontainer/robj` is kept for the user-visible
    `container/obj`: the reserved container's last part names the container and the reserved
    object's first part names the object (`\\x00versions\\x00<c>` / `\\x00<o>\\x00<id>`).
    A link into the reserved namespace is followed only from the object it belongs to."""
    try:
        cparts, oparts = split_reserved(rcontainer), split_reserved(robj)
    except ValueError:
        return False
    return len(cparts) >= 2 and cparts[-1] == container and len(oparts) >= 2 \
        and oparts[0] == obj
