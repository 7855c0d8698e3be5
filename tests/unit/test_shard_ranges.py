"""Shard ranges: split points, the merge rule, lookups, and a sharded listing's walk over
segments against a listing of one DB (hypothesis over every listing parameter)."""

from __future__ import annotations

import asyncio
import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from swiftlite.container.shard_ranges import (
    ShardRange,
    State,
    covers,
    find,
    live,
    merge_pairs,
    merge_range,
    merged_bounds,
    ranges_from_points,
    route,
    shard_account,
    split_points,
)
from swiftlite.db.listing import ListingParams, walk
from swiftlite.proxy.shard_listing import walk_segments
from tests.sharding_support import memory_fetch


# -- split points ------------------------------------------------------------------------------
def test_split_points_every_nth_name():
    names = [f"n{i:03d}" for i in range(10)]
    assert split_points(names, 3) == ["n002", "n005", "n008"]
    # a tail shorter than min_last joins the range before it
    assert split_points(names, 3, min_last=2) == ["n002", "n005"]
    # an exact multiple: no empty last range
    assert split_points(names[:9], 3) == ["n002", "n005"]
    assert split_points(names[:2], 3) == []
    assert split_points([], 3) == []


@given(st.integers(0, 200), st.integers(1, 50), st.integers(0, 30))
def test_split_points_make_ranges_that_tile(n, per, min_last):
    names = [f"{i:05d}" for i in range(n)]
    points = split_points(names, per, min_last)
    assert points == sorted(set(points))
    ranges = live(ranges_from_points("AUTH_a", "c", points, "0000000001.00000"))
    assert covers(ranges)
    assert len(ranges) == len(points) + 1
    for r in ranges[:-1]:  # every closed range holds rows_per_shard names
        assert sum(r.includes(x) for x in names) == per
    for x in names:
        assert sum(r.includes(x) for r in ranges) == 1
        assert find(ranges, x).includes(x)
    assert all(r.account == shard_account("AUTH_a") for r in ranges)


# -- merge rule --------------------------------------------------------------------------------
def sr(**kw) -> ShardRange:
    base = {"name": ".s/x", "timestamp": "0000000001.00000"}
    return ShardRange(**{**base, **kw})


def test_merge_newest_wins_per_field_group():
    old = sr(lower="a", upper="m", state=State.CREATED, state_timestamp="0000000002.00000",
             object_count=5, meta_timestamp="0000000003.00000")
    # older bounds, newer state, older counts: only the state moves
    new = sr(timestamp="0000000000.50000", lower="b", upper="z", state=State.CLEAVED,
             state_timestamp="0000000004.00000", object_count=9,
             meta_timestamp="0000000001.00000")
    got = merge_range(old, new)
    assert (got.lower, got.upper, got.state, got.object_count) == ("a", "m", State.CLEAVED, 5)
    # newer counts and bounds
    got2 = merge_range(got, sr(timestamp="0000000005.00000", lower="a", upper="n", deleted=1,
                               object_count=7, meta_timestamp="0000000006.00000"))
    assert (got2.upper, got2.deleted, got2.object_count, got2.state) == ("n", 1, 7,
                                                                         State.CLEAVED)
    # nothing newer: no change
    assert merge_range(got2, old) is None
    assert merge_range(None, old) == old


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)),
                min_size=1, max_size=6), st.randoms())
def test_merge_is_order_independent(updates, rnd):
    """Replicas that saw the same rows in any order agree (each group's values follow from
    its timestamp here, as they do for one write)."""
    states = list(State)
    rows = [sr(timestamp=f"000000000{t}.00000", upper=f"u{t}", state=states[s],
               state_timestamp=f"000000000{s}.00000", object_count=m,
               meta_timestamp=f"000000000{m}.00000") for t, s, m in updates]

    def fold(seq):
        cur = None
        for r in seq:
            cur = merge_range(cur, r) or cur
        return cur

    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert fold(shuffled) == fold(rows)


def test_route_only_cleaved_ranges_of_a_sharding_root():
    ranges = live([sr(name=".s/a", upper="m", state=State.CLEAVED),
                   sr(name=".s/b", lower="m", state=State.CREATED)])
    assert route(State.UNSHARDED, ranges, "c") is None
    assert route(State.SHARDING, ranges, "c").name == ".s/a"
    assert route(State.SHARDING, ranges, "x") is None  # not copied yet: the root keeps it
    active = [sr(name=r.name, lower=r.lower, upper=r.upper, state=State.ACTIVE)
              for r in ranges]
    assert route(State.SHARDED, active, "x").name == ".s/b"
    assert route(State.SHARDED, active, "m").name == ".s/a"  # upper bound is inclusive


# -- listings across segments ------------------------------------------------------------------
ALPHABET = "ab/-"


def params(**kw) -> ListingParams:
    base = {"limit": 10000, "marker": None, "end_marker": None, "prefix": None,
            "delimiter": None, "reverse": False, "out_format": "json"}
    return ListingParams(**{**base, **kw})


def sharded_listing(names: list[str], points: list[str], p: ListingParams) -> list[tuple]:
    bounds = ["", *points, ""]
    segs = [{"lower": bounds[i], "upper": bounds[i + 1], "name": f"s/{i}"}
            for i in range(len(bounds) - 1)]

    async def fetch(seg, marker, end_marker, limit):
        # The DB may hold names outside the segment (a sharding root holds them all): the
        # bounds keep them out.
        q = params(limit=limit, marker=marker, end_marker=end_marker, prefix=p.prefix,
                   delimiter=p.delimiter, reverse=p.reverse, path=p.path,
                   lower=seg["lower"] or None, upper=seg["upper"] or None)
        return walk(memory_fetch(names), q)

    return asyncio.run(walk_segments(segs, p, fetch))


names_st = st.lists(st.text(ALPHABET, min_size=1, max_size=4), max_size=40, unique=True)
opt_text = st.one_of(st.none(), st.text(ALPHABET, min_size=1, max_size=3))


@settings(max_examples=400, deadline=None)
@given(names_st, st.lists(st.text(ALPHABET, min_size=1, max_size=3), max_size=5, unique=True),
       opt_text, opt_text, opt_text, st.sampled_from([None, "/", "-", "a"]), st.booleans(),
       st.integers(1, 12))
def test_listing_across_segments_equals_one_db(names, points, marker, end_marker, prefix,
                                               delimiter, reverse, limit):
    names = sorted(names)
    points = sorted(points)
    p = params(marker=marker, end_marker=end_marker, prefix=prefix, delimiter=delimiter,
               reverse=reverse, limit=limit)
    expected = walk(memory_fetch(names), p)
    got = sharded_listing(names, points, params(**{**p.__dict__}))
    assert got == expected


@settings(max_examples=100, deadline=None)
@given(names_st, st.lists(st.text(ALPHABET, min_size=1, max_size=3), max_size=4, unique=True),
       st.sampled_from(["", "a", "a/", "b/a"]), st.booleans())
def test_path_listing_across_segments(names, points, path, reverse):
    names = sorted(names)
    prefix = path.rstrip("/") + "/" if path else None
    p = params(prefix=prefix, delimiter="/", path=prefix or "", reverse=reverse)
    assert sharded_listing(names, sorted(points), params(**{**p.__dict__})) == \
        walk(memory_fetch(names), p)


def test_find_with_bisect_matches_linear_scan():
    points = ["b", "d", "f"]
    ranges = live(ranges_from_points("a", "c", points, "0000000001.00000"))
    for x in ["a", "b", "b0", "c", "d", "e", "f", "g", "zz"]:
        i = bisect.bisect_left(points, x)
        assert find(ranges, x) is ranges[i]


# -- merging small neighbours ------------------------------------------------------------------
def tiled(counts: list[int]) -> list[ShardRange]:
    bounds = ["", *(f"n{i:02d}" for i in range(1, len(counts))), ""]
    return [sr(name=f".s/r{i}", lower=bounds[i], upper=bounds[i + 1], state=State.ACTIVE,
               object_count=n) for i, n in enumerate(counts)]


def test_merge_pairs_small_donor_into_smaller_neighbour():
    ranges = tiled([100, 100, 3, 5, 100, 100])
    pairs = merge_pairs(ranges, shrink_threshold=40, rows_per_shard=200)
    assert [(d.name, a.name) for d, a in pairs] == [(".s/r2", ".s/r3")]
    assert merged_bounds(*pairs[0]) == ("n02", "n04") == merged_bounds(pairs[0][1], pairs[0][0])


def test_merge_pairs_limits():
    # Never past rows_per_shard, never a range in two pairs, nor one busy, at most `limit`.
    ranges = tiled([10, 195, 10, 10, 10, 10, 10, 10])
    pairs = merge_pairs(ranges, 40, 200, busy={".s/r7"}, limit=2)
    names = [n for d, a in pairs for n in (d.name, a.name)]
    assert len(pairs) == 2 and len(set(names)) == 4 and ".s/r7" not in names
    assert all(d.object_count + a.object_count <= 200 for d, a in pairs)
    assert merge_pairs(tiled([10, 195]), 40, 200) == []
    assert merge_pairs(tiled([50, 50]), 40, 200) == []  # no donor under the threshold
    shrinking = tiled([10, 10])
    shrinking[1].state = State.SHRINKING
    assert merge_pairs(shrinking, 40, 200) == []


@given(st.lists(st.integers(0, 120), min_size=1, max_size=12))
def test_merge_pairs_keep_the_tiling(counts):
    """Applying every pair leaves ranges that still tile the namespace."""
    ranges = tiled(counts)
    pairs = merge_pairs(ranges, 40, 150, limit=20)
    out = {r.name: r for r in ranges}
    for d, a in pairs:
        lower, upper = merged_bounds(d, a)
        assert d.object_count < 40 and d.object_count + a.object_count <= 150
        del out[d.name]
        out[a.name] = sr(name=a.name, lower=lower, upper=upper, state=State.ACTIVE)
    assert covers(live(out.values()))
