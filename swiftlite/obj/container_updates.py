"""Telling the container server about an object PUT/DELETE, or saving it for the updater.

The proxy names the container replica in X-Container-Host ("ip:port"), X-Container-Device and
X-Container-Partition (comma-separated lists pair up when there are several). The update is
sent after the object is durable; the object request waits for it at most
`container_update_timeout` seconds, and the update carries on in the background after that. A
failure (error status, refused connection, timeout) saves an async_pending record for that
target, so the object write itself never fails because of its container.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from swiftlite.common import fastclient
from swiftlite.common.async_pending import save_update
from swiftlite.common.client import node_path, quote_path
from swiftlite.common.config import Section
from swiftlite.common.threadpool import run_blocking

log = logging.getLogger("swiftlite.object.updates")


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
        self.pool: fastclient.Pool | None = None
        self.tasks: set[asyncio.Task] = set()

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
                     txid: str | None = None) -> None:
        """Send (and wait a little for) the update to every target; never raises."""
        if not targets:
            return
        if txid:
            headers = dict(headers, **{"X-Trans-Id": txid})
        task = asyncio.ensure_future(self._send_all(device_path, method, account, container,
                                                    obj, headers, targets))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        try:
            await asyncio.wait_for(asyncio.shield(task), self.wait_timeout)
        except (TimeoutError, Exception):
            pass  # it carries on (and saves itself on failure) in the background

    async def _send_all(self, device_path: str, method: str, account: str, container: str,
                        obj: str, headers: dict[str, str], targets: list[dict[str, Any]]) -> None:
        results = await asyncio.gather(
            *(self._send_one(method, account, container, obj, headers, t) for t in targets))
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

    async def _send_one(self, method: str, account: str, container: str, obj: str,
                        headers: dict[str, str], target: dict[str, Any]) -> bool:
        assert self.pool is not None
        path = node_path(target, target["partition"], account, container, obj)
        where = f"{target['ip']}:{target['port']}{path}"
        try:
            resp = await self.pool.request(target["ip"], target["port"], method, path, headers)
            await resp.read()
            if 200 <= resp.status < 300:
                return True
            log.warning("container update %s %s -> %d", method, where, resp.status)
        except (fastclient.ClientError, TimeoutError, OSError, UnicodeError) as exc:
            log.warning("container update %s %s failed: %r", method, where, exc)
        return False
