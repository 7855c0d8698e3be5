"""PUT of an erasure-coded policy's object: encode while the body streams, two phases.

The client body is cut into segments and encoded (common/ec/, in the thread pool: a segment
is up to `ec_object_segment_size` bytes of arithmetic) as it arrives; fragment archive i
streams to the ring's i-th primary (fragment index = primary position; a handoff stands in
for a primary that cannot be reached before its body started), followed by a footer with
the archive's ArchiveInfo (obj/engine/ec_archive.py has the backend protocol). The proxy holds at
most one segment of the body plus QUEUE_DEPTH pieces per archive.

Phase 1 ends when the object servers answered; only if a quorum (k + 1, at most k + m) stored
their archive does phase 2 tell those servers to make it durable (``X-Backend-Ec-Commit``),
and the client hears 201 only once a quorum of those commits succeeded (a later commit
finishes in the background). Only some commits carry the container update
(`update_senders`: 3 of a 4+2 PUT's 6, as in Swift), not every archive's. With a client ETag
that is not the body's MD5, no archive gets its footer: the connections are cut, and the
object servers drop what they received (422, nothing stored).

The ETag answered (and listed) is the MD5 of the whole body; each archive's own MD5 is
only checked between proxy and object server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from swiftlite.common.clients.client import node_path
from swiftlite.common.ec import ECScheme, Encoder
from swiftlite.common.http import HTTPError, error
from swiftlite.common.policies import POLICY_INDEX_HEADER
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import COMMIT_HEADER, pack_footer
from swiftlite.proxy.backend.replicas import (
    BackendResponse,
    Feed,
    best_response,
    settle,
)
from swiftlite.proxy.core_api import ProxyInterior
from swiftlite.proxy.put_common import container_headers
from swiftlite.ring import quorum_size

# Body bytes gathered before one trip to the encoder: a trip costs a thread-pool hop, so
# small client chunks are joined first (the encoder still cuts exact segments).
MIN_FEED = 64 * 1024


async def _as_chunks(body) -> AsyncIterator[bytes]:
    if isinstance(body, bytes):
        if body:
            yield body
        return
    async for chunk in body:
        yield chunk


async def store(proxy: ProxyInterior, target, scheme: ECScheme, headers: dict[str, str], body,
                length: int | None = None) -> web.Response:
    """Store `body` (bytes, or an async iterator of chunks) erasure-coded; the client's
    answer."""
    acct, cont, name = target.account, target.container, target.obj
    ring = proxy.object_ring_for(int(headers[POLICY_INDEX_HEADER]))
    part = ring.get_part(acct, cont, name)
    primaries = ring.get_part_nodes(part)
    if len(primaries) != scheme.n:  # check_ring refused this at load; a reload may not
        raise HTTPError(503, "Service Unavailable: the EC ring has the wrong replica count")
    expected = headers.pop("ETag", None)
    for h in ("Content-Length", "Transfer-Encoding"):  # each archive goes chunked
        headers.pop(h, None)
    cpart, cnodes = proxy.container_ring.get_nodes(acct, cont)
    headers_for = container_headers(headers, cpart, cnodes)
    feeds = [Feed() for _ in primaries]
    tasks = proxy.backend.stream_out(ring, part, "PUT",
                                     lambda n: node_path(n, part, acct, cont, name),
                                     headers_for, feeds, limited_last=True)
    need = scheme.write_quorum
    encoder = Encoder(scheme, archive_md5=False)  # the object servers compute those
    received = 0
    try:
        held: list[bytes] = []
        held_len = 0
        async for chunk in _as_chunks(body):
            received += len(chunk)
            if received > proxy.max_file_size:
                raise HTTPError(413, "Object larger than the maximum size")
            held.append(chunk)
            held_len += len(chunk)
            if held_len >= MIN_FEED:
                data = held[0] if len(held) == 1 else b"".join(held)
                held, held_len = [], 0
                await _send(feeds, await run_blocking(encoder.feed, data), need)
        if length is not None and received != length:
            raise HTTPError(499, "Client disconnected before sending the whole body")
        if held:
            await _send(feeds, await run_blocking(encoder.feed, b"".join(held)), need)
        await _send(feeds, await run_blocking(encoder.finish), need)
        if expected and expected.strip('"').lower() != encoder.etag:
            raise HTTPError(422, "Unprocessable Entity: ETag does not match the body's MD5")
        await _send(feeds, [pack_footer(encoder.footer_metadata(i)) for i in range(scheme.n)],
                    need)
        for feed in feeds:
            if not feed.dead:
                await feed.queue.put(None)
        results = await settle(tasks, scheme.n, None)
    except BaseException:
        for t in tasks:
            t.cancel()  # the object servers drop their temp files on a cut connection
        raise
    stored = [(i, r) for i, r in enumerate(results) if r is not None and r.status == 201]
    ts = Timestamp.parse(headers["X-Timestamp"])
    if len(stored) < need:
        return _failed([r or BackendResponse(503) for r in results], scheme.n, need)
    statuses = await _commit(proxy, stored, part, (acct, cont, name), headers_for,
                             len(cnodes), need)
    if statuses.count(201) < need:
        if statuses.count(201) + statuses.count(409) >= need:
            return web.Response(status=202)  # a newer write won meanwhile, as in Swift
        return error(503, "Service Unavailable: the object could not be made durable on "
                          "a quorum")
    return web.Response(status=201, headers={"ETag": encoder.etag,
                                             "Last-Modified": ts.http_date(),
                                             "X-Timestamp": ts.normal})


async def _send(feeds: list[Feed], pieces: list[bytes], need: int) -> None:
    """Archive i's next bytes to feed i; 503 once fewer than a quorum of archives can
    still be stored."""
    for feed, piece in zip(feeds, pieces, strict=True):
        if piece and not feed.dead:
            await feed.queue.put(piece)
    if sum(not f.dead for f in feeds) < need:
        raise HTTPError(503, "Service Unavailable: lost quorum while sending")


def update_senders(container_replicas: int, stored: int, need: int) -> int:
    """How many of the `stored` archives' commits carry the container update (the first
    ones; the j-th tells container replica j mod `container_replicas`), as Swift's
    `num_container_updates`: every replica is named once (nothing for the container
    replicator to do when all goes well), and if the PUT succeeds with only `need` commits,
    the failed ones having been senders, a container quorum of updates still went out
    (each sent, or saved as an async_pending by its object server). 4+2 with 3 container
    replicas: 3, where one per archive was 6."""
    if not container_replicas:
        return 0
    return min(stored, max(container_replicas,
                           quorum_size(container_replicas) + stored - need))


async def _commit(proxy: ProxyInterior, stored: list[tuple[int, BackendResponse]], part: int,
                  names: tuple[str, str, str], headers_for, container_replicas: int,
                  need: int) -> list[int]:
    """Phase 2 on every node that stored its archive; the statuses of those answered (201:
    durable, 409: a newer version is there already, 503: no answer) once `need` are 201 or
    all have answered. A commit still running then carries on in the background: the
    client's 201 waits for a quorum of durable archives, not for the last one."""
    senders = update_senders(container_replicas, len(stored), need)

    async def one(j: int, resp: BackendResponse) -> int:
        node = resp.node
        assert node is not None
        headers = dict(headers_for(j, node))
        # Only what the commit needs: the timestamp names the pending archive, the
        # container headers (of the first `senders` commits) say where to list it.
        keep = {k: v for k, v in headers.items()
                if k.lower().startswith(("x-backend-", "x-timestamp", "x-trans-id"))
                or (j < senders and k.lower().startswith("x-container-"))}
        keep[COMMIT_HEADER] = "yes"
        r = await proxy.backend.request(node, "POST", node_path(node, part, *names), keep)
        return r.status if r is not None else 503

    pending = {asyncio.ensure_future(one(j, r)) for j, (_, r) in enumerate(stored)}
    statuses: list[int] = []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        statuses += [t.result() for t in done]
        if statuses.count(201) >= need:
            break
    for task in pending:  # held until done (the loop keeps only weak references)
        _LATE_COMMITS.add(task)
        task.add_done_callback(_late_done)
    return statuses


_LATE_COMMITS: set[asyncio.Future] = set()


def _late_done(task: asyncio.Future) -> None:
    _LATE_COMMITS.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a failed late commit leaves a .pend, as a dead proxy


def _failed(responses: list[BackendResponse], n: int, need: int) -> web.Response:
    statuses = [r.status for r in responses]
    if statuses.count(409) and statuses.count(201) + statuses.count(409) >= need:
        # A newer version was durable on some nodes already: this write lost the race (its
        # archives stored elsewhere stay pending, removed when that version is committed).
        return web.Response(status=202)
    best = best_response(responses, n)
    if best.status == 409:
        return web.Response(status=202)  # an equal-or-newer write already won, as in Swift
    if best.status == 412:
        return error(412, "Precondition Failed")
    if best.status in (400, 413, 499):
        return error(best.status, best.body.decode(errors="replace").strip() or "Bad Request")
    return error(503, "Service Unavailable: the object could not be stored on a quorum")
