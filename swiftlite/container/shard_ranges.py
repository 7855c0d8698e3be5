"""Shard ranges: a container's namespace cut into (lower, upper] name ranges.

Pure data and rules, no I/O: the broker stores these rows in its `shard_range` table, the
sharder decides with them, the container server routes with them and the proxy lists with
them.

- A range holds names `lower < name <= upper`; '' is unbounded on that side.
- A row merges with another copy of itself (same `name`) newest-wins per field group, as
  object rows do: bounds and `deleted` by `timestamp`, `state` by `state_timestamp`,
  counts by `meta_timestamp`. Replicas of a root thus agree on one set of ranges.
- A root keeps one more row, its "own" row (name = the root's own account/container),
  whose `state` is the root's sharding state (no own row: unsharded). A shard's own row
  holds its bounds (so it knows which names are its own).
"""

from __future__ import annotations

import bisect
import enum
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from swiftlite.common.reserved import reserved_name


class State(enum.IntEnum):
    # A root's own row (its sharding state).
    UNSHARDED = 0
    SHARDING = 2
    SHARDED = 3
    COLLAPSED = 4  # was sharded, all rows came back into the root: unsharded again
    # (SHRINKING as a root's state: collapsing, its shards' rows coming back into it)
    # A shard range in its root's table.
    FOUND = 10  # split point chosen, shard container not made yet
    CREATED = 20  # shard container exists on its primaries
    CLEAVED = 30  # every row of the range copied: updates for it go to the shard
    ACTIVE = 40  # the root is sharded and this shard serves its names
    SHRINKING = 50  # being merged into a neighbour
    SHRUNK = 60  # merged away (deleted=1 too)


ROUTED = (State.CLEAVED, State.ACTIVE, State.SHRINKING)  # names here live in the shard
# A root in these states is listed (and counted) from its shards.
LISTED_FROM_SHARDS = (State.SHARDING, State.SHARDED, State.SHRINKING)


@dataclass
class ShardRange:
    name: str  # "<account>/<container>" of the shard (or, for an own row, of the DB)
    timestamp: str
    lower: str = ""
    upper: str = ""
    object_count: int = 0
    bytes_used: int = 0
    meta_timestamp: str = "0000000000.00000"
    deleted: int = 0
    state: int = State.FOUND
    state_timestamp: str = "0000000000.00000"

    @property
    def account(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def container(self) -> str:
        return self.name.split("/", 1)[1]

    def includes(self, name: str) -> bool:
        return (not self.lower or name > self.lower) and (not self.upper or name <= self.upper)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardRange:
        keys = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in keys})


def merge_range(old: ShardRange | None, new: ShardRange) -> ShardRange | None:
    """`old` updated with whatever field groups of `new` are newer; None when nothing
    changes (the caller then writes nothing)."""
    if old is None:
        return new
    out = ShardRange(**asdict(old))
    if new.timestamp > old.timestamp:
        out.timestamp, out.lower, out.upper, out.deleted = (
            new.timestamp, new.lower, new.upper, new.deleted)
    if new.state_timestamp > old.state_timestamp:
        out.state, out.state_timestamp = new.state, new.state_timestamp
    if new.meta_timestamp > old.meta_timestamp:
        out.object_count, out.bytes_used, out.meta_timestamp = (
            new.object_count, new.bytes_used, new.meta_timestamp)
    return None if out == old else out


def split_points(names: Iterable[str], rows_per_shard: int, min_last: int = 0) -> list[str]:
    """Upper bounds of the shards for a sorted name stream: every `rows_per_shard`-th name.
    A tail of fewer than `min_last` names joins the shard before it rather than making a
    tiny last shard (the last range is open-ended anyway)."""
    if rows_per_shard < 1:
        raise ValueError("rows_per_shard must be at least 1")
    points: list[str] = []
    count = 0
    since = 0
    for name in names:
        count += 1
        since += 1
        if since == rows_per_shard:
            points.append(name)
            since = 0
    if points and (since == 0 or since < min_last):
        points.pop()  # the last range (open-ended) takes the tail
    return points


def shard_account(root_account: str) -> str:
    """The hidden account holding a root's shards: reserved (NUL-led), so no client request
    can name it, and apart from the root's account so the account never lists shards."""
    return reserved_name("shards", root_account)


def shard_container_name(root_account: str, root_container: str, timestamp: str,
                         index: int) -> str:
    """A shard's container: bounded length whatever the root's name is, unique per split."""
    h = hashlib.md5(f"{root_account}/{root_container}".encode(),
                    usedforsecurity=False).hexdigest()
    return f"{h}-{timestamp}-{index}"


def ranges_from_points(root_account: str, root_container: str, points: Sequence[str],
                       timestamp: str, lower: str = "", upper: str = "") -> list[ShardRange]:
    """FOUND ranges cutting lower < name <= upper (a root's whole namespace, or a shard's
    range when a shard splits) at `points`."""
    bounds = [lower, *points, upper]
    acct = shard_account(root_account)
    return [ShardRange(name=f"{acct}/"
                       f"{shard_container_name(root_account, root_container, timestamp, i)}",
                       timestamp=timestamp, lower=bounds[i], upper=bounds[i + 1],
                       state=State.FOUND, state_timestamp=timestamp)
            for i in range(len(bounds) - 1)]


def live(ranges: Iterable[ShardRange]) -> list[ShardRange]:
    """Ranges not deleted, in namespace order."""
    return sorted((r for r in ranges if not r.deleted), key=_order_key)


def _order_key(r: ShardRange) -> tuple[bool, str, bool, str]:
    # '' as an upper bound means +infinity: sort it last.
    return (r.upper == "", r.upper, r.lower != "", r.lower)


def find(ranges: Sequence[ShardRange], name: str) -> ShardRange | None:
    """The range of `ranges` (live(), in order) holding `name`."""
    i = bisect.bisect_left(ranges, (False, name), key=lambda r: (r.upper == "", r.upper))
    if i < len(ranges) and ranges[i].includes(name):
        return ranges[i]
    return next((r for r in ranges if r.includes(name)), None)  # ranges that overlap


def route(own_state: int, ranges: Sequence[ShardRange], name: str) -> ShardRange | None:
    """Where an update for `name` addressed to this DB goes: None = it keeps it. A sharded
    root sends every name away; a sharding one those of ranges already cleaved; a shard
    merged back into its root (SHRUNK: `ranges` is [the root]) sends all to the root."""
    if own_state == State.SHRUNK:
        return ranges[0] if ranges else None
    if own_state not in (State.SHARDING, State.SHARDED):
        return None
    r = find(ranges, name)
    if r is None or r.state not in ROUTED:
        return None
    return r


def covers(ranges: Sequence[ShardRange]) -> bool:
    """Whether live ranges (in order) tile the whole namespace with no gap or overlap."""
    if not ranges:
        return False
    prev = ""
    for i, r in enumerate(ranges):
        if r.lower != prev:
            return False
        if r.upper == "" and i != len(ranges) - 1:
            return False
        prev = r.upper
    return prev == ""


def merge_pairs(ranges: Sequence[ShardRange], shrink_threshold: int, rows_per_shard: int,
                busy: Iterable[str] = (), limit: int = 4,
                ) -> list[tuple[ShardRange, ShardRange]]:
    """(donor, acceptor) pairs of small neighbouring shards to merge, from a sharded root's
    live ranges (in order, with fresh counts): a donor is an ACTIVE range holding fewer than
    `shrink_threshold` rows, its acceptor the smaller of its ACTIVE neighbours with which it
    holds at most `rows_per_shard` rows (so the merged shard never splits again). Emptiest
    donors first; no range is in two pairs, nor in `busy` (merges under way)."""
    used = set(busy)
    pairs: list[tuple[ShardRange, ShardRange]] = []
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].object_count)
    for i in order:
        if len(pairs) >= limit:
            break
        d = ranges[i]
        if d.name in used or d.state != State.ACTIVE or d.object_count >= shrink_threshold:
            continue
        options = [n for n in neighbours(ranges, i)
                   if n.name not in used and n.state == State.ACTIVE
                   and d.object_count + n.object_count <= rows_per_shard]
        if options:
            a = min(options, key=lambda n: n.object_count)
            pairs.append((d, a))
            used |= {d.name, a.name}
    return pairs


def neighbours(ranges: Sequence[ShardRange], i: int) -> list[ShardRange]:
    """The ranges touching ranges[i] (live, in order): the one ending at its lower bound,
    the one starting at its upper bound."""
    r = ranges[i]
    out = []
    if i > 0 and r.lower and ranges[i - 1].upper == r.lower:
        out.append(ranges[i - 1])
    if i + 1 < len(ranges) and r.upper and ranges[i + 1].lower == r.upper:
        out.append(ranges[i + 1])
    return out


def merged_bounds(a: ShardRange, b: ShardRange) -> tuple[str, str]:
    """(lower, upper) of two neighbouring ranges taken together."""
    first, second = (a, b) if a.upper and a.upper == b.lower else (b, a)
    return first.lower, second.upper
