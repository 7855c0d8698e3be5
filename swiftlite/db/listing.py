"""Listings shared by containers and accounts: parameters, the delimiter walk, formats.

Names are compared as UTF-8 bytes (SQLite's BINARY collation on TEXT); for valid UTF-8,
Python's code point order is the same order, so bounds can be computed on str.

No HTTP here (the brokers use this module in pool threads and tools); reading a request's
listing query and making the response is `listing_http`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from swiftlite.common.timestamp import Timestamp

MAX_CHAR = 0x10FFFF


class NotAcceptable(ValueError):
    """No listing format fits the client's Accept header (a 406)."""


@dataclass
class ListingParams:
    limit: int
    marker: str | None
    end_marker: str | None
    prefix: str | None
    delimiter: str | None
    reverse: bool
    out_format: str  # "json" | "xml" | "plain"
    # Swift's `path`: only the names directly under it (prefix path + "/", delimiter "/",
    # deeper names skipped rather than rolled up, the path itself left out).
    path: str | None = None
    ctype: str = ""  # the listing's media type ("" : the format's usual one)
    # Leave out names of the reserved namespace (they start with NUL: all sort first).
    hide_reserved: bool = False
    # Hard bounds lower < name <= upper (None: unbounded) apart from marker/end_marker: a
    # shard's part of a sharded listing. Unlike a marker, a bound never hides a subdir.
    lower: str | None = None
    upper: str | None = None


def next_after(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: no bound)."""
    s = prefix
    while s:
        cp = ord(s[-1])
        if cp < MAX_CHAR:
            cp += 1
            if 0xD800 <= cp <= 0xDFFF:  # surrogates are not valid UTF-8: skip past them
                cp = 0xE000
            return s[:-1] + chr(cp)
        s = s[:-1]
    return None


def _accept_format(accept: str | None) -> str:
    """Pick plain/json/xml from an Accept header (q-values honoured); 406 if none fits."""
    return accept_type(accept)[1]


def accept_type(accept: str | None) -> tuple[str, str]:
    """(media type, format) for an Accept header: text/xml stays text/xml, as in Swift;
    NotAcceptable when nothing fits."""
    if not accept:
        return "text/plain", "plain"
    offers = [("text/plain", "plain"), ("application/json", "json"),
              ("application/xml", "xml"), ("text/xml", "xml")]
    best: tuple[float, int, str] | None = None
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        mtype = fields[0].lower()
        q = 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if q <= 0 or not mtype:
            continue
        for order, (offer, fmt) in enumerate(offers):
            otype, osub = offer.split("/")
            mt, _, ms = mtype.partition("/")
            if mtype == offer:
                spec = 2
            elif mt == otype and ms == "*":
                spec = 1
            elif mtype == "*/*" or mtype == "*":
                spec = 0
            else:
                continue
            cand = (q, spec, -order)
            if best is None or cand > best[:3]:
                best = (q, spec, -order, offer, fmt)  # type: ignore[assignment]
    if best is None:
        raise NotAcceptable("no acceptable listing format")
    return best[3], best[4]  # type: ignore[misc]


FORMAT_TYPES = {"json": "application/json", "xml": "application/xml", "plain": "text/plain"}


@dataclass
class Bounds:
    """One page's name window: lo (exclusive unless lo_incl) < name < hi, within the prefix."""

    lo: str | None
    lo_incl: bool
    hi: str | None


def bounds_sql(b: Bounds, prefix: str | None) -> tuple[str, list[str]]:
    conds, args = [], []
    if b.lo is not None:
        conds.append("name >= ?" if b.lo_incl else "name > ?")
        args.append(b.lo)
    if b.hi is not None:
        conds.append("name < ?")
        args.append(b.hi)
    if prefix:
        conds.append("name >= ?")
        args.append(prefix)
        up = next_after(prefix)
        if up is not None:
            conds.append("name < ?")
            args.append(up)
    return (" AND ".join(conds) or "1"), args


# fetch(bounds, prefix, limit, reverse) -> rows (tuples whose first item is the name), read
# lazily: a delimiter walk stops at the first rolled-up name and re-queries past it.
Fetch = Callable[[Bounds, str | None, int, bool], Iterable[tuple]]


def walk(fetch: Fetch, p: ListingParams) -> list[tuple]:
    """The listing, delimiter rollups included: rows as fetched, subdirs as ("name/",).

    For reverse listings `marker` is the upper bound and `end_marker` the lower one. With a
    delimiter, each name containing it past the prefix collapses into one subdir entry and
    the next page starts past everything under that subdir (Swift's algorithm).
    """
    if p.reverse:
        b = Bounds(lo=p.end_marker, lo_incl=False, hi=p.marker)
    else:
        b = Bounds(lo=p.marker, lo_incl=False, hi=p.end_marker)
    if p.lower and (b.lo is None or b.lo <= p.lower):
        b.lo, b.lo_incl = p.lower, False
    if p.upper and (b.hi is None or b.hi > p.upper + "\x00"):
        b.hi = p.upper + "\x00"  # the smallest name above `upper`
    if p.hide_reserved and (b.lo is None or b.lo < "\x01"):
        b.lo, b.lo_incl = "\x01", True  # the first name past every reserved one
    results: list[tuple] = []
    prefix = p.prefix or ""
    delim = p.delimiter
    while len(results) < p.limit:
        want = p.limit - len(results)
        rows = fetch(b, p.prefix, want, p.reverse)
        if not delim:
            results.extend(rows)
            break
        rolled = False
        seen = 0
        for row in rows:
            seen += 1
            name = row[0]
            end = name.find(delim, len(prefix))
            dir_name = name[: end + len(delim)]
            # Listed as itself: a name with no delimiter past the prefix, or, with `path`, a
            # "dir/" marker object directly under it (but not the path's own "dir/" object).
            if end < 0 or (p.path is not None and len(name) == len(dir_name)):
                if name != p.path:
                    results.append(row)
                if p.reverse:
                    b.hi = name
                else:
                    b.lo, b.lo_incl = name, False
                continue
            if p.path is None and dir_name != p.marker:
                results.append((dir_name,))
            if p.reverse:
                # Everything under the subdir sorts above it (with `path`, the "dir/" object
                # itself is still to come: keep it inside the bound).
                b.hi = dir_name if p.path is None else dir_name + "\x00"
            else:
                nxt = next_after(dir_name)
                if nxt is None:
                    return results
                b.lo, b.lo_incl = nxt, True
            rolled = True
            break
        if not rolled and seen < want:
            break
    return results[: p.limit]


# -- output --------------------------------------------------------------------------------
_ISO_SECONDS: dict[str, str] = {}


def _iso(ts: str) -> str:
    """ISO 8601 of an internal timestamp; the per-second part is cached (listings repeat it)."""
    if len(ts) < 16 or ts[10] != ".":
        return Timestamp.parse(ts).iso()
    whole = ts[:10]
    base = _ISO_SECONDS.get(whole)
    if base is None:
        if len(_ISO_SECONDS) > 65536:
            _ISO_SECONDS.clear()
        base = _ISO_SECONDS[whole] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(whole)))
    return f"{base}.{ts[11:16]}0"


POLICY_NAME = "Policy-0"  # policy 0's name when swiftlite.conf names no policies
# Policy index -> name, as this server's swiftlite.conf says (set once at startup by the
# account server: `set_policy_names`); an account listing row shows its container's.
_POLICY_NAMES: dict[int, str] = {0: POLICY_NAME}


def set_policy_names(names: dict[int, str]) -> None:
    _POLICY_NAMES.clear()
    _POLICY_NAMES.update(names)


def policy_name(index: int) -> str:
    return _POLICY_NAMES.get(index) or f"Policy-{index}"


def container_json_row(row: tuple) -> dict[str, Any]:
    if len(row) == 1:
        return {"subdir": row[0]}
    name, created_at, size, content_type, etag = row
    if ";" in etag or "swift_bytes=" in content_type:
        return _with_params(name, created_at, size, content_type, etag)
    # Swift's key order, so a byte-for-byte comparison with Swift holds too.
    return {"bytes": size, "hash": etag, "name": name, "content_type": content_type,
            "last_modified": _iso(created_at)}


def _with_params(name: str, created_at: str, size: int, content_type: str,
                 etag: str) -> dict[str, Any]:
    """A row whose stored ETag carries parameters (`<md5>; slo_etag=<etag>`, from an object
    server's listing override: the hash alone, and each parameter as a key of its own) or
    whose content type carries `swift_bytes=N` (the size the listing shows: an SLO's total;
    the container's usage counts the stored size)."""
    ctype, sep, ctype_params = content_type.partition(";swift_bytes=")
    if sep:
        bytes_, _, rest = ctype_params.partition(";")
        if bytes_.isdigit():
            size, content_type = int(bytes_), ctype + (";" + rest if rest else "")
    value, *params = etag.split(";")
    out: dict[str, Any] = {"bytes": size, "hash": value.strip(), "name": name,
                           "content_type": content_type, "last_modified": _iso(created_at)}
    for param in params:
        key, sep, v = param.strip().partition("=")
        if sep and key and key not in out:
            # A static symlink's target size is a number in Swift's listings.
            out[key] = int(v) if key == "symlink_bytes" and v.isdigit() else v
    return out


def account_json_row(row: tuple) -> dict[str, Any]:
    if len(row) == 1:
        return {"subdir": row[0]}
    name, count, nbytes, put_ts, index = row
    return {"name": name, "count": count, "bytes": nbytes, "last_modified": _iso(put_ts),
            "storage_policy": policy_name(index)}


_XML_KEYS = {"container": ("name", "hash", "bytes", "content_type", "last_modified"),
             "account": ("name", "count", "bytes", "last_modified", "storage_policy")}
_XML_DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'


def _xml(rows: list[tuple], kind: str, owner: str) -> str:
    """Swift's XML exactly: a container's entries on one line, an account's one a line;
    an empty container is a self-closed element."""
    to_json = container_json_row if kind == "container" else account_json_row
    item = "object" if kind == "container" else "container"
    keys = _XML_KEYS[kind]
    sep = "" if kind == "container" else "\n"
    head = f"{_XML_DECL}<{kind} name={quoteattr(owner)}"
    if not rows and kind == "container":
        return head + " />"
    out = [head + ">"]
    for r in rows:
        if len(r) == 1:
            if kind == "container":
                out.append(f"<subdir name={quoteattr(r[0])}><name>{escape(r[0])}</name>"
                           "</subdir>")
            else:
                out.append(f"<subdir name={quoteattr(r[0])} />")
            continue
        d = to_json(r)
        out.append(f"<{item}>" + "".join(f"<{k}>{escape(str(d[k]))}</{k}>" for k in keys)
                   + f"</{item}>")
    out.append(f"</{kind}>")
    return sep.join(out)


def render_body(rows: list[tuple], fmt: str, kind: str, owner: str) -> tuple[bytes, str]:
    """(body, content type) of a listing; CPU work, so servers run it in the thread pool
    together with the query."""
    if fmt == "json":
        to_json = container_json_row if kind == "container" else account_json_row
        return json.dumps([to_json(r) for r in rows]).encode(), "application/json"
    if fmt == "xml":
        return _xml(rows, kind, owner).encode(), "application/xml"
    return "".join(r[0] + "\n" for r in rows).encode(), "text/plain"
