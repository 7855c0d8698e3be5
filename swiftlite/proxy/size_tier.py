"""Small objects of an erasure-coded policy, kept by its replicated small-object tier.

An EC policy may name a replicated policy and a size (`small_object_policy`,
`small_object_size` in swiftlite.conf; `Policy.small`): an object of its containers no
larger than that is written under the replicated policy, since k + m archives of a few KiB
each cost more disk blocks than three replicas and several times the I/O (README
"Erasure-coded policies" has the figures). The container, its listing and the client see
one container of the EC policy; the rows record the tier's index, which the
container-reconciler leaves alone.

An object therefore lives in one of two places. So that the newest write wins wherever it
went, and a small object is read as fast as a replicated one (one replica, often a local
file):
- a large PUT (EC) tombstones the tier at its own timestamp before it is acknowledged, on a
  quorum of the tier's replicas (`retire_small`; handoffs stand in for primaries that cannot
  answer), so the tier never holds an acknowledged object older than one in EC;
- a read therefore trusts a tier hit as it is, with the consistency of any replicated
  object (a replica that missed the tombstone answers stale until replication reaches it,
  as one that missed an overwrite does). A miss in the tier goes to EC, unless the tier's
  tombstone is newer than what EC has (a DELETE);
- a small PUT clears an older copy from EC in the background: a DELETE at the PUT's
  timestamp that writes a tombstone only over a current .data (`IF_PRESENT_HEADER`), so the
  common case, nothing there, writes nothing (a copy it misses is hidden by the tier's newer
  one and only costs disk);
- POST and DELETE go to both places; a DELETE the tier could not take is a 503.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from swiftlite.common.clients.client import node_path
from swiftlite.common.http import HTTPError
from swiftlite.common.policies import IF_PRESENT_HEADER, POLICY_INDEX_HEADER
from swiftlite.common.timestamp import Timestamp
from swiftlite.proxy import ec_get
from swiftlite.proxy.core_api import ProxyInterior
from swiftlite.ring import quorum_size

log = logging.getLogger("swiftlite.proxy")
MAX_CLEARING = 256  # background clears in flight per worker; past it a clear is skipped
_clearing: set[asyncio.Task] = set()


def tier_of(proxy: ProxyInterior, index: int) -> tuple[int, int] | None:
    """(replicated policy index, size limit) of policy `index`'s small-object tier."""
    policy = proxy.policies.get(index)
    return policy.small if policy is not None else None


async def sized(body: Any, length: int | None,
                limit: int) -> tuple[Any, int | None, bool]:
    """(body, length, small): whether a body goes to the tier. A body of unknown length
    (chunked) is read up to `limit` + 1 bytes to tell; past that it goes on as a stream."""
    if isinstance(body, bytes | bytearray | memoryview):
        return body, length, len(body) <= limit
    if length is not None:
        return body, length, length <= limit
    held: list[bytes] = []
    size = 0
    chunks = body.__aiter__()
    async for chunk in chunks:
        held.append(chunk)
        size += len(chunk)
        if size > limit:
            async def rest() -> AsyncIterator[bytes]:
                for piece in held:
                    yield piece
                async for piece in chunks:
                    yield piece
            return rest(), None, False
    return b"".join(held), None, True


def clear_archives(proxy: ProxyInterior, names: tuple[str, str, str], index: int, ts: str) -> None:
    """In the background, remove archives older than `ts` from EC policy `index` (a small
    write at `ts` went to the tier). Best effort: the tier's newer copy hides them."""
    if len(_clearing) >= MAX_CLEARING:
        return
    ring = proxy.object_ring_for(index)
    part = ring.get_part(*names)
    headers = {"X-Timestamp": ts, IF_PRESENT_HEADER: "true", POLICY_INDEX_HEADER: str(index),
               "X-Trans-Id": f"tx-tier-clear-{ts}"}

    async def run() -> None:
        try:
            await proxy.backend.fan_out(ring, part, "DELETE",
                                        lambda n: node_path(n, part, *names),
                                        lambda i, n: headers, use_handoffs=False)
        except Exception:  # noqa: BLE001 - a background clear never fails a request
            log.exception("clearing /%s/%s/%s from policy %d failed", *names, index)

    task = asyncio.ensure_future(run())
    _clearing.add(task)
    task.add_done_callback(_clearing.discard)


async def retire_small(proxy: ProxyInterior, names: tuple[str, str, str], tier: int, ts: str,
                       trans_id: str) -> bool:
    """Tombstone the tier's copy of a large object written at `ts` (whether or not the tier
    has one: a replica that is down now may hold an old one), on a quorum of the tier's
    replicas; handoffs stand in for primaries that cannot answer. False: too few took it."""
    ring = proxy.object_ring_for(tier)
    part = ring.get_part(*names)
    headers = {"X-Timestamp": ts, POLICY_INDEX_HEADER: str(tier), "X-Trans-Id": trans_id}
    answers = await proxy.backend.fan_out(ring, part, "DELETE",
                                          lambda n: node_path(n, part, *names),
                                          lambda i, n: headers)
    # 404: nothing was there (the tombstone is written anyway); 409: a newer write is.
    return sum(a.status < 500 for a in answers) >= quorum_size(ring.replica_count)


async def read(proxy: ProxyInterior, request: web.Request, names: tuple[str, str, str], index: int,
               tier: int, scheme, extra: dict[str, str] | None, passed: dict[str, str],
               open_object, object_response) -> web.StreamResponse:
    """GET or HEAD of an object of EC policy `index` whose small objects `tier` holds;
    `extra` the archives' headers from a feature, `passed` the tier replica's (conditions
    and Range with them: a replica answers those itself)."""
    seen: dict[str, Timestamp | None] = {}
    unknown: HTTPError | None = None
    try:
        small = await open_object(proxy, request, request.method, *names, passed,
                                  index=tier, seen=seen)
    except HTTPError as exc:
        if exc.status < 500:
            raise
        small, unknown = None, exc  # the tier cannot say: EC's answer, if it has one
    if small is not None:
        return object_response(small)  # newest: a large write tombstones the tier first
    try:
        archives = await ec_get.find(proxy, request, names, index, scheme, extra)
    except ec_get.NotFound as exc:
        if unknown is not None:
            raise unknown from None  # a small object may be there: not a 404
        tomb = max((t for t in (seen.get("tombstone"), exc.tombstone) if t is not None),
                   default=None)
        raise ec_get.NotFound(tomb) from None
    tomb = seen.get("tombstone")
    if tomb is not None and tomb > ec_get.version_of(archives):
        raise ec_get.NotFound(tomb)  # deleted; EC's archives missed the DELETE
    return await ec_get.get(proxy, request, names, index, scheme, extra, found=archives)
