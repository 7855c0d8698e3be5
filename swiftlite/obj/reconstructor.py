"""The object reconstructor: every primary of an erasure-coded partition holds its own archive.

Per partition of each EC policy that this node's devices hold, or that the ring gives them
(a wiped device holds nothing yet); ``ec_plan`` says what is compared and why:

- **Primary for fragment index i**: ask every other primary for its suffix digests (no
  listing anywhere when they all match ours: a no-op pass). For the differing suffixes, list
  our states and theirs; for every object whose newest durable version (``<ts>.data``) some
  peer holds and we do not (missing, only pending, older, quarantined), fetch archives of that
  version from the peers holding it (``MERGE .../fetch``) until k check out, decode, re-encode
  archive i and write it durably as ours (``ec_rebuild``; a pending archive of that version
  we hold is just made durable instead). Tombstones and .meta files we hold go to the
  primaries that lack them (``MERGE .../sync``); archives are never copied between primaries
  (each holds another index). Once per partition and ring index, archives of another index
  are found and handed to their primary (``check_index``): digests cannot see an index.
- **Not a primary** (a handoff, written while a primary was down): send each archive to the
  primary of its fragment index, tombstones and .meta files to every primary, and remove what
  was delivered (only if unchanged since listed, as the replicator removes handoffs).

A corrupt archive is quarantined by the auditor (or a GET that reads it whole); its object then
leaves our digests, and the next pass rebuilds it. After the partitions, a pass removes the
pending archives whose commit never came, ``reclaim_age`` after they were written (found by
their marks, ``pending_marks``: still no listing). Stats (the status file, ``/metrics``,
``swiftlite status``): ``fragments_rebuilt``, ``pending_committed``, ``pending_reclaimed``,
``rebuild_failures``,
``reverted`` (archives a primary took from us), ``handoff_removed`` (objects removed once
handed over), ``tombstones_sent`` (and .meta files), ``suffixes_listed``, ``index_checks``
(see ``check_index``), ``partitions`` (``primary_partitions`` / ``handoff_partitions``),
``failures``, ``bytes``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import aiohttp

from swiftlite.common import policies
from swiftlite.common.config import Section
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.obj import ec_plan, sync
from swiftlite.obj.engine import digests, ec_archive, ec_rebuild, fileformat, hashdir, pending_marks
from swiftlite.obj.peer_client import PeerClient, PeerError
from swiftlite.obj.replicator import partition_jobs, remove_empty_partition, run_jobs
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.object-reconstructor")
NAME = "object-reconstructor"
COUNTERS = ("primary_partitions", "handoff_partitions", "index_checks", "suffixes_listed",
            "fragments_rebuilt",
            "pending_committed", "pending_reclaimed", "rebuild_failures", "tombstones_sent",
            "reverted",
            "handoff_removed", "reclaimed", "bytes")


class ObjectReconstructor(daemon.PeerSession, PeerClient):
    limit_per_host = 8

    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = conf.get_str("devices", "/srv/node")
        self.reclaim_age = conf.get_float("reclaim_age", 7 * 86400.0)
        self.concurrency = max(1, conf.get_int("concurrency", 2))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 30.0)
        self.fsync = conf.get_bool("fsync", True)
        # Objects rebuilt together: their k source archives each are held in memory.
        self.rebuild_batch = max(1, conf.get_int("rebuild_batch", 8))
        self.pacer = daemon.Pacer(conf.get_float("max_objects_per_second", 0.0),
                                  conf.get_size("max_bytes_per_second", 0))
        self.policies = policies.load(conf.get_str("swift_dir", "/etc/swiftlite"))
        self.rings = {p.index: Ring.from_conf(conf, p.ring_name) for p in self.policies
                      if p.is_ec}
        self.session: aiohttp.ClientSession | None = None

    # ---- a pass ---------------------------------------------------------------------------

    async def run_pass(self, stats: dict[str, Any]) -> None:
        for k in COUNTERS:
            stats[k] = 0
        for ring in self.rings.values():
            await ring.refresh()
        # Every partition the ring gives our devices, held or not: a primary that lost a
        # partition whole (a wiped device) rebuilds it. One digest request per peer each.
        jobs = await run_blocking(partition_jobs, self.conf, self.devices, self.rings, True)
        await run_jobs(jobs, self.concurrency, self.reconstruct_part, stats)
        # After the syncs, which make durable what other primaries hold durably.
        devices = sorted({dev["device"] for dev, _ in jobs})
        stats["pending_reclaimed"] = await run_blocking(self.reclaim_pending, devices)

    def reclaim_pending(self, devices: list[str]) -> int:
        """Pending archives abandoned over `reclaim_age` ago, on every device (by their
        marks, obj/engine/pending_marks.py: no hash dir is listed to find them). Blocking."""
        removed = 0
        now = time.time()
        for dev in devices:
            removed += pending_marks.sweep(os.path.join(self.devices, dev),
                                           self.reclaim_age, now)[0]
        return removed

    async def reconstruct_part(self, dev: dict[str, Any], part: int,
                               stats: dict[str, Any]) -> None:
        device_path = os.path.join(self.devices, dev["device"])
        primaries = self.rings[fileformat.policy_of(part)].get_part_nodes(part)
        index = next((i for i, n in enumerate(primaries) if n["id"] == dev["id"]), None)
        stats["partitions"] += 1
        if index is None:
            stats["handoff_partitions"] += 1
            await self.revert(device_path, part, primaries, stats)
        else:
            stats["primary_partitions"] += 1
            await self.sync_primary(device_path, part, index, primaries, stats)

    # ---- a primary ------------------------------------------------------------------------

    async def _ask(self, stats: dict[str, Any], part: int, calls: dict[int, Any]
                   ) -> dict[int, Any]:
        """Await each peer's call; a peer that fails is logged, counted and left out."""
        results = await asyncio.gather(*calls.values(), return_exceptions=True)
        out = {}
        for j, res in zip(calls, results, strict=True):
            if isinstance(res, PeerError):
                log.warning("partition %s, primary %d: %s", part, j, res)
                stats["failures"] += 1
            elif isinstance(res, BaseException):
                raise res
            else:
                out[j] = res
        return out

    async def sync_primary(self, device_path: str, part: int, index: int,
                           primaries: list[dict[str, Any]], stats: dict[str, Any]) -> None:
        new_part = False
        if await run_blocking(ec_rebuild.index_checked, device_path, part) != index:
            new_part = await self.check_index(device_path, part, index, primaries, stats)
        try:
            await self._sync_primary(device_path, part, index, primaries, stats)
        finally:
            if new_part:  # what this pass put in a partition we held nothing of is ours
                await run_blocking(ec_rebuild.mark_index, device_path, part, index)

    async def _sync_primary(self, device_path: str, part: int, index: int,
                            primaries: list[dict[str, Any]], stats: dict[str, Any]) -> None:
        local = await run_blocking(digests.get_digests, device_path, part)
        peers = {j: n for j, n in enumerate(primaries) if j != index}
        remote = await self._ask(stats, part, {j: self.peer_digests(n, part)
                                               for j, n in peers.items()})
        diff_of = {j: ec_plan.differing(local, r) for j, r in remote.items()}
        diff = sorted({s for d in diff_of.values() for s in d})
        if not diff:
            return  # in sync: nothing listed on either side
        stats["suffixes_listed"] += len(diff)
        mine, reclaimed = await run_blocking(sync.states_reclaiming, device_path, part, diff,
                                             self.reclaim_age)
        stats["reclaimed"] += reclaimed
        theirs = await self._ask(stats, part, {j: self.peer_states(peers[j], part, d)
                                               for j, d in diff_of.items() if d})
        plan = ec_plan.plan_primary(mine, theirs)
        for j, wanted in plan.send.items():
            try:
                counts = await self.send(peers[j], device_path, part, wanted)
            except PeerError as exc:
                log.warning("partition %s, primary %d: %s", part, j, exc)
                stats["failures"] += 1
                continue
            stats["tombstones_sent"] += counts.get("stored", 0)
            stats["bytes"] += counts["bytes"]
        for i in range(0, len(plan.rebuild), self.rebuild_batch):
            await self._rebuild_batch(device_path, part, index, peers,
                                      plan.rebuild[i:i + self.rebuild_batch], stats)

    async def _rebuild_batch(self, device_path: str, part: int, index: int,
                             peers: dict[int, dict[str, Any]],
                             todo: list[tuple[str, str, list[int]]],
                             stats: dict[str, Any]) -> None:
        waiting = []
        for h, name, holders in todo:
            ts = sync.file_stem(name)
            try:
                await run_blocking(ec_archive.make_durable, device_path, part, h, ts,
                                   self.fsync)
                stats["pending_committed"] += 1  # our own pending archive of that version
            except (ec_archive.PendingMissing, hashdir.Conflict, fileformat.CorruptFile):
                waiting.append((h, name, holders))
        sources: dict[str, dict[int, ec_rebuild.Source]] = {h: {} for h, _, _ in waiting}
        order = sorted({j for _, _, hs in waiting for j in hs})
        for j in order:
            wanted = [(h, name) for h, name, hs in waiting
                      if j in hs and len(ec_rebuild.usable(sources[h])) < self._k(sources[h])]
            if not wanted:
                continue
            try:
                got = await self.fetch(peers[j], part, wanted)
            except PeerError as exc:
                log.warning("partition %s, primary %d: %s", part, j, exc)
                continue
            for (h, _), data in got.items():
                src = await run_blocking(ec_rebuild.parse_source, data)
                if src is None:
                    log.warning("partition %s: primary %d's archive of %s does not check "
                                "out; not used", part, j, h)
                else:
                    sources[h][src.info.frag_index] = src
        for h, name, _ in waiting:
            try:
                data = await run_blocking(ec_rebuild.rebuild, index, sources[h])
                outcome = await run_blocking(sync.store_whole, device_path, part, h, name,
                                             data, self.fsync)
            except ec_rebuild.RebuildError as exc:
                log.warning("cannot rebuild archive %d of %s/%s: %s", index, part, h, exc)
                stats["rebuild_failures"] += 1
                continue
            if outcome == "stored":
                stats["fragments_rebuilt"] += 1
                stats["bytes"] += len(data)
            elif outcome == "bad":
                stats["rebuild_failures"] += 1

    @staticmethod
    def _k(sources: dict[int, ec_rebuild.Source]) -> int:
        """How many sources an object needs (k, once one source says; 1 before any)."""
        return next(iter(sources.values())).info.scheme.k if sources else 1

    async def check_index(self, device_path: str, part: int, index: int,
                          primaries: list[dict[str, Any]], stats: dict[str, Any]) -> bool:
        """Once per partition and ring index (a marker file remembers it): archives of
        another index (the ring moved this device to another index of the partition) go to
        the primary of theirs and leave, so ours is rebuilt: the digests cannot see them.
        True when we hold nothing of the partition (nothing to check)."""
        found = await run_blocking(ec_rebuild.other_index_archives, device_path, part, index)
        if found is None:
            return True
        stats["index_checks"] += 1
        states, indexes = found
        if not states or await self.hand_over(device_path, part, primaries, states, indexes,
                                              stats):
            await run_blocking(ec_rebuild.mark_index, device_path, part, index)
        return False

    # ---- a handoff ------------------------------------------------------------------------

    async def revert(self, device_path: str, part: int, primaries: list[dict[str, Any]],
                     stats: dict[str, Any]) -> None:
        local = await run_blocking(digests.get_digests, device_path, part)
        if not local:
            await run_blocking(remove_empty_partition, device_path, part)
            return
        stats["suffixes_listed"] += len(local)
        states, reclaimed = await run_blocking(sync.states_reclaiming, device_path, part,
                                               sorted(local), self.reclaim_age)
        stats["reclaimed"] += reclaimed
        datas = [(h, sync.split_state(st)[0] or "") for sv in states.values()
                 for h, st in sv.items()]
        indexes = await run_blocking(ec_rebuild.frag_indexes, device_path, part,
                                     [(h, n) for h, n in datas if n.endswith(".data")])
        await self.hand_over(device_path, part, primaries, states, indexes, stats)
        await run_blocking(remove_empty_partition, device_path, part)

    async def hand_over(self, device_path: str, part: int, primaries: list[dict[str, Any]],
                        states: dict[str, dict[str, str]], indexes: dict[str, int | None],
                        stats: dict[str, Any]) -> bool:
        """Send these objects to the primaries that must hold them (``plan_revert``) and
        remove each one all its primaries took. True when every one went."""
        targets = ec_plan.plan_revert(states, indexes, len(primaries))
        undelivered: set[str] = set()
        for j, wanted in targets.items():
            try:
                counts = await self.send(primaries[j], device_path, part, wanted)
                ok = counts.get("stored", 0) + counts.get("stale", 0) == len(wanted)
                stats["bytes"] += counts["bytes"]
            except PeerError as exc:
                log.warning("partition %s, reverting to primary %d: %s", part, j, exc)
                stats["failures"] += 1
                ok = False
            if not ok:
                undelivered |= {h for h, _ in wanted}
        sent = {h for wanted in targets.values() for h, _ in wanted} - undelivered
        removed = 0
        for sv in states.values():
            for h, st in sv.items():
                if h in sent and await run_blocking(sync.remove_if_unchanged, device_path,
                                                    part, h, st):
                    removed += 1
                    stats["reverted"] += (sync.split_state(st)[0] or "").endswith(".data")
        stats["handoff_removed"] += removed
        return not undelivered and removed == len(sent)


def run_daemon(conf: Section, once: bool = False) -> int:
    rec = ObjectReconstructor(conf)
    return daemon.run(conf, NAME, rec.run_pass, once, rec.setup, rec.teardown)
