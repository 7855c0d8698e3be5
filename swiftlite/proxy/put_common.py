"""What a replicated PUT and an erasure-coded one share: a bounded feed per node, the
per-node senders (with handoffs for a primary that cannot be reached before its body
started), and which container replica each object server tells about the write."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from swiftlite.common.client import node_path
from swiftlite.common.fastclient import ConnectError
from swiftlite.proxy.backend import NETWORK_ERRORS, BackendResponse
from swiftlite.proxy.nodes import local_fault, logical_path, verdicts, write_handoffs

QUEUE_DEPTH = 4


class Feed:
    """One replica's view of the client body: a bounded queue, so the slowest replica sets
    the pace and memory stays at QUEUE_DEPTH chunks per replica."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_DEPTH)
        self.started = False
        self.dead = False

    async def body(self):
        while True:
            chunk = await self.queue.get()
            if chunk is None:
                return
            self.started = True
            yield chunk

    def kill(self) -> None:
        self.dead = True
        while not self.queue.empty():  # unblock a reader waiting on put()
            self.queue.get_nowait()


def container_headers(base: dict[str, str], cpart: int, cnodes: list[dict]):
    """Each object replica tells a different container replica about the write."""
    def headers_for(index: int, node: dict) -> dict[str, str]:
        h = dict(base)
        if cnodes:
            cn = cnodes[index % len(cnodes)]
            h["X-Container-Host"] = f"{cn['ip']}:{cn['port']}"
            h["X-Container-Device"] = cn["device"]
            h["X-Container-Partition"] = str(cpart)
        return h
    return headers_for


def start_senders(proxy, ring, part: int, names: tuple[str, str, str], primaries: list[dict],
                  feeds: list[Feed], headers_for: Callable[[int, dict], dict[str, str]],
                  limited_last: bool = False) -> list[asyncio.Future]:
    """One task per primary PUTting feed i's body to primary i (or, when it cannot be
    reached before its body started, to the next handoff); each yields its
    BackendResponse, or None when no node took the body (its feed is then killed).
    `limited_last`: an error-limited primary is still tried when no handoff is left (an
    EC write needs k + 1 archives; a small cluster may have no handoff at all)."""
    acct, cont, name = names
    handoffs = write_handoffs(ring, part, proxy.limiter)
    pool = proxy.backend.pool
    judge = verdicts(proxy.limiter)  # before the tasks, so they share it
    logical = logical_path(node_path(primaries[0], part, acct, cont, name))

    async def send(index: int, node: dict | None) -> BackendResponse | None:
        feed = feeds[index]
        while node is not None:
            if proxy.limiter.limited(node) and not feed.started:
                instead = next(handoffs, None)
                if instead is not None or not limited_last:
                    node = instead
                    continue
            path = node_path(node, part, acct, cont, name)
            try:
                r = await pool.request(node["ip"], node["port"], "PUT", path,
                                       headers_for(index, node), feed.body())
                resp = BackendResponse(r.status, r.headers, await r.read(), node)
                if r.status < 400:
                    judge.served("PUT", logical)
                elif r.status == 507:
                    proxy.limiter.fatal(node, "507 Insufficient Storage")
                elif r.status >= 500:
                    judge.suspect(node, "PUT", logical, f"PUT {path}: {r.status}")
                return resp
            except NETWORK_ERRORS as exc:
                if isinstance(exc, ConnectError):  # nothing sent: the node's fault...
                    if exc.local:  # ...unless this process is out of descriptors
                        local_fault(f"PUT {path}: {exc}")
                    else:
                        proxy.limiter.error(node, f"PUT {path}: {exc!r}", server=True)
                else:  # e.g. the server refused the body early: maybe the request's fault
                    judge.suspect(node, "PUT", logical, f"PUT {path}: {exc!r}", server=True)
                if feed.started:
                    break
                node = next(handoffs, None)
        feed.kill()
        return None

    return [asyncio.ensure_future(send(i, n)) for i, n in enumerate(primaries)]
