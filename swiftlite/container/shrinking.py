"""The sharder's shrinking phases: shards brought back together. A small shard merged into its
neighbour, a sharded root collapsed back into one container, a split shard retired once its
root knows its children; each pulls rows from every replica of the shards that go.

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
from collections.abc import Callable
from typing import Any

from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_ranges import (
    ShardRange,
    State,
    find,
    live,
    merge_pairs,
    merged_bounds,
    neighbours,
)
from swiftlite.container.sharder_base import SharderBase, with_state

log = logging.getLogger("swiftlite.container-sharder")

Rows = list[dict[str, Any]]
# Where pulled rows go: [(range, its rows)], or None when a row has nowhere to go.
Dest = Callable[[Rows], "list[tuple[ShardRange, Rows]] | None"]


class Shrinking(SharderBase):
    """Mixed into ``Sharder``: retire_split, collapse, after_collapse, merge, and the pull
    they share."""

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

    # -- collapse ------------------------------------------------------------------------
    async def collapse(self, broker: ContainerBroker, info: dict[str, Any],
                       own: ShardRange | None, ranges: list[ShardRange],
                       stats: dict[str, Any]) -> None:
        """Bring every shard's rows back into the root, then make it unsharded again. The
        shards stay (redirecting to the root) for `shrunk_grace`, then go."""
        assert own is not None
        stats["collapsing"] += 1
        if own.state != State.SHRINKING:
            own = with_state(own, State.SHRINKING)
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
        own = with_state(own, State.COLLAPSED, ts)
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
                    marked.append(with_state(r, State.ACTIVE))
                changed = True
        for d, a in merge_pairs(ranges, self.shrink_threshold, self.rows_per_shard, busy,
                                self.max_merges - len(merges)):
            d = with_state(d, State.SHRINKING)
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
                back = [] if i is None else [with_state(ranges[i], State.ACTIVE)]
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
