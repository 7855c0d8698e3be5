"""The container-reconciler: moves objects written under another policy than their container's.

How objects get misplaced: a container created at once with different storage policies on
different replicas (a split brain: replicas unreachable from each other, two proxies
creating it). Each replica takes objects under its own policy until replication settles the
container on one (the first created: `db.broker.merge_metadata`'s first-wins rule); the
objects written under the other policy are then in the wrong data dirs, and a proxy reading
through the container's policy does not find them.

The queue is the container DB itself: each row records the policy its object was written
under (`storage_policy_index`), and a row of another policy than the container's is
misplaced (`ContainerBroker.get_misplaced`). Swift queues them in a hidden
`.misplaced_objects` account instead; here nothing new has to be written, replicated or
kept consistent with the rows, and the queue is as durable as the rows are. A cursor per DB
(a sync point named `reconciler:<policy pair>` in its `sync` table) marks the rows already
handled, so a pass reads only rows changed since; a new policy (the container converged
elsewhere) starts a new cursor from the beginning.

Every primary replica's node runs the reconciler over its DBs; moves are idempotent, and
the first replica to move an object fixes the row on every replica, so the others find
nothing left. For each misplaced row, newest timestamps winning at every step:

1. HEAD the object on the container policy's primaries. Already there at the row's time or
   newer (moved before, or written since): no copy.
2. Otherwise GET it from the row policy's primaries and PUT it, body and metadata, to the
   container policy's primaries with the SAME timestamp (X-Timestamp), no container update;
   a quorum must store it (or hold something as new: 409). A newer write meanwhile wins (the
   object servers refuse the older one); a newer version at the source is moved as itself.
3. DELETE it from the row policy's primaries: a tombstone one offset after the copied
   version's timestamp (newer than the copy there, older than any later write).
4. Fix the row on every container replica: the same timestamp under the container's policy
   (at equal times the container policy's row wins, see `ContainerBroker`).

A kill between any two steps leaves the old copy (before 3) or the new one (after 2, which
a quorum stored) readable, and the row still misplaced until 4: the next pass redoes what is
left (step 1 finds the copy). A misplaced tombstone row (a DELETE under the wrong policy)
writes the tombstone in the container's policy at its time, then fixes the row.

Erasure-coded policies move too (ec_moves.py): the source's archives are decoded (the
newest version, from at least k of its archives, checked against its ETag), and the
destination's written as the proxy writes them, in two phases: every archive PUT pending,
then committed on the k + 1 that stored it. An object moved into an EC policy with a
small-object tier leaves a tombstone at its time in the tier, as any large PUT does (reads
trust a tier hit: proxy/size_tier.py).

Limits: bodies are read whole into memory (fine for images; a multi-GiB object wants streaming);
an object's POSTed metadata moves folded into its data at the data's timestamp; rows in
shard containers (which name no policy) are not reconciled.

Status counters (`swiftlite status`, and the node's /metrics as
swiftlite_daemon_last_pass_items): dbs, misplaced (rows queued when the pass looked: the
queue length), moved, tombstoned (misplaced deletes carried over), already (found moved),
unsupported (a policy this node does not know), unavailable (no source replica answered,
or too few archives of an EC source), failures.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import aiohttp

from swiftlite.common import policies
from swiftlite.common.clients.client import node_path, node_url
from swiftlite.common.config import Section
from swiftlite.common.devices import meta_devices
from swiftlite.common.runtime import daemon
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp, from_header
from swiftlite.container import ec_moves
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.replicator import local_dbs
from swiftlite.obj.container_updates import listing_update
from swiftlite.obj.engine import COMMIT_HEADER, PASSED_HEADERS
from swiftlite.ring import Ring, quorum_size

log = logging.getLogger("swiftlite.container-reconciler")

NAME = "container-reconciler"
_COPIED = ("Content-Type", "ETag", *PASSED_HEADERS)
_META_PREFIXES = ("x-object-meta-", "x-object-sysmeta-")


def _cursor_name(metadata: dict[str, Any]) -> str:
    pair = metadata.get(policies.CONTAINER_POLICY_KEY) or ["", ""]
    return f"reconciler:{pair[0]}:{pair[1]}"


class ContainerReconciler(daemon.PeerSession):
    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = meta_devices(conf)
        self.policies = policies.load(conf.get_str("swift_dir", "/etc/swiftlite"))
        self.object_rings = {p.index: Ring.from_conf(conf, p.ring_name) for p in self.policies}
        self.container_ring = Ring.from_conf(conf, "container")
        self.batch = max(1, conf.get_int("batch_size", 100))
        self.concurrency = max(1, conf.get_int("concurrency", 4))
        self.pacer = daemon.Pacer(conf.get_float("objects_per_second", 50.0))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 10.0)

    # ---- the queue ---------------------------------------------------------------------------

    def _jobs(self) -> list[tuple[int, str]]:
        """(partition, DB path) of every container DB this node holds as a primary."""
        jobs = []
        for dev in self.container_ring.devices_on(*daemon.server_address(self.conf,
                                                                         "container")):
            for part, _, path in local_dbs(os.path.join(self.devices, dev["device"]),
                                           "container"):
                if any(n["id"] == dev["id"] for n in self.container_ring.get_part_nodes(part)):
                    jobs.append((part, path))
        return jobs

    def _scan(self, path: str) -> tuple[dict[str, Any], str, int, int | None,
                                         list[dict[str, Any]]]:
        """(info, cursor name, cursor, container policy, misplaced rows after it)."""
        broker = ContainerBroker(path)
        try:
            info = broker.get_info()
            cursor_name = _cursor_name(info["metadata"])
            since = broker.get_sync(cursor_name)
            policy, rows = broker.get_misplaced(since, self.batch)
            return info, cursor_name, since, policy, rows
        finally:
            broker.close()

    @staticmethod
    def _advance(path: str, cursor_name: str, row_id: int) -> None:
        broker = ContainerBroker(path)
        try:
            broker.set_sync(cursor_name, row_id)
        finally:
            broker.close()

    async def run_pass(self, stats: dict[str, Any]) -> None:
        for k in ("partitions", "synced", "objects"):
            stats.pop(k, None)
        for k in ("dbs", "misplaced", "moved", "tombstoned", "already", "unsupported",
                  "unavailable"):
            stats[k] = 0
        for ring in (*self.object_rings.values(), self.container_ring):
            await ring.refresh()
        for _, path in await run_blocking(self._jobs):
            stats["dbs"] += 1
            try:
                await self.reconcile_db(path, stats)
            except Exception:
                log.exception("reconciling %s", path)
                stats["failures"] += 1

    async def reconcile_db(self, path: str, stats: dict[str, Any]) -> None:
        while True:
            info, cursor_name, since, policy, rows = await run_blocking(self._scan, path)
            if policy is None or info["deleted"] or not rows:
                return
            tier = self._tier(policy)
            stats["misplaced"] += sum(int(r["storage_policy_index"]) != tier for r in rows)
            sem = asyncio.Semaphore(self.concurrency)
            done = await asyncio.gather(*(self._one(sem, info, r, policy, stats) for r in rows))
            # The cursor passes the rows handled up to the first one left: it is tried
            # again next pass (the rows moved have new ROWIDs, and are no longer misplaced).
            last = since
            for row, ok in zip(rows, done, strict=True):
                if not ok:
                    break
                last = row["ROWID"]
            if last > since:
                await run_blocking(self._advance, path, cursor_name, last)
            if not all(done) or len(rows) < self.batch:
                return

    # ---- one object -------------------------------------------------------------------------

    async def _one(self, sem: asyncio.Semaphore, info: dict[str, Any], row: dict[str, Any],
                   policy: int, stats: dict[str, Any]) -> bool:
        async with sem:
            await self.pacer.pace()
            try:
                return await self.move(info["account"], info["container"], row, policy, stats)
            except Exception:
                log.exception("moving /%s/%s/%s", info["account"], info["container"],
                              row["name"])
                stats["failures"] += 1
                return False

    def _tier(self, policy: int) -> int | None:
        """The small-object tier of policy `policy` (policies.Policy.small), if any."""
        p = self.policies.get(policy)
        return p.small[0] if p is not None and p.small is not None else None

    async def move(self, account: str, container: str, row: dict[str, Any], dst: int,
                   stats: dict[str, Any]) -> bool:
        """Carry one misplaced row's object (or tombstone) into policy `dst`; True once
        nothing is left to do for it."""
        src = int(row["storage_policy_index"])
        if src == self._tier(dst):
            return True  # a small object of an EC policy, kept by its replicated tier
        sp, dp = self.policies.get(src), self.policies.get(dst)
        if sp is None or dp is None:
            stats["unsupported"] += 1  # a policy this node's swiftlite.conf does not know
            return False
        names = (account, container, row["name"])
        row_ts = Timestamp.parse(row["created_at"])
        # An EC policy's small objects go to its tier, and reads trust a copy there: both
        # places are dst's, as they are for the proxy's writes (proxy/size_tier.py).
        tier = self._tier(dst)
        places = [dst] if tier is None else [dst, tier]
        found = [t for t in [await self._newest(p, names) for p in places] if t is not None]
        newest = max(found) if found else None
        if row["deleted"]:
            if newest is None or newest < row_ts:
                ok = all([await self._on_all(p, names, "DELETE",
                                             {"X-Timestamp": row_ts.internal}, (404, 409))
                          for p in places])
                if not ok:
                    stats["failures"] += 1
                    return False
            fixed = await self._fix_row(names, "DELETE", {"X-Timestamp": row_ts.internal},
                                        dst)
            stats["tombstoned" if fixed else "failures"] += 1
            return fixed
        listing = {"X-Timestamp": row_ts.internal, "X-Size": str(row["size"]),
                   "X-Content-Type": row["content_type"], "X-Etag": row["etag"]}
        moved_ts, row_policy = row_ts, dst
        if newest is not None and newest >= row_ts:
            stats["already"] += 1
        else:
            got = await self._read(src, names)
            if got is None:
                stats["unavailable"] += 1
                return False
            headers, body = got
            moved_ts = Timestamp.parse(headers["X-Backend-Timestamp"])
            put = {k: headers[k] for k in _COPIED if k in headers}
            put.update({k: v for k, v in headers.items() if k.lower().startswith(_META_PREFIXES)})
            if tier is not None and dp.small is not None and len(body) <= dp.small[1]:
                row_policy = tier  # small: the tier keeps it, as a proxy's PUT would
                # One offset later: at equal times a container row of the container's own
                # policy wins, and the tier's is not that (the broker knows no tiers).
                moved_ts = Timestamp(moved_ts.ticks, moved_ts.offset + 1)
            put["X-Timestamp"] = moved_ts.internal
            if row_policy == dst and dp.is_ec:
                stored = await self._put_ec(dst, names, put, body)
            else:
                stored = await self._on_all(row_policy, names, "PUT", put, (409,), body)
            if stored and row_policy == dst and tier is not None:
                # A large one: the tier is tombstoned at its time, as by a large PUT.
                stored = await self._on_all(tier, names, "DELETE",
                                            {"X-Timestamp": moved_ts.internal}, (404, 409))
            if not stored:
                stats["failures"] += 1
                return False
            listing = listing_update(moved_ts, headers, str(len(body)), headers["ETag"])
            stats["moved"] += 1
        # The old copy goes only now that the new one is on a quorum.
        gone = Timestamp(moved_ts.ticks, moved_ts.offset + 1)
        if not await self._on_all(src, names, "DELETE", {"X-Timestamp": gone.internal},
                                  (404, 409)):
            stats["failures"] += 1
            return False
        if not await self._fix_row(names, "PUT", listing, row_policy):
            stats["failures"] += 1
            return False
        return True

    # ---- backend requests -------------------------------------------------------------------

    async def _request(self, node: dict[str, Any], path: str, method: str,
                       headers: dict[str, str], body: bytes | None = None,
                       ) -> tuple[int, Any, bytes] | None:
        assert self.session is not None
        try:
            async with self.session.request(method, node_url(node, path), headers=headers,
                                            data=body) as resp:
                return resp.status, resp.headers, await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("%s %s:%s%s: %r", method, node["ip"], node["port"], path, exc)
            return None

    def _object_nodes(self, policy: int, names: tuple[str, str, str],
                      ) -> tuple[int, list[dict[str, Any]]]:
        return self.object_rings[policy].get_nodes(*names)

    async def _newest(self, policy: int, names: tuple[str, str, str]) -> Timestamp | None:
        """The newest timestamp (data or tombstone) the policy's primaries hold."""
        part, nodes = self._object_nodes(policy, names)
        headers = {policies.POLICY_INDEX_HEADER: str(policy)}
        answers = await asyncio.gather(*(
            self._request(n, node_path(n, part, *names), "HEAD", headers) for n in nodes))
        stamps = [from_header(a[1].get("X-Backend-Timestamp")) for a in answers
                  if a is not None and a[0] in (200, 404)]
        found = [s for s in stamps if s is not None]
        return max(found) if found else None

    async def _read(self, policy: int, names: tuple[str, str, str],
                    ) -> tuple[Any, bytes] | None:
        """(headers, body) of the newest version on the policy's primaries that answer."""
        part, nodes = self._object_nodes(policy, names)
        headers = {policies.POLICY_INDEX_HEADER: str(policy)}
        pol = self.policies.get(policy)
        if pol is not None and pol.is_ec:
            answers = await asyncio.gather(*(
                self._request(n, node_path(n, part, *names), "GET", headers) for n in nodes))
            return await run_blocking(ec_moves.decode_newest,
                                      [(a[1], a[2]) for a in answers
                                       if a is not None and a[0] == 200])
        best: tuple[Any, bytes] | None = None
        for n in nodes:
            got = await self._request(n, node_path(n, part, *names), "GET", headers)
            if got is None or got[0] != 200:
                continue
            if best is None or (from_header(got[1].get("X-Backend-Timestamp")) or Timestamp(0)) > \
                    (from_header(best[0].get("X-Backend-Timestamp")) or Timestamp(0)):
                best = (got[1], got[2])
        return best

    async def _on_all(self, policy: int, names: tuple[str, str, str], method: str,
                      headers: dict[str, str], also_ok: tuple[int, ...],
                      body: bytes | None = None) -> bool:
        """`method` on every primary of the policy, no container update; True when a
        quorum answered 2xx or one of `also_ok` (an equal or newer state there)."""
        part, nodes = self._object_nodes(policy, names)
        headers = {**headers, policies.POLICY_INDEX_HEADER: str(policy)}
        answers = await asyncio.gather(*(
            self._request(n, node_path(n, part, *names), method, headers, body)
            for n in nodes))
        ok = sum(1 for a in answers if a is not None and (200 <= a[0] < 300 or a[0] in also_ok))
        return ok >= quorum_size(len(nodes))

    async def _put_ec(self, policy: int, names: tuple[str, str, str], headers: dict[str, str],
                      body: bytes) -> bool:
        """`body` as EC policy `policy`'s k + m archives, no container update: pending on
        every primary, then committed on those that stored it; True when k + 1 hold it
        durably (or something as new: 409)."""
        pol = self.policies.get(policy)
        scheme = pol.ec if pol is not None else None
        assert scheme is not None
        part, nodes = self._object_nodes(policy, names)
        archives = await run_blocking(ec_moves.encode_archives, scheme, body)
        base = {k: v for k, v in headers.items() if k.lower() != "etag"}  # the footer's
        base[policies.POLICY_INDEX_HEADER] = str(policy)
        answers = await asyncio.gather(*(
            self._request(n, node_path(n, part, *names), "PUT", base, archives[i])
            for i, n in enumerate(nodes)))
        need = scheme.write_quorum
        newer = sum(1 for a in answers if a is not None and a[0] == 409)
        stored = [n for n, a in zip(nodes, answers, strict=True) if a is not None and a[0] == 201]
        if len(stored) + newer < need:
            return False  # what was stored stays pending, never read (the reconstructor's)
        commit = {"X-Timestamp": headers["X-Timestamp"], COMMIT_HEADER: "yes",
                  policies.POLICY_INDEX_HEADER: str(policy)}
        done = await asyncio.gather(*(
            self._request(n, node_path(n, part, *names), "POST", commit) for n in stored))
        return newer + sum(1 for a in done if a is not None and a[0] in (201, 409)) >= need

    async def _fix_row(self, names: tuple[str, str, str], method: str,
                       headers: dict[str, str], policy: int) -> bool:
        """The object's row, under `policy`, on every replica of its container (a quorum
        must take it; replication brings the rest)."""
        account, container, obj = names
        part, nodes = self.container_ring.get_nodes(account, container)
        headers = {**headers, policies.POLICY_INDEX_HEADER: str(policy)}
        answers = await asyncio.gather(*(
            self._request(n, node_path(n, part, account, container, obj), method, headers)
            for n in nodes))
        ok = sum(1 for a in answers if a is not None and 200 <= a[0] < 300)
        return ok >= quorum_size(len(nodes))


def run_daemon(conf: Section, once: bool = False) -> int:
    rec = ContainerReconciler(conf)
    return daemon.run(conf, NAME, rec.run_pass, once, rec.setup, rec.teardown)
