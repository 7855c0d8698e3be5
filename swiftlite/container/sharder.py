"""The container sharder daemon: splits big containers into shards, and keeps them so.

Each pass looks at every local container DB whose partition's first primary is a local
device (so one replica leads; the others learn from it and from replication):

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

A shard that grows past the threshold in turn splits the same way (its leader's sharder:
split points from its own names, children in the root's hidden account, cleave, switch),
then tells the root: its own range deleted, the children's ACTIVE. Until the root has
heard, the shard redirects updates to its children and answers listings with them, so a
kill -9 between the switch and telling the root loses nothing; each pass tells it again
until a quorum of the root's replicas took it. The root's ranges thus stay one flat list of
leaves, however often its shards split. `shrunk_grace` seconds after the root heard (time
for every root replica and object server route cache to learn the children), the split
shard retires: told SHRUNK, every replica's rows pulled across to the children, DELETEd.

Merging: a shard left with fewer than `shrink_threshold` live rows (counts as refreshed
this pass) is merged into its smaller neighbour, if the two hold at most `rows_per_shard`
(so the result never splits again); up to `max_merges` disjoint pairs at once per root, each
resumed from its recorded phase (progress `merges`):
  copy: the donor's range SHRINKING in the root (same transaction as the merge's record);
    every donor replica's rows changed past its pull point (tombstones too) sent to a
    quorum of the acceptor's replicas, which store them unlisted (listings read a shard
    only within its segment's bounds); then the acceptor's own row widened (newer
    timestamp) on its replicas; then in one root transaction the acceptor's range widened
    and the donor's deleted (newer timestamps, so every root replica comes to agree), and
    pushed. A root replica lists those names from the donor before and from the acceptor
    after, never from both nor from neither (an update that reached the donor between
    the copy and the switch shows once the next phase pulls it, moments later);
  switched: the donor told it is SHRUNK (it redirects updates to the root, which routes
    them to the acceptor), then what reached it since the copy pulled across, each row to
    the range holding its name now;
  told: pulled again each pass for `shrunk_grace` seconds, then the donor DELETEd (a SHRUNK
    shard counts as empty: its rows were handed on) and the merge forgotten.

Collapsing: a sharded root whose shards together hold fewer than `shrink_threshold` live
rows collapses as a whole (or when an operator says so, `swiftlite shards ... shrink`): the
root stops redirecting (it takes updates itself again), pulls every row of every shard
replica (and of the donors of merges under way), tombstones too, changed after a
per-replica ROWID point (newest wins, so the order of arrival does not matter), and becomes
COLLAPSED: unsharded, listed from its own rows. For `shrunk_grace` seconds after, each pass
pulls again, in case an object server still sent an update to a shard from its route
cache; then the shards are deleted. A deleted sharded root (empty: it counts its shards) is
collapsed the same way.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from swiftlite.common import daemon
from swiftlite.common.config import Section
from swiftlite.common.devices import meta_devices
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_client import ShardClient
from swiftlite.container.shard_ranges import (
    ROUTED,
    ShardRange,
    State,
    find,
    live,
    merge_pairs,
    merged_bounds,
    neighbours,
    ranges_from_points,
)
from swiftlite.db.replicator import local_dbs
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.container-sharder")
NAME = "container-sharder"
# Test hook: exit abruptly (as kill -9 would) after this many cleave batches in a process.
EXIT_AFTER_ENV = "SWIFTLITE_SHARDER_EXIT_AFTER"
# Test hook: exit abruptly at a named point ("shard-switched": a shard that split has
# switched to sharded and told its replicas, not yet its root; "split-retiring": a split
# shard told SHRUNK, not yet pulled or deleted; the MERGE_POINTS, in order,
# the steps of merging a small shard into its neighbour).
EXIT_AT_ENV = "SWIFTLITE_SHARDER_EXIT_AT"
MERGE_POINTS = ("merge-marked", "merge-copying", "merge-copied", "merge-acceptor-grown",
                "merge-switched", "merge-donor-told")

Rows = list[dict[str, Any]]
# Where pulled rows go: [(range, its rows)], or None when a row has nowhere to go.
Dest = Callable[[Rows], "list[tuple[ShardRange, Rows]] | None"]


class Sharder(daemon.PeerSession):
    limit_per_host = 16

    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = meta_devices(conf)  # container DBs live on the meta devices, if named
        self.threshold = max(2, conf.get_int("shard_container_threshold", 1_000_000))
        self.rows_per_shard = max(1, conf.get_int("rows_per_shard", self.threshold // 2))
        self.shrink_threshold = conf.get_int("shrink_threshold", self.threshold // 10)
        self.batch = max(1, conf.get_int("cleave_batch_size", 10_000))
        self.shrunk_grace = conf.get_float("shrunk_grace", 300.0)
        # Merges under way at once per root (disjoint pairs of neighbours).
        self.max_merges = max(1, conf.get_int("max_merges", 4))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 10.0)
        self.ring = Ring.from_conf(conf, "container")
        self.session: aiohttp.ClientSession | None = None
        exit_after = os.environ.get(EXIT_AFTER_ENV, "")
        self.exit_after = int(exit_after) if exit_after.isdigit() else 0
        self.batches_sent = 0

    @property
    def client(self) -> ShardClient:
        assert self.session is not None
        return ShardClient(self.ring, self.session)

    # -- the pass ------------------------------------------------------------------------
    def _jobs(self) -> list[tuple[int, str]]:
        """(partition, db path) of every local DB this node leads."""
        jobs = []
        for dev in self.ring.devices_on(*daemon.server_address(self.conf, "container")):
            for part, _, path in local_dbs(os.path.join(self.devices, dev["device"]),
                                           "container"):
                primaries = self.ring.get_part_nodes(part)
                if primaries and primaries[0]["id"] == dev["id"]:
                    jobs.append((part, path))
        return jobs

    async def run_pass(self, stats: dict[str, Any]) -> None:
        for k in ("sharding", "sharded", "shards", "cleaved_rows", "forwarded_rows",
                  "shards_created", "roots_split", "shards_split", "collapsing", "collapsed",
                  "pulled_rows", "merging", "shards_merged", "merged_deleted",
                  "splits_retired"):
            stats[k] = 0
        await self.ring.refresh()
        jobs = await run_blocking(self._jobs)
        stats["partitions"] = len({p for p, _ in jobs})
        for _, path in jobs:
            stats["objects"] += 1
            broker = ContainerBroker(path)
            try:
                await self.process(broker, stats)
            except Exception:
                log.exception("sharding %s", path)
                stats["failures"] += 1
            finally:
                await run_blocking(broker.close)

    async def process(self, broker: ContainerBroker, stats: dict[str, Any]) -> None:
        info = await run_blocking(broker.get_info)
        own, ranges = await run_blocking(broker.get_ranges)
        state = own.state if own is not None else State.UNSHARDED
        root = await run_blocking(broker.root_of)
        if root is not None:
            await self.process_shard(broker, info, own, ranges, root, stats)
            return
        if state >= State.FOUND and state != State.SHRINKING:
            return
        if info["deleted"]:
            if state in (State.SHARDED, State.SHRINKING):
                await self.collapse(broker, info, own, ranges, stats)
            elif state == State.COLLAPSED:
                await self.after_collapse(broker, info, own, ranges, stats)
            return
        if state == State.COLLAPSED:
            await self.after_collapse(broker, info, own, ranges, stats)
        if state in (State.UNSHARDED, State.COLLAPSED):
            if info["object_count"] <= self.threshold:
                return
            own, ranges = await self.split(broker, info)
            stats["roots_split"] += 1
            state = State.SHARDING
        if state == State.SHARDING:
            stats["sharding"] += 1
            if not await self.cleave(broker, info, own, live(ranges), stats):
                return
            own, ranges = await run_blocking(broker.get_ranges)
            state = State.SHARDED
        if state == State.SHARDED:
            stats["sharded"] += 1
            stats["shards"] += len(live(ranges))
            await self.forward(broker, live(ranges), stats)
            progress = await run_blocking(broker.get_progress)
            # An acceptor still being copied into counts its donor's rows too: not yet.
            copying = {m["acceptor"] for m in progress.get("merges", {}).values()
                       if m["phase"] == "copy"}
            ranges = await self.refresh_stats(broker, info, own, live(ranges), copying)
            if progress.get("manual"):
                return  # an operator's split: neither collapsed nor merged on its own
            if sum(r.object_count for r in ranges) >= self.shrink_threshold:
                await self.merge(broker, info, own, ranges, stats)
                return
            log.info("%s: %d rows in its shards, under shrink_threshold: collapsing",
                     own_name(info), sum(r.object_count for r in ranges))
        await self.collapse(broker, info, own, ranges, stats)

    async def process_shard(self, broker: ContainerBroker, info: dict[str, Any],
                            own: ShardRange | None, ranges: list[ShardRange], root: str,
                            stats: dict[str, Any]) -> None:
        """A shard that grew past the threshold splits as a root does; once its children
        hold every row its root is told: the shard's range gone, theirs ACTIVE."""
        if own is None or info["deleted"]:
            return
        state = own.state
        if state == State.SHRUNK:  # a split shard being retired (a merged donor is not ours)
            if (await run_blocking(broker.get_progress)).get("root_told"):
                await self.retire_split(broker, own, live(ranges), stats)
            return
        if state == State.ACTIVE:
            if info["object_count"] <= self.threshold:
                return
            if await run_blocking(broker.holds_rows_outside, own.lower, own.upper):
                # An acceptor mid-merge: its split would leave the donor's rows (outside
                # its bounds) in no child. It splits once the merge has grown its range.
                log.info("%s: past the threshold but taking a merge: not split yet",
                         own.name)
                return
            own, ranges = await self.split(broker, info, root=root, own=own)
            stats["shards_split"] += 1
            state = State.SHARDING
        if state == State.SHARDING:
            stats["sharding"] += 1
            if not await self.cleave(broker, info, own, live(ranges), stats, root=root):
                return
            own, ranges = await run_blocking(broker.get_ranges)
            state = State.SHARDED
        if state == State.SHARDED:
            await self.forward(broker, live(ranges), stats)  # late updates to the children
            progress = await run_blocking(broker.get_progress)
            if progress.get("root_told"):
                if self._grace_over(progress["root_told"]):
                    await self.retire_split(broker, own, live(ranges), stats)
                return
            self._exit_at("shard-switched")
            # Tell the root, every pass until a quorum of its replicas took it: from then on
            # it routes to and lists the children (its replicator tells the others). Until
            # then this shard redirects updates to them and lists through them.
            ranges = await self.refresh_stats(broker, info, own, live(ranges))
            gone = ShardRange(**{**own.to_dict(), "deleted": 1,
                                 "timestamp": own.state_timestamp})
            account, _, container = root.partition("/")
            if await self.client.push_ranges(account, container, [gone, *ranges]):
                progress["root_told"] = Timestamp.now().internal
                await run_blocking(broker.set_progress, progress)
            else:
                log.warning("%s: could not tell root %s of its children yet", own.name, root)

    def _grace_over(self, since: str) -> bool:
        """Whether `shrunk_grace` seconds have passed since the timestamp `since`."""
        return time.time() - float(Timestamp.parse(since)) > self.shrunk_grace

    async def retire_split(self, broker: ContainerBroker, own: ShardRange,
                           children: list[ShardRange], stats: dict[str, Any]) -> None:
        """`shrunk_grace` after its root heard of the children, a split shard goes: its
        replicas are told SHRUNK (an update a stale route still sends it goes on to the
        root, which routes it to a child), every row of every replica is pulled across to
        the child holding its name (a replica that took rows the leader never saw loses
        none), then it is DELETEd. Each step is retried next pass until it succeeds."""
        if own.state != State.SHRUNK:
            if not await self.tell_shrunk(own, Timestamp.now().internal):
                return
            self._exit_at("split-retiring")
        if not await self.pull(broker, [own], by_name(children, own), stats):
            log.warning("%s: split shard not retired yet: could not pull every replica",
                        own.name)
            return
        if await self.client.delete_shard(own):
            stats["splits_retired"] += 1

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
                r = _with_state(r, State.CREATED)
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
            r = _with_state(r, State.CLEAVED)
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
        own = _with_state(own, State.SHARDED, ts)
        await run_blocking(broker.set_progress, progress, [*done, own])
        _, all_ranges = await run_blocking(broker.get_ranges)
        await self.client.push_ranges(info["account"], info["container"], [own, *all_ranges])
        log.info("%s is sharded: %d shards", own.name, len(live(all_ranges)))
        return True

    @staticmethod
    def _exit_at(point: str) -> None:
        if os.environ.get(EXIT_AT_ENV) == point:
            log.warning("%s=%s: exiting abruptly", EXIT_AT_ENV, point)
            os._exit(9)

    def _count_batch(self) -> None:
        self.batches_sent += 1
        if self.exit_after and self.batches_sent >= self.exit_after:
            log.warning("%s=%d: exiting abruptly", EXIT_AFTER_ENV, self.exit_after)
            os._exit(9)

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

    # -- collapse ------------------------------------------------------------------------
    async def collapse(self, broker: ContainerBroker, info: dict[str, Any],
                       own: ShardRange | None, ranges: list[ShardRange],
                       stats: dict[str, Any]) -> None:
        """Bring every shard's rows back into the root, then make it unsharded again. The
        shards stay (redirecting to the root) for `shrunk_grace`, then go."""
        assert own is not None
        stats["collapsing"] += 1
        if own.state != State.SHRINKING:
            own = _with_state(own, State.SHRINKING)
            await run_blocking(broker.set_progress, await run_blocking(broker.get_progress),
                               [own])
            await self._push_root(broker, info, own)
        # The donors of merges under way: their range may have left the root's table
        # already while rows that reached them late are not yet in their acceptor.
        progress = await run_blocking(broker.get_progress)
        listed = {r.name for r in live(ranges)}
        donors = [ShardRange.from_dict(m["donor"]) for m in progress.get("merges", {}).values()
                  if m["donor"]["name"] not in listed]
        targets = [r for r in live(ranges) if r.state != State.SHRUNK] + donors
        if not await self.pull(broker, targets, to(own), stats):
            return  # a replica did not answer: again next pass
        ts = Timestamp.now().internal
        for r in targets:
            await self.tell_shrunk(r, ts)
        # The donors come back into the table (SHRUNK) so the grace passes pull them too.
        gone = [ShardRange(**{**r.to_dict(), "state": int(State.SHRUNK), "state_timestamp": ts,
                              **({"deleted": 0, "timestamp": ts} if r in donors else {})})
                for r in targets]
        own = _with_state(own, State.COLLAPSED, ts)
        progress = await run_blocking(broker.get_progress)
        progress["collapsed_at"] = ts
        progress.pop("merges", None)
        await run_blocking(broker.set_progress, progress, [own, *gone])
        await self._push_root(broker, info, own)
        stats["collapsed"] += 1
        log.info("%s collapsed back into its root", own.name)

    async def tell_shrunk(self, r: ShardRange, ts: str) -> bool:
        """Tell a retired shard it is SHRUNK: it sends updates on to its root from then on
        (an object server's route cache may still name it); what reached it before it heard
        is pulled again later."""
        return await self.client.push_ranges(r.account, r.container, [ShardRange(
            name=r.name, timestamp=r.timestamp, lower=r.lower, upper=r.upper,
            state=State.SHRUNK, state_timestamp=ts)])

    async def _push_root(self, broker: ContainerBroker, info: dict[str, Any],
                         own: ShardRange) -> None:
        """Every range of the DB (and its own row) to every replica of the DB."""
        own_now, all_ranges = await run_blocking(broker.get_ranges)
        if not await self.client.push_ranges(info["account"], info["container"],
                                             [own_now or own, *all_ranges]):
            log.warning("%s: shard ranges reached fewer than a quorum of its replicas "
                        "(replication or the next pass brings them)", own.name)

    async def pull(self, broker: ContainerBroker, ranges: list[ShardRange], dest: Dest,
                   stats: dict[str, Any], exit_point: str | None = None) -> bool:
        """Merge rows (tombstones too) changed in each replica of each of `ranges` since the
        last pull (a ROWID point per replica, in the progress) into the ranges `dest` sends
        them to, a quorum of each; True when every replica answered and every row went."""
        ok = True
        for r in ranges:
            for i in range(self.client.replica_count(r)):
                key = f"{r.name}|{i}"
                while True:
                    progress = await run_blocking(broker.get_progress)
                    since = int(progress.setdefault("pulled", {}).get(key, -1))
                    rows = await self.client.pull(r, i, since, self.batch)
                    if rows is None:
                        ok = False
                        break
                    if not rows:
                        break
                    groups = dest(rows)
                    if groups is None:
                        return False
                    for target, group in groups:
                        if group and not await self.client.send_rows(target, group):
                            return False
                    progress["pulled"][key] = rows[-1]["ROWID"]
                    await run_blocking(broker.set_progress, progress)
                    stats["pulled_rows"] += len(rows)
                    if exit_point:
                        self._exit_at(exit_point)
        return ok

    async def after_collapse(self, broker: ContainerBroker, info: dict[str, Any],
                             own: ShardRange | None, ranges: list[ShardRange],
                             stats: dict[str, Any]) -> None:
        """Pull updates that reached the former shards late, for `shrunk_grace` seconds;
        then delete them (their rows are the root's now) and forget them."""
        shrunk = [r for r in live(ranges) if r.state == State.SHRUNK]
        if not shrunk:
            return
        assert own is not None
        # Again each pass of the grace: a replica the collapse's push missed (busy, down)
        # stops routing to the former shards now, not only once replication reaches it.
        await self._push_root(broker, info, own)
        await self.pull(broker, shrunk, to(own), stats)
        progress = await run_blocking(broker.get_progress)
        if self._grace_over(progress.get("collapsed_at", "0")):
            for r in shrunk:
                await self.client.delete_shard(r)
            ts = Timestamp.now().internal
            await run_blocking(broker.merge_ranges, [
                ShardRange(**{**r.to_dict(), "deleted": 1, "timestamp": ts}) for r in shrunk])

    # -- merging small neighbours --------------------------------------------------------
    async def merge(self, broker: ContainerBroker, info: dict[str, Any],
                    own: ShardRange | None, ranges: list[ShardRange],
                    stats: dict[str, Any]) -> None:
        """Small shards merged into a neighbour (`ranges`: live, fresh counts): the merges
        under way go on from where they stopped; new pairs start while fewer than
        `max_merges` are under way. Progress: `merges` {donor: {donor range, acceptor name,
        phase: copy|switched|told}} and the pull points, with the range states."""
        assert own is not None
        progress = await run_blocking(broker.get_progress)
        merges = progress.setdefault("merges", {})
        busy = {n for m in merges.values() for n in (m["donor"]["name"], m["acceptor"])}
        marked: list[ShardRange] = []
        changed = False
        for i, r in enumerate(ranges):
            # A donor marked by another replica's sharder (the leader moved): this one
            # merges it again from the start (copying twice is harmless).
            if r.state == State.SHRINKING and r.name not in merges:
                free = [n for n in neighbours(ranges, i)
                        if n.name not in busy and n.state == State.ACTIVE]
                if free:
                    a = min(free, key=lambda n: n.object_count)
                    merges[r.name] = {"donor": r.to_dict(), "acceptor": a.name, "phase": "copy"}
                    busy |= {r.name, a.name}
                else:
                    marked.append(_with_state(r, State.ACTIVE))
                changed = True
        for d, a in merge_pairs(ranges, self.shrink_threshold, self.rows_per_shard, busy,
                                self.max_merges - len(merges)):
            d = _with_state(d, State.SHRINKING)
            merges[d.name] = {"donor": d.to_dict(), "acceptor": a.name, "phase": "copy"}
            marked.append(d)
            changed = True
            log.info("%s: merging %s (%d rows) into %s (%d rows)", own.name, d.name,
                     d.object_count, a.name, a.object_count)
        if changed:
            await run_blocking(broker.set_progress, progress, marked)
            await self._push_root(broker, info, own)
            self._exit_at("merge-marked")
        for name in sorted(merges):
            await self._merge_one(broker, info, own, name, stats)
        stats["merging"] += len((await run_blocking(broker.get_progress)).get("merges", {}))

    async def _merge_one(self, broker: ContainerBroker, info: dict[str, Any], own: ShardRange,
                         donor_name: str, stats: dict[str, Any]) -> None:
        """One merge, from its recorded phase on:
        copy: the donor's rows (every replica, since its pull points) into the acceptor,
          which keeps those outside its bounds unlisted; then the acceptor's own bounds
          grown, then in the root, in one transaction, the acceptor's range grown and the
          donor's deleted (listings switch from the donor's rows to the acceptor's at once);
        switched: the donor told it is SHRUNK (it redirects updates to the root, which
          routes them to the acceptor), then its rows changed since pulled again;
        told: each pass pulls again, for `shrunk_grace` seconds; then the donor is
          deleted and the merge forgotten."""
        progress = await run_blocking(broker.get_progress)
        m = progress["merges"][donor_name]
        donor = ShardRange.from_dict(m["donor"])
        if m["phase"] == "copy":
            ranges = live((await run_blocking(broker.get_ranges))[1])
            i = next((i for i, r in enumerate(ranges) if r.name == donor_name), None)
            acceptor = None if i is None else next(
                (n for n in neighbours(ranges, i) if n.name == m["acceptor"]), None)
            got = await self.client.head(acceptor) if acceptor is not None else None
            if i is None or acceptor is None or (got is not None and got[2] != State.ACTIVE):
                # The acceptor split meanwhile: the donor stays (it may merge again later).
                log.info("%s: merge of %s given up", own.name, donor_name)
                back = [] if i is None else [_with_state(ranges[i], State.ACTIVE)]
                await self._end_merge(broker, donor_name, back)
                return
            if got is None:
                return  # the acceptor did not answer: again next pass
            current = ranges[i]
            if not await self.pull(broker, [donor], to(acceptor, current), stats,
                                   "merge-copying"):
                return
            self._exit_at("merge-copied")
            lower, upper = merged_bounds(current, acceptor)
            ts = Timestamp.now().internal
            if not await self.client.push_ranges(acceptor.account, acceptor.container, [
                    ShardRange(name=acceptor.name, timestamp=ts, lower=lower, upper=upper,
                               state=State.ACTIVE)]):  # bounds only: the state is older
                return
            self._exit_at("merge-acceptor-grown")
            got2 = await self.client.stats(acceptor)  # every row it holds is in its bounds now
            count, nbytes = got2 if got2 is not None else (
                acceptor.object_count + current.object_count,
                acceptor.bytes_used + current.bytes_used)
            grown = ShardRange(**{**acceptor.to_dict(), "timestamp": ts, "lower": lower,
                                  "upper": upper, "object_count": count, "bytes_used": nbytes,
                                  "meta_timestamp": ts})
            gone = ShardRange(**{**current.to_dict(), "timestamp": ts, "deleted": 1,
                                 "state": int(State.SHRUNK), "state_timestamp": ts})
            await self._set_phase(broker, donor_name, {"phase": "switched"}, [grown, gone])
            await self._push_root(broker, info, own)
            stats["shards_merged"] += 1
            log.info("%s: %s merged into %s", own.name, donor_name, acceptor.name)
            self._exit_at("merge-switched")
            m["phase"] = "switched"
        ranges = live((await run_blocking(broker.get_ranges))[1])
        if m["phase"] == "switched":
            ts = Timestamp.now().internal
            if not await self.tell_shrunk(donor, ts):
                return
            # What reached the donor between the copy and the switch.
            if not await self.pull(broker, [donor], by_name(ranges, donor), stats):
                return
            await self._set_phase(broker, donor_name, {"phase": "told", "told_at": ts})
            self._exit_at("merge-donor-told")
            m.update(phase="told", told_at=ts)
        if m["phase"] == "told":
            if not await self.pull(broker, [donor], by_name(ranges, donor), stats):
                return
            if not self._grace_over(m["told_at"]):
                return
            if not await self.client.delete_shard(donor):
                return
            await self._end_merge(broker, donor_name)
            stats["merged_deleted"] += 1

    async def _set_phase(self, broker: ContainerBroker, donor_name: str,
                         change: dict[str, Any], ranges: list[ShardRange] | None = None,
                         ) -> None:
        progress = await run_blocking(broker.get_progress)
        progress["merges"][donor_name].update(change)
        await run_blocking(broker.set_progress, progress, ranges or [])

    async def _end_merge(self, broker: ContainerBroker, donor_name: str,
                         ranges: list[ShardRange] | None = None) -> None:
        progress = await run_blocking(broker.get_progress)
        progress.get("merges", {}).pop(donor_name, None)
        pulled = progress.get("pulled", {})
        for key in [k for k in pulled if k.rpartition("|")[0] == donor_name]:
            del pulled[key]
        await run_blocking(broker.set_progress, progress, ranges or [])


def to(target: ShardRange, within: ShardRange | None = None) -> Dest:
    """Pulled rows all to `target` (only those `within` a range's bounds, if given)."""
    def dest(rows: Rows) -> list[tuple[ShardRange, Rows]]:
        return [(target, [x for x in rows if within is None or within.includes(x["name"])])]
    return dest


def by_name(ranges: list[ShardRange], within: ShardRange) -> Dest:
    """Pulled rows of a merged-away shard (those in its bounds) each to the range that
    holds its name now."""
    def dest(rows: Rows) -> list[tuple[ShardRange, Rows]] | None:
        groups: dict[str, tuple[ShardRange, Rows]] = {}
        for row in rows:
            if not within.includes(row["name"]):
                continue
            r = find(ranges, row["name"])
            if r is None:
                return None
            groups.setdefault(r.name, (r, []))[1].append(row)
        return list(groups.values())
    return dest


def own_name(info: dict[str, Any]) -> str:
    return f"{info['account']}/{info['container']}"


def _with_state(r: ShardRange, state: State, ts: str | None = None) -> ShardRange:
    return ShardRange(**{**r.to_dict(), "state": int(state),
                         "state_timestamp": ts or Timestamp.now().internal})


def run_daemon(conf: Section, once: bool = False) -> int:
    sharder = Sharder(conf)
    return daemon.run(conf, NAME, sharder.run_pass, once, sharder.setup, sharder.teardown)
