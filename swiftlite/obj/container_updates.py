"""Telling the container server about an object PUT/DELETE, or saving it for the updater.

The proxy names the container replica in X-Container-Host ("ip:port"), X-Container-Device and
X-Container-Partition (comma-separated lists pair up when there are several). The update is
sent after the object is durable; the object request waits for it at most
`container_update_timeout` seconds, and the update carries on in the background after that. A
failure (error status, refused connection, timeout) saves an async_pending record for that
target, so the object write itself never fails because of its container.

Batching: while an update to a container server is in flight, later updates for the same
container on that server queue up, and go together as one ``MERGE /{dev}/{part}/{a}/{c}``
with a msgpack list of rows when it returns (rows for several replicas of the container on
that server go as sections of the one MERGE, see ``common.replica_groups``). No update
waits for a timer: at low load every update is the single-object PUT/DELETE, under load the
container server gets far fewer requests.
A failed batch saves each of its updates as its own async_pending record.

A sharded container's server redirects updates for names that live in a shard; they are
sent on to the shard (see ``shard_routes``), whose range is then cached so later updates
go there directly.

An update that fails in an unexpected way (a bug, a bad target) is logged with its object and
saved for the updater like any other failure; a background task's error is always logged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgpack

from swiftlite.common.async_pending import save_update
from swiftlite.common.clients import fastclient
from swiftlite.common.clients.client import node_path, quote_path
from swiftlite.common.config import Section
from swiftlite.common.policies import POLICY_INDEX_HEADER
from swiftlite.common.replica_groups import SECTION_STATUSES, SECTIONS, parse_statuses
from swiftlite.common.shard_redirect import REDIRECTS, parse_groups, parse_redirect
from swiftlite.common.sysmeta import LISTING_BYTES, OVERRIDE_ETAG
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.shard_routes import ShardRoutes

log = logging.getLogger("swiftlite.object.updates")
# Redirects an update follows: root -> shard, and a shard that split in turn -> its child
# (until its root hears of the children); a bound, too, on a loop of stale ranges.
MAX_HOPS = 3


def _row(method: str, obj: str, headers: dict[str, str]) -> dict[str, Any]:
    """The container server's batch row for one single-object update."""
    policy = headers.get(POLICY_INDEX_HEADER)
    row: dict[str, Any] = {"name": obj, "created_at": headers["X-Timestamp"], "size": 0,
                           "content_type": "", "etag": "", "deleted": 1}
    if method != "DELETE":
        row.update(size=int(headers["X-Size"]), content_type=headers["X-Content-Type"],
                   etag=headers["X-Etag"], deleted=0)
    if policy is not None:
        row["storage_policy_index"] = int(policy)
    return row


def parse_targets(headers) -> list[dict[str, Any]]:
    """The container nodes named by the request; [] when any header is missing or bad."""
    hosts = headers.get("X-Container-Host")
    devs = headers.get("X-Container-Device")
    parts = headers.get("X-Container-Partition")
    if not hosts or not devs or parts is None:
        return []
    hosts_l = [h.strip() for h in hosts.split(",") if h.strip()]
    devs_l = [d.strip() for d in devs.split(",") if d.strip()]
    parts_l = [p.strip() for p in parts.split(",") if p.strip()]
    if len(parts_l) == 1:
        parts_l *= len(hosts_l)
    if not (len(hosts_l) == len(devs_l) == len(parts_l)):
        return []
    out = []
    for host, dev, part in zip(hosts_l, devs_l, parts_l, strict=True):
        ip, sep, port = host.rpartition(":")
        if not sep or not port.isdigit() or not part.isdigit():
            return []
        out.append({"ip": ip.strip("[]"), "port": int(port), "device": dev,
                    "partition": int(part)})
    return out


class ContainerUpdater:
    def __init__(self, conf: Section) -> None:
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 3.0)
        self.wait_timeout = conf.get_float("container_update_timeout", 1.0)
        # A container server that failed an update is not waited for during this many
        # seconds (its updates still go, in the background, or to async_pending): a hung
        # container host must not add container_update_timeout to every object write.
        self.failed_hold = conf.get_float("container_update_failed_hold", 10.0)
        self.failing: dict[tuple[str, int], float] = {}  # (ip, port) -> held until
        self.pool: fastclient.Pool | None = None
        self.tasks: set[asyncio.Task] = set()
        self.batch = conf.get_bool("container_update_batching", True)
        self.max_batch = conf.get_int("container_update_max_batch", 256)
        # (ip, port, account, container) -> updates waiting for the request in flight to
        # that container server, as (device, partition, row, future); present while one is.
        self.lanes: dict[tuple, list[tuple[str, int, dict[str, Any], asyncio.Future]]] = {}
        self.routes = ShardRoutes(conf)

    async def start(self, app: Any = None) -> None:
        # The lean client: ~100us less CPU per update than aiohttp's (see fastclient).
        self.pool = fastclient.Pool(self.conn_timeout, self.node_timeout)

    async def close(self, app: Any = None) -> None:
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=self.node_timeout + 1)
        if self.pool is not None:
            await self.pool.close()

    async def update(self, device_path: str, method: str, account: str, container: str,
                     obj: str, headers: dict[str, str], targets: list[dict[str, Any]],
                     txid: str | None = None, policy_index: int = 0) -> None:
        """Send (and wait a little for) the update to every target; never raises."""
        await self.update_devices(method, account, container, obj, headers,
                                  [(device_path, targets)], txid, policy_index)

    async def update_devices(self, method: str, account: str, container: str, obj: str,
                             headers: dict[str, str],
                             per_device: list[tuple[str, list[dict[str, Any]]]],
                             txid: str | None = None, policy_index: int = 0) -> None:
        """`update` for one write stored on several devices (a grouped PUT): each device
        tells its own targets, with one task and one wait for them all. The update names
        the policy the object was written under (`policy_index`): its row records it, and
        the container-reconciler moves an object written under another policy than its
        container's."""
        per_device = [(d, t) for d, t in per_device if t]
        if not per_device:
            return
        headers = dict(headers, **{POLICY_INDEX_HEADER: str(policy_index)})
        if txid:
            headers["X-Trans-Id"] = txid
        if len(per_device) == 1:
            coro = self._send_all(per_device[0][0], method, account, container, obj, headers,
                                  per_device[0][1])
        else:
            coro = self._send_each(method, account, container, obj, headers, per_device)
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._reap)
        now = asyncio.get_running_loop().time()
        if all(self.failing.get((t["ip"], t["port"]), 0) > now
               for _, targets in per_device for t in targets):
            return  # every target failed lately: don't wait, the task carries on
        try:
            async with asyncio.timeout(self.wait_timeout):
                await asyncio.shield(task)
        except TimeoutError:
            pass  # it carries on (and saves itself on failure) in the background
        except Exception:  # noqa: BLE001 - _reap logs it; the object write stands
            pass

    def _reap(self, task: asyncio.Task) -> None:
        """A background task ended: forget it, and log whatever it raised (its own handlers
        log with more context; this is the backstop that keeps nothing silent)."""
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("container update task %r failed", task.get_coro(),
                      exc_info=task.exception())

    async def _send_each(self, method: str, account: str, container: str, obj: str,
                         headers: dict[str, str],
                         per_device: list[tuple[str, list[dict[str, Any]]]]) -> None:
        await asyncio.gather(*(self._send_all(d, method, account, container, obj, headers, t)
                               for d, t in per_device))

    async def _send_all(self, device_path: str, method: str, account: str, container: str,
                        obj: str, headers: dict[str, str], targets: list[dict[str, Any]]) -> None:
        shard = self.routes.lookup(account, container, obj)
        try:
            results = await asyncio.gather(
                *(self._send_target(method, account, container, obj, headers, t, shard)
                  for t in targets))
        except Exception:
            log.exception("container update %s /%s/%s/%s to %s failed; saving it for the "
                          "updater", method, account, container, obj, targets)
            results = [False] * len(targets)
        now = asyncio.get_running_loop().time()
        for t, ok in zip(targets, results, strict=True):
            if ok:
                self.failing.pop((t["ip"], t["port"]), None)
            else:
                self.failing[(t["ip"], t["port"])] = now + self.failed_hold
        failed = [t for t, ok in zip(targets, results, strict=True) if not ok]
        if failed:
            record = {"method": method, "path": quote_path(account, container, obj),
                      "headers": headers, "body": None, "targets": failed,
                      "timestamp": headers["X-Timestamp"]}
            try:
                await run_blocking(save_update, device_path, record)
            except Exception:
                log.exception("could not save async update for /%s/%s/%s", account,
                              container, obj)

    async def _send_target(self, method: str, account: str, container: str, obj: str,
                           headers: dict[str, str], target: dict[str, Any],
                           shard: tuple[str, str] | None) -> bool:
        """To the shard a redirect named lately (batched like any update), else, or if that
        fails (the shard moved or is gone), to the root replica as the proxy said."""
        if shard is not None:
            shard_targets = self.routes.targets(account, container, *shard, target)
            oks = [await self._send_lane(method, *shard, obj, headers, st)
                   for st in shard_targets]
            if oks and all(oks):
                return True
            self.routes.forget(account, container)
        return await self._send_lane(method, account, container, obj, headers, target)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._reap)

    async def _send_lane(self, method: str, account: str, container: str, obj: str,
                         headers: dict[str, str], target: dict[str, Any]) -> bool:
        """Send now when nothing is in flight to this container server for this container;
        otherwise queue the update, and everything queued goes as one batch (one MERGE for
        all the container's replicas on that server) when the request in flight ends."""
        if not self.batch:
            return await self._send_one(method, account, container, obj, headers, target)
        key = (target["ip"], target["port"], account, container)
        queue = self.lanes.get(key)
        if queue is not None:
            fut = asyncio.get_running_loop().create_future()
            queue.append((target["device"], target["partition"], _row(method, obj, headers),
                          fut))
            return await fut
        self.lanes[key] = []
        try:
            ok = await self._send_one(method, account, container, obj, headers, target)
        except BaseException:
            self._fail_queued(key)
            raise
        if self.lanes.get(key):
            self._spawn(self._drain(key, account, container, target, headers.get("X-Trans-Id")))
        else:
            self.lanes.pop(key, None)
        return ok

    def _fail_queued(self, key: tuple) -> None:
        for *_, fut in self.lanes.pop(key, None) or []:
            if not fut.done():
                fut.set_result(False)

    async def _drain(self, key: tuple, account: str, container: str, target: dict[str, Any],
                     txid: str | None) -> None:
        try:
            await self._drain_batches(key, account, container, target, txid)
        except Exception:
            log.exception("container batch updates to %s:%s for /%s/%s failed; their "
                          "updates are saved for the updater", target["ip"], target["port"],
                          account, container)
        finally:
            self._fail_queued(key)  # normally empty; the lane closes with it

    async def _drain_batches(self, key: tuple, account: str, container: str,
                             target: dict[str, Any], txid: str | None) -> None:
        while True:
            queue = self.lanes.get(key)
            if not queue:
                return
            batch = queue[:self.max_batch]
            del queue[:self.max_batch]
            sections: dict[tuple[str, int], list] = {}
            for device, part, row, fut in batch:
                sections.setdefault((device, part), []).append((row, fut))
            try:
                oks = await self._send_batch(account, container, [
                    (dev, part, [r for r, _ in items]) for (dev, part), items in
                    sections.items()], target, txid)
            except Exception:
                for _, _, _, fut in batch:  # taken off the queue: fail them here
                    if not fut.done():
                        fut.set_result(False)
                raise
            for ok, items in zip(oks, sections.values(), strict=True):
                for _, fut in items:
                    if not fut.done():
                        fut.set_result(ok)

    async def _send_batch(self, account: str, container: str,
                          sections: list[tuple[str, int, list[dict[str, Any]]]],
                          target: dict[str, Any], txid: str | None, hops: int = MAX_HOPS,
                          root: tuple[str, str] | None = None) -> list[bool]:
        """MERGE /{dev}/{part}/{a}/{c} with a msgpack list of rows (the container server's
        batch form of the single-object PUT/DELETE); several replicas' rows go as sections
        of one MERGE (see common.replica_groups). One success flag per section."""
        assert self.pool is not None
        dev, part, rows = sections[0]
        path = node_path({"device": dev}, part, account, container)
        headers = {"Content-Type": "application/x-msgpack"}
        if txid:
            headers["X-Trans-Id"] = txid
        if len(sections) == 1:
            body = msgpack.packb(rows, use_bin_type=True)
        else:
            headers[SECTIONS] = str(len(sections))
            body = msgpack.packb([list(x) for x in sections], use_bin_type=True)
        n = sum(len(x[2]) for x in sections)
        where = f"{target['ip']}:{target['port']}{path}"
        try:
            resp = await self.pool.request(target["ip"], target["port"], "MERGE", path, headers,
                                           body)
            data = await resp.read()
            if 200 <= resp.status < 300:
                redirected = await self._follow_batch(account, container, sections, target,
                                                      resp.headers, data, txid, hops,
                                                      root or (account, container))
                if len(sections) == 1:
                    return [redirected[0]]
                statuses = parse_statuses(resp.headers.get(SECTION_STATUSES), len(sections))
                if statuses is not None:
                    if any(not 200 <= st < 300 for st in statuses):
                        log.warning("container batch update of %d rows to %s: %s", n, where,
                                    statuses)
                    return [200 <= st < 300 and ok
                            for st, ok in zip(statuses, redirected, strict=True)]
            log.warning("container batch update of %d rows to %s -> %d", n, where,
                        resp.status)
        except (fastclient.ClientError, TimeoutError, OSError) as exc:
            log.warning("container batch update to %s failed: %r", where, exc)
        return [False] * len(sections)

    async def _follow_batch(self, account: str, container: str,
                            sections: list[tuple[str, int, list[dict[str, Any]]]],
                            target: dict[str, Any], headers: Any, data: bytes,
                            txid: str | None, hops: int, root: tuple[str, str]) -> list[bool]:
        """Send the rows a batch answer redirected to their shards; per section, whether
        all of its rows landed (not if `hops` redirects were followed already)."""
        if not headers.get(REDIRECTS):
            return [True] * len(sections)
        if hops <= 0:
            log.warning("container batch update to /%s/%s: redirected too many times",
                        account, container)
            return [False] * len(sections)
        try:
            per_section = parse_groups(msgpack.unpackb(data, raw=False))
        except (ValueError, TypeError) as exc:
            log.warning("bad redirect answer from %s:%s: %r", target["ip"], target["port"], exc)
            return [False] * len(sections)
        oks = []
        for (dev, part, _), groups in zip(sections, per_section, strict=False):
            ok = True
            root_target = dict(target, device=dev, partition=part)
            for sa, sc, lower, upper, rows in groups:
                self.routes.learn(*root, sa, sc, lower, upper)
                shard_targets = self.routes.targets(account, container, sa, sc, root_target)
                if not shard_targets:
                    ok = False
                for st in shard_targets:
                    got = await self._send_batch(sa, sc, [(st["device"], st["partition"], rows)],
                                                 st, txid, hops - 1, root)
                    ok = ok and got[0]
            oks.append(ok)
        return oks + [False] * (len(sections) - len(oks))

    async def _send_one(self, method: str, account: str, container: str, obj: str,
                        headers: dict[str, str], target: dict[str, Any],
                        hops: int = MAX_HOPS, root: tuple[str, str] | None = None) -> bool:
        """`hops`: redirects still to follow (a shard that split in turn redirects again);
        routes learnt are kept under the `root` container."""
        assert self.pool is not None
        path = node_path(target, target["partition"], account, container, obj)
        where = f"{target['ip']}:{target['port']}{path}"
        try:
            resp = await self.pool.request(target["ip"], target["port"], method, path, headers)
            await resp.read()
            if 200 <= resp.status < 300:
                return True
            shard = parse_redirect(resp.headers) if resp.status == 301 and hops > 0 else None
            if shard is not None:
                sa, sc, lower, upper = shard
                root = root or (account, container)
                self.routes.learn(*root, sa, sc, lower, upper)
                shard_targets = self.routes.targets(account, container, sa, sc, target)
                oks = [await self._send_one(method, sa, sc, obj, headers, st, hops - 1, root)
                       for st in shard_targets]
                return bool(oks) and all(oks)
            log.warning("container update %s %s -> %d", method, where, resp.status)
        except (fastclient.ClientError, TimeoutError, OSError, UnicodeError) as exc:
            log.warning("container update %s %s failed: %r", method, where, exc)
        return False


def listing_update(ts: Timestamp, metadata: dict[str, str], size: str, etag: str,
                   content_type: str | None = None) -> dict[str, str]:
    """The container update for an object written (or POSTed) with `metadata`."""
    ctype = content_type or metadata["Content-Type"]
    shown = metadata.get(LISTING_BYTES)
    if shown is not None:  # the listing shows this size; container stats count `size`
        ctype = f"{ctype};swift_bytes={shown}"
    return {"X-Timestamp": ts.internal, "X-Size": size, "X-Content-Type": ctype,
            "X-Etag": metadata.get(OVERRIDE_ETAG, etag)}
