"""The container server's part in sharding: routing object updates, shard range requests.

- Object updates for a name whose range was cleaved go to the shard: a single update gets
  a 301 naming the shard, a batch commits its other rows and lists the redirected ones in
  its answer (see common.shard_redirect). The ranges are read at most once per
  `shard_route_ttl` seconds per DB; an update a stale view lets into the root is not lost,
  the sharder forwards every root row newer than its forwarding point.
- `X-Backend-Record-Type: shard`: a PUT merges the JSON list of ranges in the body (the
  sharder keeping every replica of a root told), a GET answers with them.
- `X-Backend-Record-Type: auto` on a listing GET (the proxy's): a sharding or sharded root
  answers with the segments to list from, in order, instead of its own rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from swiftlite.common.shard_redirect import redirect_headers
from swiftlite.common.threadpool import run_blocking
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_ranges import ROUTED, ShardRange, State, route

RECORD_TYPE = "X-Backend-Record-Type"
SHARDING_STATE = "X-Backend-Sharding-State"
SHARD_RANGE = "X-Backend-Shard-Range"  # a shard container's PUT: its own row, JSON
# A raw listing's bounds (quoted): lower < name <= upper, apart from the markers.
LISTING_LOWER = "X-Backend-Listing-Lower"
LISTING_UPPER = "X-Backend-Listing-Upper"


class RouteCache:
    """db file -> (read at, own state, live ranges) for `ttl` seconds."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._cache: dict[str, tuple[float, int, list[ShardRange]]] = {}

    async def get(self, broker: ContainerBroker) -> tuple[int, list[ShardRange]]:
        now = time.monotonic()
        hit = self._cache.get(broker.db_file)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1], hit[2]
        state, ranges = await run_blocking(broker.routing)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[broker.db_file] = (now, state, ranges)
        return state, ranges

    def drop(self, broker: ContainerBroker) -> None:
        self._cache.pop(broker.db_file, None)


def split_rows(state: int, ranges: list[ShardRange], rows: Iterable[dict[str, Any]],
               ) -> tuple[list[dict[str, Any]], dict[str, tuple[ShardRange, list[dict]]]]:
    """(rows the root keeps, shard name -> (range, rows redirected to it))."""
    keep: list[dict[str, Any]] = []
    away: dict[str, tuple[ShardRange, list[dict[str, Any]]]] = {}
    for row in rows:
        r = route(state, ranges, row["name"])
        if r is None:
            keep.append(row)
        else:
            away.setdefault(r.name, (r, []))[1].append(row)
    return keep, away


def redirect_response(r: ShardRange) -> web.Response:
    return web.Response(status=301, headers=redirect_headers(r.name, r.lower, r.upper))


def groups_body(away: dict[str, tuple[ShardRange, list[dict[str, Any]]]]) -> list[list]:
    return [[r.name, r.lower, r.upper, rows] for r, rows in away.values()]


def parse_ranges(body: bytes) -> list[ShardRange]:
    raw = json.loads(body or b"[]")
    if not isinstance(raw, list):
        raise ValueError("shard ranges must be a JSON list")
    return [ShardRange.from_dict(d) for d in raw]


def segments(state: int, own_name: str, ranges: list[ShardRange]) -> list[dict[str, str]]:
    """Where a listing of a sharding/sharded root reads each part of the namespace: the
    shard once its range is cleaved, the root's own rows before."""
    out = []
    for r in ranges:
        if r.state in (State.SHRUNK,):
            continue
        src = r.name if (state == State.SHARDED or r.state in ROUTED) else own_name
        out.append({"lower": r.lower, "upper": r.upper, "name": src})
    return out
