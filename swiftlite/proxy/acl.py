"""ACLs, tempauth style.

Container ACLs (X-Container-Read / X-Container-Write). Read ACL items: `.r:*` (anyone may read
objects), `.r:<domain>` / `.r:-<domain>` (by Referer), `.rlistings` (anonymous listing too,
with a .r item), and groups (`<account>`, `<account>:<user>`, or any group a user holds),
matched exactly as Swift's tempauth does (no wildcards). Write ACLs take groups only.

Account ACLs (X-Account-Access-Control, Swift's ACL version 2): a JSON object mapping
`admin`, `read-write` and `read-only` to lists of groups.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
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
            ref = item.split(":", 1)[1]
            # ".r:*.example.com" means the domain and its hosts, as ".r:.example.com" does.
            if ref.startswith("*.") or ref.startswith("-*."):
                ref = ref.replace("*", "", 1)
            acl.referrers.append(ref)
        elif not item.startswith("."):
            acl.groups.append(item)
    return acl


def _referer_host(referer: str | None) -> str:
    """The Referer's host; '' when absent or unparsable (a bad '[' or port: urlparse raises),
    which matches only `.r:*`."""
    if not referer:
        return ""
    try:
        return urlparse(referer).hostname or ""
    except ValueError:
        return ""


def referrer_allowed(referer: str | None, referrers: list[str]) -> bool:
    allowed = False
    host = _referer_host(referer)
    for r in referrers:
        negate = r.startswith("-")
        r = r[1:] if negate else r
        match = r in ("*", ".*") or (host and (host == r.lstrip(".") or
                                                (r.startswith(".") and host.endswith(r))))
        if match:
            allowed = not negate
    return allowed


def principal_allowed(ident: Identity | None, groups: list[str]) -> bool:
    return ident is not None and any(g in ident.groups for g in groups)


# ---- account ACLs ---------------------------------------------------------------------------

ACCOUNT_ACL_LEVELS = ("admin", "read-write", "read-only")  # strongest first


def _load_v2(value: str) -> dict[str, Any] | None:
    """Swift's version-2 ACL: '' is empty, anything but a JSON object is None."""
    if value == "":
        return {}
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        return None
    return data if isinstance(data, dict) else None


def account_acl_error(value: str) -> str | None:
    """Why `value` is not an account ACL tempauth accepts (Swift's wording), or None."""
    data = _load_v2(value)
    if data is None:
        return f"Syntax error in input ({value!r})"
    for key in data:
        if key not in ACCOUNT_ACL_LEVELS:
            return f"Key {json.dumps(key)} not recognized"
    for key in ACCOUNT_ACL_LEVELS:
        if key not in data:
            continue
        if not isinstance(data[key], list):
            return f"Value for key {json.dumps(key)} must be a list"
        if not all(isinstance(g, str) for g in data[key]):
            return f"Elements of {json.dumps(key)} list must be strings"
    return None


def parse_account_acl(value: str | None) -> dict[str, list[str]]:
    """The stored ACL by level; empty when unset or unusable (which grants nothing)."""
    if not value:
        return {}
    data = _load_v2(value)
    if not data or account_acl_error(value):
        return {}
    return {k: data[k] for k in ACCOUNT_ACL_LEVELS if data.get(k)}


def format_account_acl(value: str | None) -> str | None:
    """The stored ACL as Swift shows it to owners (compact, sorted JSON); None when empty."""
    data = _load_v2(value) if value else None
    if not data:
        return None
    return json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=True)


def account_acl_level(acl: dict[str, list[str]], groups: tuple[str, ...] | list[str]
                      ) -> str | None:
    """The strongest level the ACL grants any of `groups`."""
    for level in ACCOUNT_ACL_LEVELS:
        if any(g in acl.get(level, ()) for g in groups):
            return level
    return None
