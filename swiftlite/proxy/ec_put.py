"""PUT of an erasure-coded policy's object: encode while the body streams, two phases.

The client body is cut into segments and encoded (common/ec/, in the thread pool: a segment
is up to `ec_object_segment_size` bytes of arithmetic) as it arrives; fragment archive i
streams to the ring's i-th primary (fragment index = primary position; a handoff stands in
for a primary that cannot be reached before its body started), followed by a footer with
the archive's ArchiveInfo (obj/ec_archive.py has the backend protocol). The proxy holds at
most one segment of the body plus QUEUE_DEPTH pieces per archive.

Phase 1 ends when the object servers answered; only if a quorum (k + 1, at most k + m) stored
their archive does phase 2 tell those servers to make it durable (``X-Backend-Ec-Commit``),
and the client hears 201 only once a quorum of those commits succeeded. With a client ETag
that is not the body's MD5, no archive gets its footer: the connections are cut, and the
object servers drop what they received (422, nothing stored).

The ETag answered (and listed) is the MD5 of the whole body; each archive's own MD5 is
only checked between proxy and object server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from swiftlite.common.client import node_path
from swiftlite.common.ec import ECScheme, Encoder
from swiftlite.common.http import HTTPError, error
from swiftlite.common.policies import POLICY_INDEX_HEADER
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.ec_archive import COMMIT_HEADER, pack_footer
from swiftlite.proxy.backend import BackendResponse, best_response, settle
from swiftlite.proxy.put_common import Feed, container_headers, start_senders

# Body bytes gathered before one trip to the encoder: a trip costs a thread-pool hop, so
# small client chunks are joined first (the encoder still cuts exact segments).
MIN_FEED = 64 * 1024


def quorum(scheme: ECScheme) -> int:
    """Archives that must be durable before a PUT succeeds: k + 1 (k alone would leave no
    margin for one more loss), as Swift's default."""
    return min(scheme.k + 1, scheme.n)


async def _as_chunks(body) -> AsyncIterator[bytes]:
    if isinstance(body, bytes):
        if body:
            yield body
        return
    async for chunk in body:
        yield chunk


async def store(proxy, target, scheme: ECScheme, headers: dict[str, str], body,
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
    tasks = start_senders(proxy, ring, part, (acct, cont, name), primaries, feeds,
                          headers_for, limited_last=True)
    need = quorum(scheme)
    encoder = Encoder(scheme)
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
        await _send(feeds, [pack_footer(encoder.archive_info(i)) for i in range(scheme.n)],
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
    statuses = await _commit(proxy, stored, part, (acct, cont, name), headers_for)
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


async def _commit(proxy, stored: list[tuple[int, BackendResponse]], part: int,
                  names: tuple[str, str, str], headers_for) -> list[int]:
    """Phase 2 on every node that stored its archive; their statuses (201: durable, 409: a
    newer version is there already, 503: no answer)."""
    async def one(index: int, resp: BackendResponse) -> int:
        node = resp.node
        assert node is not None
        headers = dict(headers_for(index, node))
        # Only what the commit needs: the timestamp names the pending archive, the
        # container headers say where to list it.
        keep = {k: v for k, v in headers.items()
                if k.lower().startswith(("x-container-", "x-backend-", "x-timestamp",
                                         "x-trans-id"))}
        keep[COMMIT_HEADER] = "yes"
        r = await proxy.backend.request(node, "POST", node_path(node, part, *names), keep)
        return r.status if r is not None else 503

    return list(await asyncio.gather(*(one(i, r) for i, r in stored)))


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
