"""The object daemons' side of the replication protocol (``sync``): what the replicator and
the reconstructor ask of a peer object server, over the cluster-signed session.

- ``peer_digests`` / ``peer_states``: a partition's suffix digests, the object states of some
  suffixes;
- ``send``: stream whole files to a peer (``MERGE .../sync``), paced;
- ``fetch``: whole files from a peer (``MERGE .../fetch``), e.g. the fragment archives a
  reconstructor decodes from.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack

from swiftlite.common import policies
from swiftlite.common.clients.client import node_url, quote_path
from swiftlite.common.runtime.daemon import Pacer
from swiftlite.common.threadpool import run_blocking
from swiftlite.obj import sync
from swiftlite.obj.engine import fileformat

READ_BATCH = 64  # files read per thread hop when streaming to a peer


class PeerError(Exception):
    pass


def _where(method: str, node: dict[str, Any], path: str) -> str:
    return f"{method} {node['ip']}:{node['port']}{path}"


def _policy_headers(part: int) -> dict[str, str] | None:
    index = fileformat.policy_of(part)
    return {policies.POLICY_INDEX_HEADER: str(index)} if index else None


class PeerClient:
    """Mixin: needs ``session`` (signed, see ``daemon.PeerSession``) and ``pacer``."""

    session: aiohttp.ClientSession | None
    pacer: Pacer

    async def _request(self, method: str, node: dict[str, Any], path: str,
                       body: Any = None, part: int = 0) -> Any:
        assert self.session is not None
        try:
            async with self.session.request(method, node_url(node, path), data=body,
                                            headers=_policy_headers(part)) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise PeerError(f"{_where(method, node, path)} -> {resp.status}")
                return msgpack.unpackb(data, raw=False)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise PeerError(f"{_where(method, node, path)}: {exc!r}") from exc

    async def peer_digests(self, node: dict[str, Any], part: int,
                           suffixes: list[str] | None = None) -> dict[str, bytes]:
        return await self._request(sync.SYNC_METHOD, node,
                                   sync.digests_path(node["device"], part, suffixes),
                                   part=part)

    async def peer_states(self, node: dict[str, Any], part: int,
                          suffixes: list[str]) -> dict[str, dict[str, str]]:
        return await self._request(sync.SYNC_METHOD, node,
                                   quote_path(node["device"], part, "states"),
                                   msgpack.packb(suffixes), part)

    async def _frames(self, device_path: str, part: int, wanted: list[tuple[str, str]],
                      sent: dict[str, int]) -> AsyncIterator[bytes]:
        for i in range(0, len(wanted), READ_BATCH):
            files = await run_blocking(sync.read_files, device_path, part,
                                       wanted[i:i + READ_BATCH])
            for h, name, data in files:
                if isinstance(data, int):
                    async for piece in self._big_file(device_path, part, h, name):
                        yield piece
                else:
                    await self.pacer.pace(1, len(data))
                    yield sync.frame(h, name, len(data)) + data
                sent["files"] += 1
                sent["bytes"] += len(data) if isinstance(data, bytes) else data

    async def _big_file(self, device_path: str, part: int, h: str,
                        name: str) -> AsyncIterator[bytes]:
        path = os.path.join(fileformat.hash_dir(device_path, part, h), name)
        first = True
        async for piece in sync.file_frame(path, h, name):
            await self.pacer.pace(1, 0) if first else await self.pacer.pace(0, len(piece))
            first = False
            yield piece

    async def send(self, node: dict[str, Any], device_path: str, part: int,
                   wanted: list[tuple[str, str]]) -> dict[str, int]:
        """Stream the wanted (hash, file) to the peer; {"stored", "stale", "bad", "files",
        "bytes"}."""
        sent = {"files": 0, "bytes": 0}
        counts = await self._request(sync.SYNC_METHOD, node,
                                     quote_path(node["device"], part, "sync"),
                                     self._frames(device_path, part, wanted, sent), part)
        counts.update(sent)
        return counts

    async def fetch(self, node: dict[str, Any], part: int,
                    wanted: list[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        """{(hash, file): whole file} of the wanted files the peer holds (a file it lacks
        is simply absent). Held in memory: callers ask for a few at a time."""
        assert self.session is not None
        path = quote_path(node["device"], part, "fetch")
        out: dict[tuple[str, str], bytes] = {}
        try:
            async with self.session.request(sync.SYNC_METHOD, node_url(node, path),
                                            data=msgpack.packb(wanted),
                                            headers=_policy_headers(part)) as resp:
                if resp.status != 200:
                    raise PeerError(f"{_where(sync.SYNC_METHOD, node, path)} -> "
                                    f"{resp.status}")
                while (head := await sync.read_frame_head(resp.content)) is not None:
                    h, name, size = head
                    data = await resp.content.readexactly(size)
                    await self.pacer.pace(1, size)
                    out[(h, name)] = data
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError, sync.BadFrame,
                asyncio.IncompleteReadError) as exc:
            raise PeerError(f"{_where(sync.SYNC_METHOD, node, path)}: {exc!r}") from exc
        return out
