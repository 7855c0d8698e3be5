"""Request parsing both DB servers share: timestamps and metadata headers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiohttp import web

from swiftlite.common.constraints import check_metadata, check_utf8
from swiftlite.common.http import HTTPError
from swiftlite.common.timestamp import Timestamp, TimestampError


def req_timestamp(request: web.Request, header: str = "X-Timestamp",
                  required: bool = True) -> str | None:
    """The header as an internal timestamp string; missing or malformed is a 400."""
    raw = request.headers.get(header)
    if raw is None or raw == "":
        if required:
            raise HTTPError(400, f"Missing {header}")
        return None
    return parse_timestamp(raw, header)


def parse_timestamp(raw: str, what: str = "timestamp") -> str:
    try:
        return Timestamp.parse(raw).internal
    except (TimestampError, ValueError, TypeError):
        raise HTTPError(400, f"Invalid {what}") from None


def req_int(request: web.Request, header: str, default: int | None = None) -> int:
    raw = request.headers.get(header)
    if raw is None:
        if default is None:
            raise HTTPError(400, f"Missing {header}")
        return default
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()):
        raise HTTPError(400, f"Invalid {header}")
    return int(raw)


def req_metadata(request: web.Request, kind: str, timestamp: str,
                 exact: Iterable[str] = ()) -> dict[str, list[str]]:
    """{lower-case header: [value, timestamp]} for the kind's user/sys metadata and the given
    exact headers; X-Remove-<Kind>-Meta-Foo stores "" (a deletion that still replicates)."""
    bad = check_metadata(request.headers, kind)
    if bad:
        raise HTTPError(400, bad)
    meta_prefix = f"x-{kind}-meta-"
    sys_prefix = f"x-{kind}-sysmeta-"
    remove_prefix = f"x-remove-{kind}-meta-"
    exact_set = {h.lower() for h in exact}
    out: dict[str, list[str]] = {}
    for key, value in request.headers.items():
        lk = key.lower()
        if lk.startswith(remove_prefix):
            lk, value = meta_prefix + lk[len(remove_prefix):], ""
        elif not (lk.startswith(meta_prefix) or lk.startswith(sys_prefix) or lk in exact_set):
            continue
        if check_utf8(value):
            raise HTTPError(400, f"Invalid value for {key}")
        out[lk] = [value, timestamp]
    return out


def meta_headers(metadata: Mapping[str, list[str]]) -> dict[str, str]:
    """Stored metadata as response headers; deleted ("") keys are not shown."""
    return {"-".join(p.capitalize() for p in k.split("-")): v[0]
            for k, v in metadata.items() if v[0] != ""}
