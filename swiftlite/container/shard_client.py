"""The sharder's requests to container servers (signed, through its aiohttp session).

Every write goes to all primaries of the DB's partition and succeeds on a quorum; a
replica that missed it is brought up to date by the DB replicator (rows and shard ranges).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import aiohttp
import msgpack

from swiftlite.common.clients.client import node_path, node_url
from swiftlite.common.shard_redirect import CLEAVING
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.shard_ranges import ShardRange, State
from swiftlite.container.shard_server import RECORD_TYPE, SHARD_RANGE, SHARDING_STATE
from swiftlite.ring import Ring, quorum_size

log = logging.getLogger("swiftlite.container-sharder")

ROOT_HEADER = "X-Container-Sysmeta-Shard-Root"  # stored as shard_broker.ROOT_KEY
ROW_KEYS = ("name", "created_at", "size", "content_type", "etag", "deleted")


class ShardClient:
    def __init__(self, ring: Ring, session: aiohttp.ClientSession) -> None:
        self.ring = ring
        self.session = session

    async def _one(self, node: dict[str, Any], method: str, path: str,
                   headers: dict[str, str], body: bytes | None = None) -> int:
        try:
            async with self.session.request(method, node_url(node, path), headers=headers,
                                            data=body) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.debug("%s %s:%s%s failed: %r", method, node["ip"], node["port"], path, exc)
            return 0

    async def _all(self, account: str, container: str, method: str,
                   headers: dict[str, str], body: bytes | None = None,
                   also_ok: tuple[int, ...] = ()) -> bool:
        """The request to every primary of the DB; True when a quorum answered 2xx (or a
        status in `also_ok`)."""
        part, nodes = self.ring.get_nodes(account, container)
        statuses = await asyncio.gather(*(
            self._one(n, method, node_path(n, part, account, container), headers, body)
            for n in nodes))
        return sum(200 <= s < 300 or s in also_ok for s in statuses) >= quorum_size(len(nodes))

    async def create_shard(self, root: str, r: ShardRange) -> bool:
        """PUT the shard container, its own row (bounds) and its root with it."""
        own = ShardRange(name=r.name, timestamp=r.timestamp, lower=r.lower, upper=r.upper,
                         state=State.ACTIVE, state_timestamp=r.timestamp)
        headers = {"X-Timestamp": r.timestamp, SHARD_RANGE: json.dumps([own.to_dict()]),
                   ROOT_HEADER: quote(root, safe="")}
        return await self._all(r.account, r.container, "PUT", headers)

    async def delete_shard(self, r: ShardRange) -> bool:
        """DELETE a retired shard; True once a quorum of its replicas is gone (404: it was
        already, or never made there)."""
        headers = {"X-Timestamp": Timestamp.now().internal}
        return await self._all(r.account, r.container, "DELETE", headers, also_ok=(404,))

    async def send_rows(self, r: ShardRange, rows: Iterable[dict[str, Any]]) -> bool:
        """Copy rows (tombstones too) into the shard: one MERGE per replica."""
        body = msgpack.packb([{k: row[k] for k in ROW_KEYS} for row in rows],
                             use_bin_type=True)
        headers = {"Content-Type": "application/x-msgpack", CLEAVING: "1"}
        return await self._all(r.account, r.container, "MERGE", headers, body)

    async def push_ranges(self, account: str, container: str,
                          ranges: Iterable[ShardRange]) -> bool:
        """Tell every replica of a DB these ranges (they merge newest-wins)."""
        body = json.dumps([r.to_dict() for r in ranges]).encode()
        headers = {RECORD_TYPE: "shard", "Content-Type": "application/json",
                   "X-Timestamp": Timestamp.now().internal}
        return await self._all(account, container, "PUT", headers, body)

    async def pull(self, r: ShardRange, index: int, since: int,
                   limit: int) -> list[dict[str, Any]] | None:
        """Rows of one replica of a shard changed after ROWID `since`; None if it could not
        answer (a 404: the replica has no DB, so nothing to pull: [])."""
        part, nodes = self.ring.get_nodes(r.account, r.container)
        if index >= len(nodes):
            return []
        node = nodes[index]
        headers = {RECORD_TYPE: "rows", "X-Backend-Since-Row": str(max(since, 0)),
                   "X-Backend-Limit": str(limit)}
        try:
            async with self.session.get(
                    node_url(node, node_path(node, part, r.account, r.container)),
                    headers=headers) as resp:
                body = await resp.read()
                if resp.status == 404:
                    return []
                if resp.status != 200:
                    return None
                return msgpack.unpackb(body, raw=False)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None

    def replica_count(self, r: ShardRange) -> int:
        return len(self.ring.get_nodes(r.account, r.container)[1])

    async def stats(self, r: ShardRange) -> tuple[int, int] | None:
        """(objects, bytes) of a shard from its first primary that answers."""
        got = await self.head(r)
        return got[:2] if got is not None else None

    async def head(self, r: ShardRange) -> tuple[int, int, int] | None:
        """(objects, bytes, its own sharding state) of a shard from its first primary that
        answers."""
        part, nodes = self.ring.get_nodes(r.account, r.container)
        for node in nodes:
            try:
                async with self.session.head(
                        node_url(node, node_path(node, part, r.account, r.container))) as resp:
                    await resp.read()
                    if resp.status // 100 == 2:
                        return (int(resp.headers["X-Container-Object-Count"]),
                                int(resp.headers["X-Container-Bytes-Used"]),
                                int(resp.headers.get(SHARDING_STATE, "0")))
            except (aiohttp.ClientError, OSError, TimeoutError, KeyError, ValueError):
                continue
        return None
