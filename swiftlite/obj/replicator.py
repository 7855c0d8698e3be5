"""The object replicator: make every primary of every local partition hold what we hold.

Per local partition (primary or handoff), per peer (the other primaries; all primaries for a
handoff): ask the peer for its suffix digests (``MERGE .../digests``, Swift's REPLICATE; no
listing on either side when they match); for each differing suffix list object states on both
sides (``MERGE .../states``), stream the files the peer lacks (``MERGE .../sync``, see
``sync``), then compare digests again; a suffix still differing is re-derived from disk on
both sides (``MERGE .../digests/{suffixes}``: heals drift left by a crash) before its states
are compared once more. So a differing suffix costs one listing per side, a drifted one two.
A handoff partition whose objects every primary holds is removed locally. Tombstones older than
``reclaim_age`` are dropped when their suffix is listed (the auditor sweeps the rest).
Files sent are paced by ``max_objects_per_second`` / ``max_bytes_per_second``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from swiftlite.common import policies
from swiftlite.common.config import Section
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.obj import sync
from swiftlite.obj.engine import digests, fileformat
from swiftlite.obj.peer_client import PeerClient, PeerError
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.object-replicator")
NAME = "object-replicator"


def local_partitions(device_path: str, policy: int = 0) -> list[int]:
    """The partitions of one policy on a device (PolicyParts for a policy > 0)."""
    try:
        names = os.listdir(os.path.join(device_path, policies.data_dir(policy)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(fileformat.policy_part(n, policy) for n in names if n.isdigit())


def local_view(device_path: str, part: int, suffixes: list[str], reclaim_age: float,
               ) -> tuple[dict[str, bytes], dict[str, dict[str, str]], int]:
    """One thread hop: list the states of `suffixes` (reclaiming old tombstones) and return
    (all digests, {suffix: {hash: state}}, tombstones reclaimed)."""
    states, reclaimed = sync.states_reclaiming(device_path, part, suffixes, reclaim_age)
    return digests.get_digests(device_path, part), states, reclaimed


def partition_jobs(conf: Section, devices: str, rings: dict[int, Ring],
                   assigned: bool = False) -> list[tuple[dict[str, Any], int]]:
    """(ring device, partition) of every local partition of the given policies' rings,
    on this node's devices (blocking: lists each device's data dirs); with `assigned`, also
    the partitions the ring gives a device that it holds nothing of (a wiped device)."""
    jobs = []
    for index, ring in rings.items():
        for dev in ring.devices_on(*daemon.server_address(conf, "object")):
            path = os.path.join(devices, dev["device"])
            if os.path.isdir(path):
                parts = set(local_partitions(path, index))
                if assigned:
                    parts |= {fileformat.policy_part(p, index)
                              for p in ring.parts_for_device(dev["id"])}
                jobs.extend((dev, p) for p in sorted(parts))
    return jobs


async def run_jobs(jobs: list[tuple[dict[str, Any], int]], concurrency: int,
                   work: Callable[[dict[str, Any], int, dict[str, Any]], Awaitable[None]],
                   stats: dict[str, Any]) -> None:
    """`work(dev, part, stats)` for every job, `concurrency` at a time; a partition that
    fails is logged and counted, and the pass goes on."""
    sem = asyncio.Semaphore(concurrency)

    async def one(dev: dict[str, Any], part: int) -> None:
        async with sem:
            try:
                await work(dev, part, stats)
            except Exception:
                log.exception("partition %s/%s", dev["device"], part)
                stats["failures"] += 1

    await asyncio.gather(*(one(d, p) for d, p in jobs))


def remove_handoff(device_path: str, part: int, verified: dict[str, bytes]) -> int:
    """Remove the objects of every suffix whose digest is still the one all primaries were
    verified to hold; drop the partition dir once nothing is left. Returns objects removed."""
    removed = 0
    current = digests.get_digests(device_path, part)
    for s, d in verified.items():
        if current.get(s) != d:
            continue  # written to since we checked: next pass
        for h, st in digests.object_states(device_path, part, s).items():
            removed += sync.remove_if_unchanged(device_path, part, h, st)
    remove_empty_partition(device_path, part)
    return removed


def remove_empty_partition(device_path: str, part: int) -> bool:
    part_dir = fileformat.part_dir(device_path, part)
    if digests.get_digests(device_path, part):
        return False
    with digests.journal(device_path, part, exclusive=True):
        try:
            names = os.listdir(part_dir)
        except FileNotFoundError:
            return False
        if any(os.path.isdir(os.path.join(part_dir, n)) for n in names):
            return False  # an (empty) suffix dir may be a write in progress
        shutil.rmtree(part_dir, ignore_errors=True)
    return True


class ObjectReplicator(daemon.PeerSession, PeerClient):
    limit_per_host = 8

    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = conf.get_str("devices", "/srv/node")
        self.reclaim_age = conf.get_float("reclaim_age", 7 * 86400.0)
        self.concurrency = max(1, conf.get_int("concurrency", 4))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 30.0)
        self.pacer = daemon.Pacer(conf.get_float("max_objects_per_second", 0.0),
                                  conf.get_size("max_bytes_per_second", 0))
        # Benchmark only: derive our digests by listing every suffix (Swift's way) instead of
        # reading the incremental ones, to compare the two under the same replicator.
        self.listing_digests = conf.get_bool("listing_digests", False)
        # One ring per storage policy; each policy's partitions replicate by its own.
        self.policies = policies.load(conf.get_str("swift_dir", "/etc/swiftlite"))
        # Not erasure-coded ones: copying archive i to the node of index j would put the
        # wrong fragment there. The object reconstructor rebuilds and reverts those.
        self.skipped = [p for p in self.policies if p.is_ec]
        self.rings = {p.index: Ring.from_conf(conf, p.ring_name) for p in self.policies
                      if not p.is_ec}
        self.ring = self.rings[0]
        self.session: aiohttp.ClientSession | None = None

    # ---- one partition --------------------------------------------------------------------

    async def replicate_part(self, dev: dict[str, Any], part: int,
                             stats: dict[str, Any]) -> None:
        device_path = os.path.join(self.devices, dev["device"])
        primaries = self.rings[fileformat.policy_of(part)].get_part_nodes(part)
        is_primary = any(n["id"] == dev["id"] for n in primaries)
        peers = [n for n in primaries if n["id"] != dev["id"]]
        local = await run_blocking(
            digests.recompute if self.listing_digests else digests.get_digests,
            device_path, part)
        stats["partitions"] += 1
        if not is_primary:
            stats["handoff_partitions"] += 1
            if not local:
                await run_blocking(remove_empty_partition, device_path, part)
                return
        states: dict[str, dict[str, str]] = {}  # listed suffixes, shared by all peers
        all_ok = True
        for peer in peers:
            try:
                local = await self.sync_peer(peer, device_path, part, local, states, stats)
            except PeerError as exc:
                log.warning("partition %s/%s with %s:%s/%s: %s", dev["device"], part,
                            peer["ip"], peer["port"], peer["device"], exc)
                stats["failures"] += 1
                all_ok = False
        if not is_primary and all_ok and peers:
            removed = await run_blocking(remove_handoff, device_path, part, local)
            stats["handoff_removed"] += removed

    async def sync_peer(self, peer: dict[str, Any], device_path: str, part: int,
                        local: dict[str, bytes], states: dict[str, dict[str, str]],
                        stats: dict[str, Any]) -> dict[str, bytes]:
        """Bring one peer up to date for this partition; returns our (possibly re-derived)
        digests. Raises PeerError unless the peer ends up holding everything we hold."""
        remote = await self.peer_digests(peer, part)
        diff = [s for s, d in local.items() if remote.get(s) != d]
        if not diff:
            return local
        todo = [s for s in diff if s not in states]
        if todo:
            local, listed, reclaimed = await run_blocking(
                local_view, device_path, part, todo, self.reclaim_age)
            states.update(listed)
            stats["reclaimed"] += reclaimed
            stats["objects"] += sum(len(v) for v in listed.values())
            diff = [s for s, d in local.items() if remote.get(s) != d]
            if not diff:
                return local
        stats["suffixes_synced"] += len(diff)
        theirs = await self.peer_states(peer, part, diff)
        wanted = [(h, f) for s in diff for h, st in states.get(s, {}).items()
                  for f in sync.files_to_send(st, theirs.get(s, {}).get(h))]
        if wanted:
            counts = await self.send(peer, device_path, part, wanted)
            stats["synced"] += counts.get("stored", 0)
            stats["bytes"] += counts["bytes"]
            if counts.get("bad"):
                stats["failures"] += counts["bad"]
            delivered = counts.get("stored", 0) + counts.get("stale", 0)
            if delivered < len(wanted):
                raise PeerError(f"{len(wanted) - delivered} of {len(wanted)} files not taken")
        # The writes above journaled their deltas on the peer: its digests are exact without
        # listing. Only a mismatch costs a re-derivation, on both sides (heals any drift).
        after = await self.peer_digests(peer, part)
        unmatched = [s for s in diff if after.get(s) != local.get(s)]
        if unmatched:
            local = await run_blocking(digests.rehash_suffixes, device_path, part, unmatched)
            after = await self.peer_digests(peer, part, unmatched)
            unmatched = [s for s in unmatched if after.get(s) != local.get(s)]
        if unmatched:
            # The peer holds newer versions there (it pushes them to us on its own pass),
            # or it was written to meanwhile: check it holds at least what we hold.
            theirs = await self.peer_states(peer, part, unmatched)
            for s in unmatched:
                for h, st in states.get(s, {}).items():
                    if not sync.covered(st, theirs.get(s, {}).get(h)):
                        raise PeerError(f"suffix {s} still differs")
        return local

    # ---- a pass ---------------------------------------------------------------------------

    async def run_pass(self, stats: dict[str, Any]) -> None:
        for k in ("handoff_partitions", "handoff_removed", "suffixes_synced", "reclaimed",
                  "bytes"):
            stats[k] = 0
        for p in self.skipped:
            log.info("skipping storage policy %d (%s, erasure_coding): its fragment archives "
                     "are rebuilt by the object-reconstructor",
                     p.index, p.name)
        for ring in self.rings.values():
            await ring.refresh()  # a changed ring file is read in the thread pool
        jobs = await run_blocking(partition_jobs, self.conf, self.devices, self.rings)
        await run_jobs(jobs, self.concurrency, self.replicate_part, stats)


def run_daemon(conf: Section, once: bool = False) -> int:
    rep = ObjectReplicator(conf)
    return daemon.run(conf, NAME, rep.run_pass, once, rep.setup, rep.teardown)
