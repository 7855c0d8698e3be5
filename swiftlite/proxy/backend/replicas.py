"""Talking to storage nodes: one request, fan-out to a ring's replicas, quorum decisions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from multidict import CIMultiDict

from swiftlite.common.clients.fastclient import ClientError, Pool, Response
from swiftlite.common.replica_groups import ALSO_DEVICES, ALSO_STATUSES, format_also, parse_statuses
from swiftlite.proxy.backend.nodes import ErrorLimiter, verdicts, write_handoffs
from swiftlite.ring import Ring, quorum_size

log = logging.getLogger("swiftlite.proxy")

T = TypeVar("T")

NETWORK_ERRORS = (ClientError, asyncio.TimeoutError, OSError)
# Replica writes a worker lets finish after answering the client (bodies up to
# put_buffer_size each): enough for the error limiter to notice a hung node.
MAX_DETACHED = 64
# Nodes one replica's write tries (its primary, then handoffs) before it gives up.
MAX_TRIES = 4
# Chunks a streamed body's feed holds per replica (see Feed).
QUEUE_DEPTH = 4

# Headers never copied from a backend response to the client.
HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive", "date",
               "server", "x-trans-id"}


@dataclass
class BackendResponse:
    status: int
    headers: CIMultiDict = field(default_factory=CIMultiDict)
    body: bytes = b""
    node: dict[str, Any] | None = None


def client_headers(resp_headers) -> CIMultiDict:
    out: CIMultiDict = CIMultiDict()
    for k, v in resp_headers.items():
        lk = k.lower()
        if lk in HOP_HEADERS or lk.startswith("x-backend-"):
            continue
        out.add(k, v)
    return out


async def settle(tasks: list[asyncio.Future], n: int, grace: float | None,
                 known: Sequence[BackendResponse] = (),
                 leave: Callable[[set[asyncio.Future]], None] | None = None,
                 ) -> list[BackendResponse | None]:
    """Await replica tasks (each yielding a BackendResponse or None). Once a quorum of `n`
    (counting the `known` answers) agrees (same status class, below 500), the rest get
    `grace` seconds and are then left to `leave` (default: cancelled) and answered as None:
    a hung replica must not hold an answer the quorum already decided. `grace` None: await
    them all."""
    quorum = quorum_size(n)
    classes: dict[int, int] = {}
    for r in known:
        if r.status < 500:
            classes[r.status // 100] = classes.get(r.status // 100, 0) + 1
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                r = task.result()
                if r is not None and r.status < 500:
                    classes[r.status // 100] = classes.get(r.status // 100, 0) + 1
            if grace is not None and pending and max(classes.values(), default=0) >= quorum:
                _, pending = await asyncio.wait(pending, timeout=grace)
                if pending and leave is not None:
                    leave(pending)
                    pending = set()
                break
    finally:
        abandon(pending)
    return [t.result() if t.done() and not t.cancelled() else None for t in tasks]


async def hedged(proxy, nodes: Iterable[dict[str, Any]],
                 send: Callable[[dict[str, Any]], Awaitable[T | None]],
                 discard: Callable[[T], None] = lambda r: None, in_order: bool = False,
                 ) -> AsyncIterator[tuple[dict[str, Any], T | None]]:
    """Ask `nodes` one at a time, yielding (node, answer) as answers come (None: the node
    could not answer); the next node is asked when the caller takes the next answer (it
    did not want the last one) or when the one asked has not answered after
    concurrency_timeout: a hung node (it accepts connections, never answers) then costs a
    read that long, not node_timeout, and it is still heard if it answers first. Error
    limited nodes are skipped, unless all are (then the first is asked anyway). Use under
    contextlib.aclosing: requests still out when the caller stops are cancelled and answers
    not yet taken are `discard`ed. `in_order`: no hedging, each node in turn (the order
    itself matters, as for X-Newest)."""
    hedge = proxy.concurrency_timeout if proxy.concurrent_gets and not in_order else None
    todo = iter(nodes)
    asked: dict[asyncio.Future, dict[str, Any]] = {}
    verdicts(proxy.limiter)  # before the tasks, so they share it
    skipped: list[dict[str, Any]] = []
    sent = False

    def ask() -> None:
        nonlocal sent
        for node in todo:
            if proxy.limiter.limited(node):
                skipped.append(node)
                continue
            asked[asyncio.ensure_future(send(node))] = node
            sent = True
            return
        if not sent and skipped:
            # Every node is error limited: asking one (it may be back) beats a certain 503.
            sent = True
            asked[asyncio.ensure_future(send(skipped[0]))] = skipped[0]

    ask()
    try:
        while asked:
            done, _ = await asyncio.wait(asked, timeout=hedge,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                ask()
                continue
            for task in done:
                yield asked.pop(task), task.result()
                ask()
    finally:
        for task in asked:
            if task.done() and not task.cancelled() and task.result() is not None:
                discard(task.result())
        abandon([t for t in asked if not t.done()])


def abandon(tasks) -> None:
    """Cancel replica requests no longer wanted (their connections are closed, not reused);
    whatever they end with is not an error worth logging."""
    for task in tasks:
        task.cancel()
        task.add_done_callback(_swallow)


def _swallow(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


class Backend:
    def __init__(self, pool: Pool, limiter: ErrorLimiter,
                 post_quorum_timeout: float | None = None) -> None:
        self.pool = pool
        self.limiter = limiter
        self.post_quorum_timeout = post_quorum_timeout
        # Replica writes the client no longer waits for (see `detach`).
        self.detached: set[asyncio.Future] = set()

    def detach(self, tasks: set[asyncio.Future]) -> None:
        """Let replica writes a quorum no longer needs finish in the background: one that
        times out then counts against its node (a hung node gets error limited, so later
        writes go straight to handoffs) and moves on to a handoff, as it would have with
        the client waiting. Bounded (each holds its body): past MAX_DETACHED, cancelled."""
        for task in tasks:
            if len(self.detached) < MAX_DETACHED:
                self.detached.add(task)
                task.add_done_callback(self._detached_done)
            else:
                abandon([task])

    def _detached_done(self, task: asyncio.Future) -> None:
        self.detached.discard(task)
        _swallow(task)

    async def open(self, node: dict[str, Any], method: str, path: str, headers: dict[str, str],
                   data: Any = None, query: str = "") -> Response | None:
        """Send a request and return once its head arrived (the caller reads or releases the
        body); None when the node could not answer. What the answer says about the node goes
        to the error limiter (see proxy.nodes: a 5xx counts only if another replica served
        the same request)."""
        judge = verdicts(self.limiter)
        full = f"{path}?{query}" if query else path
        try:
            resp = await self.pool.request(node["ip"], node["port"], method, full, headers, data)
        except NETWORK_ERRORS as exc:
            judge.unreachable(node, method, path, exc)
            return None
        judge.answered(node, method, path, resp.status)
        return resp

    async def request(self, node: dict[str, Any], method: str, path: str,
                      headers: dict[str, str], data: Any = None,
                      query: str = "") -> BackendResponse | None:
        """One backend request with the body read; None when the node could not answer."""
        resp = await self.open(node, method, path, headers, data, query)
        if resp is None:
            return None
        try:
            body = await resp.read()
        except NETWORK_ERRORS as exc:
            verdicts(self.limiter).unreachable(node, method, path, exc)
            return None
        return BackendResponse(resp.status, resp.headers, body, node)

    # ---- the fan-out engine: every write to a ring's replicas, buffered or streamed --------

    async def fan_out(self, ring: Ring, part: int, method: str, path_for: Callable[[dict], str],
                      headers_for: Callable[[int, dict], dict[str, str]],
                      data: Any = None, query: str = "", use_handoffs: bool = True,
                      grouped: bool = False) -> list[BackendResponse]:
        """Send to every primary concurrently and settle on a quorum (see `settle`); a
        primary that cannot answer (down, 507, 5xx) is replaced by the next handoff, so
        writes land somewhere durable. One answer per primary (503: no node answered).

        `grouped` (a PUT with its body in memory): primaries on one object server share one
        request (see common.replica_groups)."""
        primaries = ring.get_part_nodes(part)
        send, handoff = self._replica_loop(ring, part, method, path_for, headers_for, query,
                                           use_handoffs, data=data)
        results: list[BackendResponse | None] = [None] * len(primaries)
        failed: set[int] = set()  # primaries a group could not store: straight to handoffs
        if grouped and isinstance(data, bytes):
            await self._grouped(primaries, method, path_for, headers_for, data, results, failed)
        pending = [i for i, r in enumerate(results) if r is None]
        tasks = [asyncio.ensure_future(send(i, handoff() if i in failed and use_handoffs
                                            else primaries[i])) for i in pending]
        # What the grouped requests stored counts toward the quorum too.
        more = await settle(tasks, len(primaries), self.post_quorum_timeout,
                            [r for r in results if r is not None], self.detach)
        for i, r in zip(pending, more, strict=True):
            results[i] = r
        return [r for r in results if r is not None] + \
            [BackendResponse(503) for r in results if r is None]

    def stream_out(self, ring: Ring, part: int, method: str, path_for: Callable[[dict], str],
                   headers_for: Callable[[int, dict], dict[str, str]], feeds: list[Feed],
                   limited_last: bool = False) -> list[asyncio.Future]:
        """Start sending feed i's body to primary i (or, when it cannot be reached before
        its body started, to the next handoff): one task per primary, each yielding its
        BackendResponse, or None when no node took the body (its feed is then killed). The
        caller fills the feeds, then settles the tasks (or cancels them: the object servers
        drop their temp files on a cut connection).

        `limited_last`: an error-limited primary is still tried when no handoff is left (an
        EC write needs k + 1 archives; a small cluster may have no handoff at all)."""
        primaries = ring.get_part_nodes(part)
        send, _ = self._replica_loop(ring, part, method, path_for, headers_for, "", True,
                                     feeds=feeds, limited_last=limited_last)
        return [asyncio.ensure_future(send(i, n)) for i, n in enumerate(primaries)]

    def _replica_loop(self, ring: Ring, part: int, method: str,
                      path_for: Callable[[dict], str],
                      headers_for: Callable[[int, dict], dict[str, str]], query: str,
                      use_handoffs: bool, data: Any = None, feeds: list[Feed] | None = None,
                      limited_last: bool = False,
                      ) -> tuple[Callable[[int, dict | None], Awaitable[BackendResponse | None]],
                                 Callable[[], dict | None]]:
        """One replica's write, shared by every fan-out: (send(index, node), next handoff).
        A node that is error limited, cannot be reached or answers 5xx is replaced by the
        next handoff, at most MAX_TRIES nodes; a streamed body (`feeds`) only until its
        first bytes went out."""
        verdicts(self.limiter)  # before the replicas' tasks, so they all share it
        handoffs = write_handoffs(ring, part, self.limiter) if use_handoffs else iter(())

        def handoff() -> dict | None:
            return next(handoffs, None)

        async def send(index: int, node: dict | None) -> BackendResponse | None:
            feed = feeds[index] if feeds is not None else None
            last: BackendResponse | None = None
            tries = 0
            while node is not None and tries < MAX_TRIES:
                if use_handoffs and self.limiter.limited(node):
                    node = handoff() or (node if limited_last else None)
                    if node is None:
                        break
                tries += 1
                resp = await self.request(node, method, path_for(node),
                                          headers_for(index, node),
                                          feed.body() if feed is not None else data, query)
                if resp is not None and resp.status < 500:
                    return resp
                last = resp or last
                if feed is not None and feed.started:
                    break  # its body is gone: no other node can be given it
                node = handoff() if use_handoffs else None
            if feed is not None:
                feed.kill()
            return last

        return send, handoff

    async def _grouped(self, primaries: list[dict], method: str,
                       path_for: Callable[[dict], str],
                       headers_for: Callable[[int, dict], dict[str, str]], data: bytes,
                       results: list[BackendResponse | None], failed: set[int]) -> None:
        """One request per object server holding several primaries; fills `results` for
        the replicas stored and `failed` for those the server could not store."""
        by_server: dict[tuple[str, int], list[int]] = {}
        for i, node in enumerate(primaries):
            if not self.limiter.limited(node):
                by_server.setdefault((node["ip"], node["port"]), []).append(i)
        groups = [idx for idx in by_server.values() if len(idx) > 1]

        async def send(idx: list[int]) -> None:
            lead = primaries[idx[0]]
            headers = dict(headers_for(idx[0], lead))
            headers[ALSO_DEVICES] = format_also(
                [(primaries[i]["device"], headers_for(i, primaries[i])) for i in idx[1:]])
            resp = await self.request(lead, method, path_for(lead), headers, data)
            if resp is None:
                failed.update(idx)  # the server did not answer: every replica to handoffs
                return
            if resp.status >= 500:
                failed.add(idx[0])
            else:
                results[idx[0]] = resp
            statuses = parse_statuses(resp.headers.get(ALSO_STATUSES), len(idx) - 1)
            if statuses is None:
                return  # a server without grouped writes: the others go one by one
            judge = verdicts(self.limiter)
            for i, status in zip(idx[1:], statuses, strict=True):
                node = primaries[i]
                judge.answered(node, method, path_for(node), status)
                if status >= 500:
                    failed.add(i)
                else:
                    results[i] = BackendResponse(status, resp.headers, b"", node)

        await asyncio.gather(*(send(idx) for idx in groups))


class Feed:
    """One replica's view of a streamed body (`Backend.stream_out`): a bounded queue, so
    the slowest replica sets the pace and memory stays at QUEUE_DEPTH chunks per replica.
    The writer puts chunks, then None; a dead feed (its replica failed) takes no more."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_DEPTH)
        self.started = False
        self.dead = False

    async def body(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.queue.get()
            if chunk is None:
                return
            self.started = True
            yield chunk

    def kill(self) -> None:
        self.dead = True
        while not self.queue.empty():  # unblock a writer waiting on put()
            self.queue.get_nowait()


def best_response(responses: list[BackendResponse], n: int) -> BackendResponse:
    """The response class a quorum of `n` replicas agrees on, else 503."""
    quorum = quorum_size(n)
    for klass in (2, 3, 4):
        group = [r for r in responses if r.status // 100 == klass]
        if len(group) >= quorum:
            # Prefer the most common exact status inside the class (e.g. 201 over 202).
            statuses = [r.status for r in group]
            best = max(set(statuses), key=statuses.count)
            return next(r for r in group if r.status == best)
    return BackendResponse(503, CIMultiDict(), b"Service Unavailable: no quorum\n")
