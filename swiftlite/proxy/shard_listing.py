"""A listing of a sharded (or sharding) container, built from its shards in order.

The root's container server answers the proxy's listing GET (`X-Backend-Record-Type:
auto`) with the segments of its namespace, in order, each `lower < name <= upper` and read
from a shard (or, while sharding, from the root's own rows). Each segment is asked for the
client's query within the segment's bounds (sent apart from the markers), with the limit
cut to what is still wanted, in raw rows; the rows are rendered once in the client's
format.

A shard that is itself sharding or sharded (it grew past the threshold and its root has
not heard of its children yet) answers with its own segments, and the proxy walks those
within the shard's bounds, up to `MAX_DEPTH` levels.

Delimiter roll-ups that span a boundary are not repeated: the next segment is asked with
the last entry (object or subdir) as its marker, and a DB's walk neither lists that subdir
again nor anything under it (forward: it skips past it; reverse: the marker is the upper
bound, every name under the subdir sorts above it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

import msgpack
from aiohttp import web

from swiftlite.common.constraints import CONTAINER_LISTING_LIMIT
from swiftlite.common.http import HTTPError, query_str
from swiftlite.db.listing import ListingParams, render_body
from swiftlite.db.listing_http import parse_params, response
from swiftlite.proxy.backend.replicas import BackendResponse, client_headers
from swiftlite.proxy.common import read_any
from swiftlite.proxy.core_api import ProxyInterior

RECORD_TYPE = "X-Backend-Record-Type"
SHARDING_STATE = "X-Backend-Sharding-State"
LOWER = "X-Backend-Listing-Lower"  # a raw listing's bounds, quoted (see db.listing)
UPPER = "X-Backend-Listing-Upper"
MAX_DEPTH = 4  # shards of shards the proxy follows before it lists a DB's own rows

# fetch(segment, marker, end_marker, limit) -> raw rows of the segment's DB, within the
# segment's bounds (sent apart from the markers: a bound never hides a subdir)
Fetch = Callable[[dict[str, str], str | None, str | None, int], Awaitable[list[tuple]]]


def is_segmented(resp: BackendResponse) -> bool:
    # sharding, sharded, collapsing (shard_ranges.LISTED_FROM_SHARDS)
    return resp.status == 200 and resp.headers.get(SHARDING_STATE) in ("2", "3", "50") and \
        resp.headers.get("Content-Type", "").startswith("application/json")


def wanted(p: ListingParams, lower: str, upper: str, marker: str | None) -> bool:
    """Whether a segment `lower < name <= upper` can hold a name the query still wants
    (`marker`: the listing's marker, moved past what is listed so far)."""
    lo, hi = (p.end_marker, marker) if p.reverse else (marker, p.end_marker)
    if lo is not None and upper and upper <= lo:
        return False
    return not (hi is not None and lower and lower >= hi)


def clip(segments: list[dict[str, str]], lower: str, upper: str) -> list[dict[str, str]]:
    """`segments` cut to lower < name <= upper ('' unbounded), empty ones left out."""
    out = []
    for seg in segments:
        lo = max(seg["lower"], lower)
        hi = min(seg["upper"], upper) if seg["upper"] and upper else seg["upper"] or upper
        if not hi or lo < hi:
            out.append({**seg, "lower": lo, "upper": hi})
    return out


async def walk_segments(segments: list[dict[str, str]], p: ListingParams,
                        fetch: Fetch) -> list[tuple]:
    out: list[tuple] = []
    # The next segment continues after the last entry listed, as the next page of one DB
    # would: with it as the marker, a DB neither repeats a subdir nor lists under it.
    marker = p.marker
    for seg in (reversed(segments) if p.reverse else segments):
        want = p.limit - len(out)
        if want <= 0:
            break
        if not wanted(p, seg["lower"], seg["upper"], marker):
            continue
        rows = await fetch(seg, marker, p.end_marker, want)
        out.extend(rows[:want])
        if out:
            marker = out[-1][0]
    return out


async def listing(proxy: ProxyInterior, request: web.Request, container: str, root: BackendResponse,
                  extra: dict[str, str]) -> web.Response:
    """The client's response for a root that answered with segments."""
    params = parse_params(request, CONTAINER_LISTING_LIMIT)
    segments = json.loads(root.body)["segments"]
    passthrough = {k: v for k in ("prefix", "delimiter", "path")
                   if (v := query_str(request, k)) is not None}
    if params.reverse:
        passthrough["reverse"] = "true"

    async def fetch(seg: dict[str, str], marker: str | None, end_marker: str | None,
                    limit: int, parent: str, depth: int) -> list[tuple]:
        acct, cont = seg["name"].split("/", 1)
        query = dict(passthrough, format="json", limit=str(limit))
        if marker is not None:
            query["marker"] = marker
        if end_marker is not None:
            query["end_marker"] = end_marker
        part = proxy.container_ring.get_part(acct, cont)
        # A segment of the DB that named it is that DB's own rows; any other may be a shard
        # that split in turn ("nested": its segments if so, else its rows).
        nested = seg["name"] != parent and depth < MAX_DEPTH
        headers = {**extra, RECORD_TYPE: "nested" if nested else "raw",
                   LOWER: quote(seg["lower"], safe=""), UPPER: quote(seg["upper"], safe="")}
        resp = await read_any(proxy, request, proxy.container_ring, part, "GET", (acct, cont),
                              urlencode(query), headers)
        if resp.status == 204:
            return []
        if nested and is_segmented(resp):
            subs = clip(json.loads(resp.body)["segments"], seg["lower"], seg["upper"])
            sub = dataclasses.replace(params, marker=marker, end_marker=end_marker,
                                      limit=limit)
            return await walk_segments(
                subs, sub, lambda s, m, e, n: fetch(s, m, e, n, seg["name"], depth + 1))
        if resp.status != 200:
            raise HTTPError(503, "a shard of the container could not be listed")
        return [tuple(r) for r in msgpack.unpackb(resp.body, raw=False)]

    root_name = json.loads(root.body).get("name", "")
    rows = await walk_segments(
        segments, params, lambda s, m, e, n: fetch(s, m, e, n, root_name, 0))
    body, ctype = render_body(rows, params.out_format, "container", container)
    headers: dict[str, Any] = dict(client_headers(root.headers))
    headers.pop("Content-Type", None)
    return response(body, params.ctype or ctype, headers)
