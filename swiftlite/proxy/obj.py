"""Object requests: PUT fans one pass over the body out to every replica; GET reads one.

PUT: the proxy assigns X-Timestamp, sends the body to all primaries at once (small bodies in
one buffer, large or chunked ones streamed chunk by chunk through bounded queues, never held
whole), substitutes a handoff for a primary that cannot be reached, and answers 201 once a
quorum has the object durably.
GET/HEAD: replicas in random order so all serve reads; a 404 falls through to the next, and a
tombstone newer than a replica's data wins.
Objects of erasure-coded policies are stored and read by proxy/ec_put.py and ec_get.py
(`_store` and `_get` hand them over first); POST and DELETE are the same for both.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.clients.client import node_path
from swiftlite.common.clients.fastclient import Response
from swiftlite.common.http import HTTPError, error, method_not_allowed, txid
from swiftlite.common.observe import metrics
from swiftlite.common.policies import POLICY_INDEX_HEADER
from swiftlite.common.ranges import RANGE_AND_CONDITIONS
from swiftlite.common.replica_groups import MAX_BODY
from swiftlite.common.runtime.aiohttp_seams import request_state
from swiftlite.common.timestamp import Timestamp, from_header
from swiftlite.obj.engine import policy_part
from swiftlite.proxy import ec_get, ec_put, size_tier
from swiftlite.proxy.backend.local_reads import LocalResponse
from swiftlite.proxy.backend.nodes import (
    node_key,
    read_order,
    verdicts,
)
from swiftlite.proxy.backend.replicas import (
    NETWORK_ERRORS,
    BackendResponse,
    Feed,
    best_response,
    client_headers,
    hedged,
    settle,
)
from swiftlite.proxy.common import metadata_headers
from swiftlite.proxy.core_api import ProxyInterior, Target
from swiftlite.proxy.put_common import container_headers
from swiftlite.proxy.request import (
    BACKEND_GET_HEADERS,
    BACKEND_PUT_HEADERS,
    BODY,
    TIMESTAMP,
)
from swiftlite.proxy.response import BodyCutShort, BodyResponse, bytes_response
from swiftlite.ring import quorum_size

log = logging.getLogger("swiftlite.proxy")

MAX_DELETE_AT = 9999999999
GET_PASS_HEADERS = RANGE_AND_CONDITIONS  # what a GET asks its replicas along with the name
STREAM_CHUNK = 64 * 1024
OBJECT_POLICY = "swiftlite.object_policy"  # request key: the container's policy index
# A replica's answer: from its object server, or read here (proxy.local_reads).
Answer = Response | LocalResponse


async def handle(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    method = request.method
    if method in ("GET", "HEAD"):
        await proxy.authorize_read(request, target)
        return await _get(proxy, request, target)
    if method in ("PUT", "POST", "DELETE"):
        await proxy.authorize_container(request, target, write=True)
        request[OBJECT_POLICY] = await proxy.object_policy(
            request, target.account, target.container)
        try:
            if method == "PUT":
                return await _put(proxy, request, target)
            if method == "POST":
                return await _post(proxy, request, target)
            return await _delete(proxy, request, target)
        finally:
            # After the storage servers answered (or not: a timeout may still have written).
            await proxy.object_written(target)
    raise method_not_allowed("COPY, DELETE, GET, HEAD, OPTIONS, POST, PUT")


# ---- GET / HEAD ----------------------------------------------------------------------------

async def _get(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    extra = request_state(request).get(BACKEND_GET_HEADERS)
    index = await proxy.object_policy(request, target.account, target.container)
    scheme = proxy.ec_scheme(index)
    if scheme is not None:  # before the object cache and local reads: they see archives
        names = (target.account, target.container, target.obj)
        tier = size_tier.tier_of(proxy, index)
        if tier is not None:
            return await size_tier.read(proxy, request, names, index, tier[0], scheme, extra,
                                        _replica_headers(proxy, request, extra), open_object,
                                        object_response)
        return await ec_get.get(proxy, request, names, index, scheme, extra)
    cache = proxy.object_cache
    since = 0
    if cache is not None and cache.cacheable(request, extra):
        # The caller was judged already (handle): the cache only saves the round trip.
        entry, since = cache.lookup((target.account, target.container, target.obj))
        if entry is not None:
            return bytes_response(200, CIMultiDict(entry.headers), entry.body)
    resp = await open_object(proxy, request, request.method, target.account, target.container,
                             target.obj, _replica_headers(proxy, request, extra))
    if resp is None:
        return error(404, "Not Found")
    if since and resp.status == 200 and request.method == "GET":
        length = int(resp.headers.get("Content-Length", -1))
        if 0 <= length <= cache.max_object:
            return await _fill_cache(cache, target, resp, length, since)
    return object_response(resp)


def _replica_headers(proxy: ProxyInterior, request: web.Request,
                     extra: dict[str, str] | None) -> dict[str, str]:
    """What a replica's GET/HEAD carries: the caller's Range and conditions (a replica
    answers those itself), a pipeline feature's backend headers (never a client's), and
    X-Open-Expired where the proxy allows it."""
    headers = {h: request.headers[h] for h in GET_PASS_HEADERS if h in request.headers}
    if extra:
        headers.update(extra)
    _pass_open_expired(proxy, request, headers)
    return headers


async def _fill_cache(cache, target, resp: Answer, length: int,
                      since: int) -> web.StreamResponse:
    """Read a small object whole, keep it, and answer from memory."""
    try:
        body = await resp.read()
    except NETWORK_ERRORS as exc:
        raise HTTPError(503, "Service Unavailable") from exc
    finally:
        resp.release()
    if len(body) != length:  # the replica stopped short (found its copy corrupt, say)
        raise HTTPError(503, "Service Unavailable")
    headers = client_headers(resp.headers)
    cache.put((target.account, target.container, target.obj), headers, body, since)
    return bytes_response(200, CIMultiDict(headers), body)


def _pass_open_expired(proxy: ProxyInterior, request: web.Request, headers: dict[str, str]) -> None:
    if proxy.allow_open_expired and "X-Open-Expired" in request.headers:
        headers["X-Open-Expired"] = request.headers["X-Open-Expired"]


async def open_object(proxy: ProxyInterior, request: web.Request, method: str, acct: str,
                      cont: str, name: str,
                      extra: dict[str, str] | None = None, index: int | None = None,
                      seen: dict[str, Timestamp | None] | None = None) -> Answer | None:
    """The first replica's answer worth relaying (the caller releases it); None for 404.

    Replicas are tried in random order; 404s and errors fall through to the next (and to
    handoffs); a replica whose data is older than a tombstone seen elsewhere is skipped.
    None (404) only when a quorum said so, counting primaries' 404s, handoffs' tombstones
    (a handoff that never held the object proves nothing) and the skipped stale replicas,
    as Swift; else 503: replicas
    that could not be reached must not make an object look deleted.

    `index`: the policy to read (default: the container's); `seen["tombstone"]` is set to
    the newest tombstone the replicas named.
    """
    if index is None:
        index = await proxy.object_policy(request, acct, cont)
    ring = proxy.object_ring_for(index)
    # A policy's partition names its data dir too (local reads open its files).
    part = policy_part(ring.get_part(acct, cont, name), index)
    headers = proxy.backend_headers(request)
    if index:
        headers[POLICY_INDEX_HEADER] = str(index)
    if extra:
        headers.update(extra)
    order = read_order(ring, part)
    nodes: Iterable[dict] = order
    newest = request.headers.get("X-Newest", "").lower() in ("true", "1", "yes")
    if newest:
        nodes = await _newest_first(proxy, request, part, list(order), (acct, cont, name))
    newest_tombstone: Timestamp | None = None
    not_found = 0
    primaries: set[str] | None = None
    winner: Answer | None = None

    local = proxy.local_reads

    async def send(node: dict) -> Answer | None:
        if local is not None:
            answer = await local.open(node, method, part, (acct, cont, name), headers)
            if answer is not None:
                return answer
        metrics.replica_read(node, "http")
        return await proxy.backend.open(node, method, node_path(node, part, acct, cont, name),
                                        headers)

    if local is not None and not newest:
        # The first replica read here, without hedging's tasks and timers: a local read
        # does not hang on a peer. Anything but an answer worth relaying (a 404, say)
        # is dropped and the replicas are asked as usual, this one again included.
        first = next((n for n in order.primaries if not proxy.limiter.limited(n)), None)
        answer = await local.open(first, method, part, (acct, cont, name), headers) \
            if first is not None else None
        if answer is not None:
            if answer.status < 500 and answer.status != 404:
                return answer
            answer.release()

    async with aclosing(hedged(proxy, nodes, send, lambda r: r.release(),
                               in_order=newest)) as answers:
        async for node, resp in answers:
            if resp is None:
                continue
            if resp.status == 404 or resp.status >= 500:
                if resp.status == 404:
                    tomb = from_header(resp.headers.get("X-Backend-Timestamp"))
                    if tomb and (newest_tombstone is None or tomb > newest_tombstone):
                        newest_tombstone = tomb
                    if primaries is None:
                        primaries = {node_key(n) for n in ring.get_part_nodes(part)}
                    if tomb or node_key(node) in primaries:
                        not_found += 1
                resp.release()
                continue
            data_ts = from_header(resp.headers.get("X-Timestamp"))
            if newest_tombstone and data_ts and data_ts < newest_tombstone \
                    and resp.status < 300:
                # A stale replica: a newer delete exists elsewhere (in flight, say). It
                # counts toward the 404: else a DELETE racing this GET made it a 503.
                resp.release()
                not_found += 1
                continue
            winner = resp
            break
    if seen is not None:
        seen["tombstone"] = newest_tombstone
    if winner is not None:
        return winner
    if not_found >= quorum_size(ring.replica_count):
        return None
    raise HTTPError(503, "Service Unavailable")


async def _newest_first(proxy: ProxyInterior, request, part, nodes, names) -> list[dict]:
    """X-Newest: HEAD every replica and try them newest first."""
    verdicts(proxy.limiter)  # shared by the HEADs' tasks

    async def head(node):
        r = await proxy.backend.request(node, "HEAD", node_path(node, part, *names),
                                        proxy.backend_headers(request))
        ts = from_header(r.headers.get("X-Timestamp") or r.headers.get("X-Backend-Timestamp")) \
            if r else None
        return (ts.ticks if ts else -1), node
    ranked = await asyncio.gather(*(head(n) for n in nodes))
    return [n for _, n in sorted(ranked, key=lambda x: -x[0])]


def object_response(resp: Answer) -> BodyResponse:
    """A replica's answer as the client's, its body streamed when the pipeline is done."""
    length = resp.headers.get("Content-Length")
    held = resp.whole() if type(resp) is LocalResponse else None
    if held is not None:  # sent with the headers, no iterator
        return BodyResponse(resp.status, client_headers(resp.headers), None,
                            int(length) if length is not None else len(held),
                            on_close=resp.release, data=held)
    return BodyResponse(resp.status, client_headers(resp.headers),
                        _backend_chunks(resp), int(length) if length is not None else None,
                        on_close=resp.release)


async def _backend_chunks(resp: Answer):
    try:
        async for chunk in resp.iter_chunks(STREAM_CHUNK * 4):
            yield chunk
    except NETWORK_ERRORS as exc:
        # The replica stopped mid-body (died, or found its copy corrupt).
        raise BodyCutShort(repr(exc)) from None


# ---- PUT -----------------------------------------------------------------------------------

def _put_headers(proxy: ProxyInterior, request: web.Request, target: Target,
                 ts: Timestamp) -> dict[str, str]:
    headers = proxy.backend_headers(request, ts)
    headers.update(metadata_headers(request, "object"))
    if "Content-Type" not in headers or request.headers.get("X-Detect-Content-Type") == "true":
        guessed = mimetypes.guess_type(target.obj)[0]
        headers["Content-Type"] = guessed or "application/octet-stream"
    if "X-Delete-After" in request.headers:
        try:
            after = int(request.headers["X-Delete-After"])
        except ValueError:
            raise HTTPError(400, "Non-integer X-Delete-After") from None
        if after < 0:
            raise HTTPError(400, "X-Delete-After in past")
        headers["X-Delete-At"] = str(int(time.time()) + after)
    if "X-Delete-At" in headers:
        try:
            at = int(headers["X-Delete-At"])
        except ValueError:
            raise HTTPError(400, "Non-integer X-Delete-At") from None
        if at < time.time():
            raise HTTPError(400, "X-Delete-At in past")
        headers["X-Delete-At"] = str(min(at, MAX_DELETE_AT))  # Swift's 10-digit clamp
    inm = request.headers.get("If-None-Match")
    if inm is not None and request.method == "PUT":
        if inm.strip() != "*":
            raise HTTPError(400, "If-None-Match only supports *")
        headers["If-None-Match"] = "*"  # the object servers refuse to overwrite: 412
    if "ETag" in request.headers:
        headers["ETag"] = request.headers["ETag"].strip('"').lower()
    state = request_state(request)
    headers.update(state.get(BACKEND_PUT_HEADERS) or {})
    policy = state.get(OBJECT_POLICY)
    if policy:
        headers[POLICY_INDEX_HEADER] = str(policy)
    return headers


def _ring_of(proxy: ProxyInterior, headers: dict[str, str]):
    """The object ring of the policy the backend headers name (policy 0 without one)."""
    return proxy.object_ring_for(int(headers.get(POLICY_INDEX_HEADER, 0)))


async def _put(proxy: ProxyInterior, request: web.Request, target) -> web.StreamResponse:
    given = request_state(request).get(BODY)
    if given is not None:  # a sub-request's body (a copy, a manifest), not the client's
        headers = _put_headers(proxy, request, target, _write_timestamp(proxy, request))
        if isinstance(given, bytes):
            return await _store(proxy, request, target, headers, given)
        length = request.headers.get("Content-Length")
        return await _store(proxy, request, target, headers, given,
                            int(length) if length is not None else None)
    te = request.headers.get("Transfer-Encoding", "").strip().lower()
    if te and te != "chunked":
        raise HTTPError(501, "Not Implemented")  # only plain chunked bodies are understood
    chunked = te == "chunked"
    length = request.content_length
    if length is None and not chunked:
        raise HTTPError(411, "Length Required: send Content-Length or chunked encoding")
    if length is not None and length > proxy.max_file_size:
        raise HTTPError(413, f"Object larger than the maximum of {proxy.max_file_size} bytes")
    headers = _put_headers(proxy, request, target, _write_timestamp(proxy, request))
    if length is not None and length <= proxy.put_buffer_size:
        try:
            body = await request.read()
        except ConnectionError:  # aiohttp's answer to a connection lost mid-body
            raise HTTPError(499, "Client disconnected") from None
        if len(body) != length:
            raise HTTPError(499, "Client disconnected")
        return await _store(proxy, request, target, headers, body)
    return await _store(proxy, request, target, headers, _client_chunks(request), length)


async def _client_chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The client's body in pieces; its connection lost midway is its 499, not our error
    (only the client's: a copy's source failing midway is a backend's fault)."""
    try:
        async for chunk in request.content.iter_chunked(STREAM_CHUNK):
            yield chunk
    except ConnectionError:
        raise HTTPError(499, "Client disconnected before sending the whole body") from None


def _write_timestamp(proxy: ProxyInterior, request: web.Request) -> Timestamp:
    """The timestamp a feature chose for this write (a version's id), else a fresh one."""
    chosen = request_state(request).get(TIMESTAMP)
    return chosen if chosen is not None else proxy.next_timestamp()


async def _store(proxy: ProxyInterior, request: web.Request, target, headers: dict[str, str], body,
                 length: int | None = None,
                 extra_response: dict[str, str] | None = None) -> web.Response:
    """Write one object to its replicas from `body`: bytes (one buffer for all replicas) or
    an async iterator of chunks (streamed). Answers as the client's PUT response.

    An EC policy's small objects go to its small-object tier, and the place a write did not
    go loses any older copy (size_tier)."""
    index = int(headers.get(POLICY_INDEX_HEADER, 0))
    tier = size_tier.tier_of(proxy, index)
    if tier is None:
        return await _store_in(proxy, target, headers, body, length, extra_response)
    body, length, small = await size_tier.sized(body, length, tier[1])
    if "If-None-Match" in headers and await _exists(proxy, request, target, index, tier[0]):
        return error(412, "Precondition Failed")  # the object servers see only one place
    if small:
        headers = _with_policy(headers, tier[0])
    answer = await _store_in(proxy, target, headers, body, length, extra_response)
    if answer.status == 201:
        names = (target.account, target.container, target.obj)
        if small:
            size_tier.clear_archives(proxy, names, index, headers["X-Timestamp"])
        elif not await size_tier.retire_small(proxy, names, tier[0], headers["X-Timestamp"],
                                              txid(request)):
            # Reads trust the tier: an older copy there would hide this write.
            return error(503, "Service Unavailable")
    return answer


async def _exists(proxy: ProxyInterior, request: web.Request, target: Target, index: int,
                  tier: int) -> bool:
    """Whether an object of EC policy `index` exists in it or in its small-object `tier`
    (If-None-Match: *)."""
    names = (target.account, target.container, target.obj)
    small = await open_object(proxy, request, "HEAD", *names, {}, index=tier)
    if small is not None:
        small.release()
        return True
    try:
        await ec_get.find(proxy, request, names, index, proxy.ec_scheme(index), None)
    except ec_get.NotFound:
        return False
    return True


async def _store_in(proxy: ProxyInterior, target: Target, headers: dict[str, str], body,
                    length: int | None = None,
                    extra_response: dict[str, str] | None = None) -> web.Response:
    scheme = proxy.ec_scheme(int(headers.get(POLICY_INDEX_HEADER, 0)))
    if scheme is not None:
        answer = await ec_put.store(proxy, target, scheme, headers, body, length)
        if extra_response and answer.status == 201:
            answer.headers.update(extra_response)
        return answer
    acct, cont, name = target.account, target.container, target.obj
    ring = _ring_of(proxy, headers)
    part = ring.get_part(acct, cont, name)
    cpart, cnodes = proxy.container_ring.get_nodes(acct, cont)
    headers_for = container_headers(headers, cpart, cnodes)
    # The body's MD5 is the object servers' to compute (each checks what it received, and a
    # client's ETag, answering 422); the proxy only checks that the replicas agree. Hashing
    # here as well cost a second pass over every body, on the event loop.
    if isinstance(body, bytes):
        headers["Content-Length"] = str(len(body))
        responses = await proxy.backend.fan_out(
            ring, part, "PUT", lambda n: node_path(n, part, acct, cont, name), headers_for,
            data=body, grouped=proxy.grouped_writes and len(body) <= MAX_BODY)
    else:
        responses = await _put_streaming(proxy, body, target, part, headers, headers_for,
                                         length)
    ts = Timestamp.parse(headers["X-Timestamp"])
    answer = _put_answer(responses, ring.replica_count, headers.get("ETag"), ts)
    if extra_response and answer.status == 201:
        answer.headers.update(extra_response)
    return answer


def _put_answer(responses: list[BackendResponse], n: int, expected: str | None,
                ts: Timestamp) -> web.Response:
    best = best_response(responses, n)
    if best.status == 201:
        etags = {r.headers.get("ETag", "").strip('"') for r in responses if r.status == 201}
        etag = etags.pop() if len(etags) == 1 else ""
        if not etag or (expected and etag != expected):
            return error(503, "Replicas disagree on the body's MD5")
        return web.Response(status=201, headers={"ETag": etag,
                                                 "Last-Modified": ts.http_date(),
                                                 "X-Timestamp": ts.normal})
    if best.status == 409:
        return web.Response(status=202)  # an equal-or-newer write already won, as in Swift
    if best.status == 412:
        return error(412, "Precondition Failed")
    if best.status == 422:
        return error(422, "Unprocessable Entity: ETag does not match the body's MD5")
    if best.status in (400, 413, 499):
        return error(best.status, best.body.decode(errors="replace").strip() or "Bad Request")
    return error(503, "Service Unavailable: the object could not be stored on a quorum")


async def _put_streaming(proxy: ProxyInterior, chunks, target, part, headers, headers_for, length):
    acct, cont, name = target.account, target.container, target.obj
    ring = _ring_of(proxy, headers)
    primaries = ring.get_part_nodes(part)
    if length is not None:
        headers["Content-Length"] = str(length)
    feeds = [Feed() for _ in primaries]

    tasks = proxy.backend.stream_out(ring, part, "PUT",
                                     lambda n: node_path(n, part, acct, cont, name),
                                     headers_for, feeds)
    received = 0
    quorum = quorum_size(len(primaries))
    try:
        async for chunk in chunks:
            received += len(chunk)
            if received > proxy.max_file_size:
                raise HTTPError(413, "Object larger than the maximum size")
            for feed in feeds:
                if not feed.dead:
                    await feed.queue.put(chunk)
            if sum(not f.dead for f in feeds) < quorum:
                raise HTTPError(503, "Service Unavailable: lost quorum while sending")
        if length is not None and received != length:
            raise HTTPError(499, "Client disconnected before sending the whole body")
        for feed in feeds:
            if not feed.dead:
                await feed.queue.put(None)
        results = await settle(tasks, len(primaries), proxy.post_quorum_timeout)
    except BaseException:
        for t in tasks:
            t.cancel()  # the object servers drop their temp files on a cut connection
        raise
    responses = [r for r in results if r is not None]
    responses += [BackendResponse(503) for r in results if r is None]
    return responses


# ---- POST / DELETE -------------------------------------------------------------------------

async def _post(proxy: ProxyInterior, request: web.Request, target) -> web.Response:
    ts = proxy.next_timestamp()
    headers = _put_headers(proxy, request, target, ts)
    headers.pop("ETag", None)
    _pass_open_expired(proxy, request, headers)
    if "Content-Type" not in request.headers:
        headers.pop("Content-Type", None)
    # An EC policy's small objects are in its tier: the metadata goes wherever it is.
    bests = await _to_places(proxy, "POST", target, headers, use_handoffs=False)
    if any(b.status // 100 == 2 for b in bests):
        return web.Response(status=202, text="Accepted\n")
    if all(b.status == 404 for b in bests):
        return error(404, "Not Found")
    best = next(b for b in bests if b.status != 404)
    return error(best.status if best.status < 500 else 503, best.body.decode(errors="replace"))


async def _to_places(proxy: ProxyInterior, method: str, target, headers: dict[str, str],
                     use_handoffs: bool = True) -> list[BackendResponse]:
    """`method` sent to the object's replicas in every place it may be (`_places`), each
    replica telling its container replica: the best answer of each place, the container's
    own policy first."""
    acct, cont, name = target.account, target.container, target.obj
    cpart, cnodes = proxy.container_ring.get_nodes(acct, cont)

    async def send(index: int) -> BackendResponse:
        ring = proxy.object_ring_for(index)
        part = ring.get_part(acct, cont, name)
        responses = await proxy.backend.fan_out(
            ring, part, method, lambda n: node_path(n, part, acct, cont, name),
            container_headers(_with_policy(headers, index), cpart, cnodes),
            use_handoffs=use_handoffs)
        return best_response(responses, ring.replica_count)

    return list(await asyncio.gather(*(send(i) for i in _places(proxy, headers))))


def _with_policy(headers: dict[str, str], index: int) -> dict[str, str]:
    """`headers` naming policy `index` (policy 0 by naming none, as always)."""
    out = {k: v for k, v in headers.items() if k != POLICY_INDEX_HEADER}
    if index:
        out[POLICY_INDEX_HEADER] = str(index)
    return out


def _places(proxy: ProxyInterior, headers: dict[str, str]) -> list[int]:
    """The policies an object of the container's policy may be in: that policy, and its
    small-object tier where it has one."""
    index = int(headers.get(POLICY_INDEX_HEADER, 0))
    tier = size_tier.tier_of(proxy, index)
    return [index] if tier is None else [index, tier[0]]


async def _delete(proxy: ProxyInterior, request: web.Request, target) -> web.Response:
    extra = {}
    if_delete_at = request.headers.get("X-If-Delete-At")
    if if_delete_at is not None:
        if not (if_delete_at.strip().isascii() and if_delete_at.strip().isdigit()):
            raise HTTPError(400, "Bad X-If-Delete-At header value")
        extra["X-If-Delete-At"] = if_delete_at.strip()
    ts = _write_timestamp(proxy, request)
    policy = request_state(request).get(OBJECT_POLICY)
    if policy:
        extra[POLICY_INDEX_HEADER] = str(policy)
    # Both places of an EC policy with a small-object tier get the tombstone; the
    # container's own policy speaks, unless only the tier held the object.
    best, *tier = await _to_places(proxy, "DELETE", target,
                                   {**proxy.backend_headers(request, ts), **extra})
    if tier and tier[0].status >= 500 and best.status < 500:
        best = tier[0]  # reads trust the tier: a copy left there would be served
    elif best.status == 404 and tier and tier[0].status // 100 == 2:
        best = tier[0]
    if best.status // 100 == 2:
        return web.Response(status=204)
    if best.status in (404, 412):
        return error(best.status, "Not Found" if best.status == 404 else "Precondition Failed")
    if best.status == 409:  # a newer write won the race, as the replicas say (Swift: 409)
        return error(409, "Conflict")
    return error(503, "Service Unavailable")
