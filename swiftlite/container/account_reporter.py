"""Container -> account stat reports.

Container PUT/DELETE report at once (the client waits for it, and an account 404 is the
client's answer). Object count/bytes changes only mark the container dirty; a background
flusher reports each dirty container at most once per `interval`, so a burst of object
updates costs one account request, not one each. A report the account server cannot take
(down, timeout, 5xx) is saved with async_pending.save_update for the updater to replay.
A report is stamped with the newest change it carries (`report_timestamp`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from swiftlite.common.async_pending import save_update
from swiftlite.common.clients.client import node_path, node_url, quote_path
from swiftlite.common.http import HTTPError
from swiftlite.common.policies import CONTAINER_POLICY_KEY, POLICY_INDEX_HEADER
from swiftlite.common.threadpool import run_blocking
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.broker import DatabaseNotFound

log = logging.getLogger("swiftlite.container.reporter")


def parse_account_nodes(headers: Any) -> dict[str, Any] | None:
    """X-Account-Host ("ip:port[,ip:port...]"), -Device (same count), -Partition."""
    hosts = headers.get("X-Account-Host")
    if not hosts:
        return None
    devices = (headers.get("X-Account-Device") or "").split(",")
    part = headers.get("X-Account-Partition") or ""
    hosts_l = [h.strip() for h in hosts.split(",") if h.strip()]
    devices = [d.strip() for d in devices if d.strip()]
    if len(hosts_l) != len(devices) or not part.isdigit():
        raise HTTPError(400, "X-Account-Host/-Device/-Partition do not match")
    nodes = []
    for host, dev in zip(hosts_l, devices, strict=True):
        ip, _, port = host.rpartition(":")
        if not ip or not port.isdigit():
            raise HTTPError(400, f"Invalid X-Account-Host {host!r}")
        nodes.append({"ip": ip.strip("[]"), "port": int(port), "device": dev})
    return {"partition": int(part), "nodes": nodes}


def report_headers(info: dict[str, Any], stats_ts: str) -> dict[str, str]:
    return {
        "X-Put-Timestamp": info["put_timestamp"],
        "X-Delete-Timestamp": info["delete_timestamp"],
        "X-Object-Count": str(info["object_count"]),
        "X-Bytes-Used": str(info["bytes_used"]),
        "X-Timestamp": stats_ts,
        # The container's storage policy: the account keeps its stats per policy.
        POLICY_INDEX_HEADER: (info["metadata"].get(CONTAINER_POLICY_KEY) or ["0"])[0] or "0",
    }


def report_timestamp(info: dict[str, Any]) -> str:
    """A report is as new as the newest change it carries (a row, or the container's own
    PUT/DELETE), not the time it is sent: a replica that lacks the newest rows sends an older
    stamp, and the account keeps the counts of the one that has them."""
    return max(info["put_timestamp"], info["delete_timestamp"],
               info.get("stats_timestamp") or "")


def needs_report(info: dict[str, Any]) -> bool:
    return (info["reported_put_timestamp"] != info["put_timestamp"]
            or info["reported_delete_timestamp"] != info["delete_timestamp"]
            or info["reported_object_count"] != info["object_count"]
            or info["reported_bytes_used"] != info["bytes_used"])


class AccountReporter:
    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.session: aiohttp.ClientSession | None = None
        # db_file -> (broker, device path); filled by object updates, drained by the flusher.
        self._dirty: dict[str, tuple[ContainerBroker, str]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.reports_sent = 0
        self.reports_saved = 0

    def start(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self._task = asyncio.create_task(self._flush_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self.flush()  # best effort: dirty stats go out (or to async_pending)

    def mark_dirty(self, broker: ContainerBroker, device_path: str) -> None:
        self._dirty[broker.db_file] = (broker, device_path)
        self._wake.set()

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except Exception:
                log.exception("account report flush failed")
            # Coalescing window: updates in the next `interval` wait for one report.
            await asyncio.sleep(self.interval)

    async def flush(self) -> None:
        if not self._dirty:
            return
        batch, self._dirty = list(self._dirty.values()), {}

        def infos() -> list[tuple[ContainerBroker, str, dict[str, Any]]]:
            out = []
            for broker, dev_path in batch:
                try:
                    info = broker.get_info()
                except DatabaseNotFound:
                    continue
                if needs_report(info) and info["account_nodes"].get("nodes"):
                    out.append((broker, dev_path, info))
            return out

        todo = await run_blocking(infos)
        await asyncio.gather(*(self.report(b, d, i) for b, d, i in todo))

    async def report(self, broker: ContainerBroker, device_path: str,
                     info: dict[str, Any]) -> int:
        """Send this container's stats to each account node. Returns 404 when every account
        node said 404 (no such account), else 202. Failures are saved for the updater."""
        where = info["account_nodes"]
        nodes = where.get("nodes") or []
        if not nodes:
            return 202
        stats_ts = report_timestamp(info)
        headers = report_headers(info, stats_ts)
        account, container = info["account"], info["container"]
        results = await asyncio.gather(*(
            self._send(n, where["partition"], account, container, headers) for n in nodes))
        failed = [n for n, st in zip(nodes, results, strict=True) if st is None or st >= 500]
        not_found = sum(1 for st in results if st == 404)
        if failed:
            record = {"method": "PUT", "path": quote_path(account, container),
                      "headers": headers, "body": None, "timestamp": stats_ts,
                      "targets": [{**n, "partition": where["partition"]} for n in failed]}
            await run_blocking(save_update, device_path, record)
            self.reports_saved += 1
        if not_found == len(nodes):
            return 404
        # Delivered or saved: remember what the account now has (or will have).
        await run_blocking(broker.set_reported, info["put_timestamp"], info["delete_timestamp"],
                           info["object_count"], info["bytes_used"])
        return 202

    async def _send(self, node: dict[str, Any], part: int, account: str, container: str,
                    headers: dict[str, str]) -> int | None:
        assert self.session is not None
        url = node_url(node, node_path(node, part, account, container))
        try:
            async with self.session.put(url, headers=headers) as resp:
                await resp.read()
                self.reports_sent += 1
                return resp.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("account update to %s:%s failed: %r", node["ip"], node["port"], exc)
            return None
