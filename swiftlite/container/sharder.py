"""The container sharder daemon: splits big containers into shards, and keeps them so.

Each pass looks at every local container DB whose partition's first primary is a local
device (so one replica leads; the others learn from it and from replication), and moves it
on by its state (``Sharder.process``; a shard's own DB, ``process_shard``). The phases are
modules of their own, mixed into ``Sharder``: ``cleaving`` (a container split into shards
and its rows copied to them: its docstring has the steps and why nothing is lost),
``shrinking`` (merging small shards, collapsing a root, retiring a split shard), on
``sharder_base`` (settings, client, test hooks).

A shard that grows past the threshold in turn splits the same way (its leader's sharder:
split points from its own names, children in the root's hidden account, cleave, switch),
then tells the root: its own range deleted, the children's ACTIVE. Until the root has
heard, the shard redirects updates to its children and answers listings with them, so a
kill -9 between the switch and telling the root loses nothing; each pass tells it again
until a quorum of the root's replicas took it. The root's ranges thus stay one flat list of
leaves, however often its shards split. `shrunk_grace` seconds after the root heard (time
for every root replica and object server route cache to learn the children), the split
shard retires: told SHRUNK, every replica's rows pulled across to the children, DELETEd.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from swiftlite.common.config import Section
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.cleaving import Cleaving
from swiftlite.container.shard_ranges import ShardRange, State, live
from swiftlite.container.sharder_base import own_name
from swiftlite.container.shrinking import Shrinking
from swiftlite.db.replicator import local_dbs

log = logging.getLogger("swiftlite.container-sharder")
NAME = "container-sharder"


class Sharder(Cleaving, Shrinking, daemon.PeerSession):
    limit_per_host = 16

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


def run_daemon(conf: Section, once: bool = False) -> int:
    sharder = Sharder(conf)
    return daemon.run(conf, NAME, sharder.run_pass, once, sharder.setup, sharder.teardown)
