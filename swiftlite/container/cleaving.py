"""The sharder's growing phases: a container split into ranges, each cleaved (copied) to its
shard, rows that changed meanwhile forwarded, and the shards' counts brought back.

Each pass moves a root that grew too big one step along:

1. unsharded root past `shard_container_threshold` live rows: split points from its own
   sorted names (every `rows_per_shard`-th), stored as FOUND ranges, the root SHARDING;
2. sharding root, range by range in order: PUT the shard container on its primaries
   (CREATED), copy the range's rows, tombstones too, `cleave_batch_size` at a time to a
   quorum of the shard's replicas, recording a name cursor after each batch, then CLEAVED:
   from then on the root's servers redirect updates for the range to the shard;
3. every range cleaved: the root SHARDED, every range ACTIVE; its own rows are kept but no
   longer listed or counted (HEAD and GET sum the shards' counts, refreshed each pass).

Nothing is lost to a race or a crash: every root row changed after sharding began has a
ROWID above the forwarding point (`fwd_row`); each pass sends those in ranges already
copied past their name to the shard (rows a stale replica or a late update put into the
root), then moves the point. Progress (cursors, fwd_row) and the range state it justifies
commit in one transaction, so a kill -9 anywhere resumes where it stopped: rows are copied
again at worst, and merging a row twice changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_ranges import (
    ROUTED,
    ShardRange,
    State,
    find,
    live,
    ranges_from_points,
)
from swiftlite.container.sharder_base import SharderBase, own_name, with_state

log = logging.getLogger("swiftlite.container-sharder")


class Cleaving(SharderBase):
    """Mixed into ``Sharder``: split, cleave, forward, refresh_stats."""

    # -- split ---------------------------------------------------------------------------
    async def split(self, broker: ContainerBroker, info: dict[str, Any],
                    manual: bool = False, root: str | None = None,
                    own: ShardRange | None = None) -> tuple[ShardRange, list[ShardRange]]:
        """`manual`: an operator's split; if the container is under shrink_threshold
        already, the automatic collapse then leaves it alone (else it would undo it).
        `root`, `own`: a shard splitting its range, named after its root."""
        points = await run_blocking(broker.find_split_points, self.rows_per_shard,
                                    self.rows_per_shard // 4)
        ts = Timestamp.now().internal
        root_account, _, root_container = (root or own_name(info)).partition("/")
        lower, upper = (own.lower, own.upper) if own is not None else ("", "")
        ranges = ranges_from_points(root_account, root_container, points, ts, lower, upper)
        own = ShardRange(name=own_name(info), timestamp=own.timestamp if own else ts,
                         lower=lower, upper=upper, state=State.SHARDING, state_timestamp=ts)
        _, old = await run_blocking(broker.get_ranges)
        ranges += [ShardRange(**{**r.to_dict(), "deleted": 1, "timestamp": ts})
                   for r in live(old)]  # a collapsed root's former shards
        # Every row there now has a ROWID <= max_row and is copied by the name scans;
        # every later change gets a bigger one and is forwarded.
        max_row = await run_blocking(broker.get_max_row)
        await run_blocking(broker.set_progress,
                           {"fwd_row": max_row, "cursors": {},
                            "manual": manual and info["object_count"] < self.shrink_threshold},
                           [*ranges, own])
        log.info("splitting %s into %d shards", own.name, len(ranges))
        await self.client.push_ranges(info["account"], info["container"], [own, *ranges])
        return own, ranges

    # -- cleave --------------------------------------------------------------------------
    async def cleave(self, broker: ContainerBroker, info: dict[str, Any], own: ShardRange | None,
                     ranges: list[ShardRange], stats: dict[str, Any],
                     root: str | None = None) -> bool:
        """Copy every range not yet cleaved; True once the DB switched to sharded. `root`:
        the DB is a shard of that root, which is told of the children at the switch."""
        assert own is not None
        root = root or own_name(info)
        progress = await run_blocking(broker.get_progress)
        progress.setdefault("cursors", {})
        for r in ranges:
            if r.state in ROUTED:
                continue
            if r.state == State.FOUND:
                if not await self.client.create_shard(root, r):
                    log.warning("%s: could not create shard %s on a quorum", root, r.name)
                    return False
                r = with_state(r, State.CREATED)
                await run_blocking(broker.set_progress, progress, [r])
                stats["shards_created"] += 1
            cursor = progress["cursors"].get(r.name, r.lower)
            while True:
                rows = await run_blocking(broker.rows_in_range, cursor, r.upper, self.batch)
                if not rows:
                    break
                if not await self.client.send_rows(r, rows):
                    log.warning("%s: cleaving %s failed; resuming next pass", root, r.name)
                    return False
                cursor = rows[-1]["name"]
                progress["cursors"][r.name] = cursor
                await run_blocking(broker.set_progress, progress)
                stats["cleaved_rows"] += len(rows)
                self._count_batch()
            r = with_state(r, State.CLEAVED)
            await run_blocking(broker.set_progress, progress, [r])
            await self._push_root(broker, info, own)
            _, all_ranges = await run_blocking(broker.get_ranges)
            # Rows that came in behind the cursor while it moved: to the shard now.
            if not await self.forward(broker, live(all_ranges), stats):
                return False
        _, all_ranges = await run_blocking(broker.get_ranges)
        if not await self.forward(broker, live(all_ranges), stats):
            return False
        ts = Timestamp.now().internal
        done = []
        for r in live(all_ranges):
            if r.state == State.CLEAVED:
                count, nbytes = await run_blocking(broker.count_range, r.lower, r.upper)
                done.append(ShardRange(**{**r.to_dict(), "state": int(State.ACTIVE),
                                          "state_timestamp": ts, "object_count": count,
                                          "bytes_used": nbytes, "meta_timestamp": ts}))
        own = with_state(own, State.SHARDED, ts)
        await run_blocking(broker.set_progress, progress, [*done, own])
        _, all_ranges = await run_blocking(broker.get_ranges)
        await self.client.push_ranges(info["account"], info["container"], [own, *all_ranges])
        log.info("%s is sharded: %d shards", own.name, len(live(all_ranges)))
        return True

    # -- forwarding ----------------------------------------------------------------------
    async def forward(self, broker: ContainerBroker, ranges: list[ShardRange],
                      stats: dict[str, Any]) -> bool:
        """Send root rows changed since the forwarding point to their shards, for names the
        cleave has passed (the others it copies itself). False if a shard did not take them."""
        while True:
            progress = await run_blocking(broker.get_progress)
            point = int(progress.get("fwd_row", -1))
            rows = await run_blocking(broker.get_items_since, point, self.batch)
            if not rows:
                return True
            cursors = progress.get("cursors", {})
            groups: dict[str, tuple[ShardRange, list[dict[str, Any]]]] = {}
            for row in rows:
                r = find(ranges, row["name"])
                if r is None:
                    continue
                cursor = cursors.get(r.name)
                if r.state in ROUTED or (cursor is not None and row["name"] <= cursor):
                    groups.setdefault(r.name, (r, []))[1].append(row)
            for r, group in groups.values():
                if not await self.client.send_rows(r, group):
                    log.warning("forwarding %d rows to %s failed", len(group), r.name)
                    return False
                stats["forwarded_rows"] += len(group)
            progress["fwd_row"] = rows[-1]["ROWID"]
            await run_blocking(broker.set_progress, progress)

    # -- a sharded root ------------------------------------------------------------------
    async def refresh_stats(self, broker: ContainerBroker, info: dict[str, Any],
                            own: ShardRange | None, ranges: list[ShardRange],
                            skip: set[str] | frozenset[str] = frozenset(),
                            ) -> list[ShardRange]:
        """The shards' counts into the root's ranges (the root's HEAD sums them), but for
        those named in `skip`; returns the live ranges as they are now."""
        changed = []
        ts = Timestamp.now().internal
        for r in ranges:
            if r.name in skip:
                continue
            got = await self.client.stats(r)
            if got is not None and got != (r.object_count, r.bytes_used):
                changed.append(ShardRange(**{**r.to_dict(), "object_count": got[0],
                                             "bytes_used": got[1], "meta_timestamp": ts}))
        if changed:
            await run_blocking(broker.merge_ranges, changed)
        # Every pass, not only on change: a root replica that was down catches up here.
        own_now, all_ranges = await run_blocking(broker.get_ranges)
        await self.client.push_ranges(info["account"], info["container"],
                                      [x for x in [own_now or own, *all_ranges] if x])
        return live(all_ranges)
