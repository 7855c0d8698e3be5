"""Container ACLs (X-Container-Read / X-Container-Write), tempauth style.

Read ACL items: `.r:*` (anyone may read objects), `.r:<domain>` / `.r:-<domain>` (by
Referer), `.rlistings` (anonymous listing too, with a .r item), `<account>` or
`<account>:<user>` or `*:<user>` (authenticated principals). Write ACLs take principals only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

from swiftlite.proxy.auth import Identity


@dataclass
class ACL:
    referrers: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    listings: bool = False


def parse_acl(value: str | None) -> ACL:
    acl = ACL()
    if not value:
        return acl
    for item in (p.strip() for p in value.split(",")):
        if not item:
            continue
        if item == ".rlistings":
            acl.listings = True
        elif item.startswith(".r:") or item.startswith(".ref:") or item.startswith(".referrer:"):
            acl.referrers.append(item.split(":", 1)[1])
        elif not item.startswith("."):
            acl.groups.append(item)
    return acl


def referrer_allowed(referer: str | None, referrers: list[str]) -> bool:
    allowed = False
    host = urlparse(referer).hostname or "" if referer else ""
    for r in referrers:
        negate = r.startswith("-")
        r = r[1:] if negate else r
        match = r in ("*", ".*") or (host and (host == r.lstrip(".") or
                                                (r.startswith(".") and host.endswith(r))))
        if match:
            allowed = not negate
    return allowed


def principal_allowed(ident: Identity | None, groups: list[str]) -> bool:
    if ident is None:
        return False
    user = ident.user.split(":", 1)[-1]
    for g in groups:
        if g in ident.groups or g == ident.user or g == f"*:{user}" or g == "*":
            return True
    return False
