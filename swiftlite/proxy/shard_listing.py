"""A listing of a sharded (or sharding) container, built from its shards in order.

The root's container server answers the proxy's listing GET (`X-Backend-Record-Type:
auto`) with the segments of its namespace, in order, each `lower < name <= upper` and read
from a shard (or, while sharding, from the root's own rows). Each segment is asked for the
client's query narrowed to the segment (marker/end_marker clipped to its bounds, the limit
to what is still wanted), in raw rows; the rows are rendered once in the client's format.

Delimiter roll-ups that span a boundary are not repeated: the next segment is asked with
the last entry (object or subdir) as its marker, and a DB's walk neither lists that subdir
again nor anything under it (forward: it skips past it; reverse: the marker is the upper
bound, every name under the subdir sorts above it).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import msgpack
from aiohttp import web

from swiftlite.common.constraints import CONTAINER_LISTING_LIMIT
from swiftlite.common.http import HTTPError, query_str
from swiftlite.db.listing import ListingParams, render_body
from swiftlite.db.listing_http import parse_params, response
from swiftlite.proxy.backend import BackendResponse, client_headers
from swiftlite.proxy.common import read_any

RECORD_TYPE = "X-Backend-Record-Type"
SHARDING_STATE = "X-Backend-Sharding-State"

# fetch(segment name, marker, end_marker, limit) -> raw rows
Fetch = Callable[[str, str | None, str | None, int], Awaitable[list[tuple]]]


def is_segmented(resp: BackendResponse) -> bool:
    return resp.status == 200 and resp.headers.get(SHARDING_STATE) in ("2", "3") and \
        resp.headers.get("Content-Type", "").startswith("application/json")


def clip(p: ListingParams, lower: str, upper: str,
         after: str | None) -> tuple[str | None, str | None] | None:
    """(marker, end_marker) of the client's query within one segment, in the listing's own
    sense (reverse: marker is the upper bound); None when the segment holds nothing wanted.
    `after`: the last entry listed so far (the walk continues past it)."""
    top = upper + "\x00" if upper else None  # exclusive bound just above `upper`
    if not p.reverse:
        lo = max(x for x in (p.marker, after, lower) if x is not None) or None
        hi = min((x for x in (p.end_marker, top) if x is not None), default=None)
        if lo is not None and hi is not None and lo >= hi:
            return None
        return lo, hi
    hi = min((x for x in (p.marker, after, top) if x is not None), default=None)
    lo = max(x for x in (p.end_marker, lower, "") if x is not None) or None
    if lo is not None and hi is not None and lo >= hi:
        return None
    return hi, lo


async def walk_segments(segments: list[dict[str, str]], p: ListingParams,
                        fetch: Fetch) -> list[tuple]:
    out: list[tuple] = []
    after: str | None = None
    for seg in (reversed(segments) if p.reverse else segments):
        want = p.limit - len(out)
        if want <= 0:
            break
        bounds = clip(p, seg["lower"], seg["upper"], after)
        if bounds is None:
            continue
        # Forward, a segment starting inside the span of the subdir listed last (or of a
        # subdir the client's marker names) rolls its first names up into it again: that
        # entry is dropped, so one more row is asked for.
        prev = after if after is not None else p.marker
        dup = (prev,) if p.delimiter and not p.reverse and prev is not None else None
        rows = await fetch(seg["name"], bounds[0], bounds[1], want + (dup is not None))
        if dup is not None and rows and tuple(rows[0]) == dup:
            rows = rows[1:]
        out.extend(rows[:want])
        if rows:
            after = out[-1][0]
    return out


async def listing(proxy, request: web.Request, container: str, root: BackendResponse,
                  extra: dict[str, str]) -> web.Response:
    """The client's response for a root that answered with segments."""
    params = parse_params(request, CONTAINER_LISTING_LIMIT)
    segments = json.loads(root.body)["segments"]
    passthrough = {k: v for k in ("prefix", "delimiter", "path")
                   if (v := query_str(request, k)) is not None}
    if params.reverse:
        passthrough["reverse"] = "true"

    async def fetch(name: str, marker: str | None, end_marker: str | None,
                    limit: int) -> list[tuple]:
        acct, cont = name.split("/", 1)
        query = dict(passthrough, format="json", limit=str(limit))
        if marker is not None:
            query["marker"] = marker
        if end_marker is not None:
            query["end_marker"] = end_marker
        part = proxy.container_ring.get_part(acct, cont)
        resp = await read_any(proxy, request, proxy.container_ring, part, "GET", (acct, cont),
                              urlencode(query), {**extra, RECORD_TYPE: "raw"})
        if resp.status == 204:
            return []
        if resp.status != 200:
            raise HTTPError(503, "a shard of the container could not be listed")
        return [tuple(r) for r in msgpack.unpackb(resp.body, raw=False)]

    rows = await walk_segments(segments, params, fetch)
    body, ctype = render_body(rows, params.out_format, "container", container)
    headers: dict[str, Any] = dict(client_headers(root.headers))
    headers.pop("Content-Type", None)
    return response(body, params.ctype or ctype, headers)
