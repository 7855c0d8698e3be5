"""Hedged reads (proxy/backend/replicas.py `hedged`): a replica slow to answer does not hold a read
when another can answer; the order is kept when it matters (X-Newest)."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from types import SimpleNamespace

from swiftlite.proxy.backend.nodes import ErrorLimiter
from swiftlite.proxy.backend.replicas import hedged

NODES = [{"ip": "10.0.0.1", "port": 6200, "device": "d1"},
         {"ip": "10.0.0.2", "port": 6200, "device": "d1"},
         {"ip": "10.0.0.3", "port": 6200, "device": "d1"}]


def proxy(concurrent: bool = True):
    return SimpleNamespace(concurrent_gets=concurrent, concurrency_timeout=0.05,
                           limiter=ErrorLimiter())


def sender(delays: dict[str, float], cancelled: list[str]):
    async def send(node):
        try:
            await asyncio.sleep(delays[node["ip"]])
        except asyncio.CancelledError:
            cancelled.append(node["ip"])
            raise
        return node["ip"]
    return send


async def first(p, send, **kw):
    async with aclosing(hedged(p, NODES, send, **kw)) as answers:
        async for _, answer in answers:
            if answer is not None:  # as the callers do: a node that could not answer
                return answer


async def test_a_hung_replica_costs_the_hedge_delay_not_its_timeout():
    cancelled: list[str] = []
    send = sender({"10.0.0.1": 30, "10.0.0.2": 0.0, "10.0.0.3": 0.0}, cancelled)
    t = time.monotonic()
    assert await first(proxy(), send) == "10.0.0.2"
    assert time.monotonic() - t < 1.0
    await asyncio.sleep(0)  # let the cancellation land
    assert cancelled == ["10.0.0.1"]


async def test_without_hedging_each_replica_in_turn():
    send = sender({"10.0.0.1": 0.3, "10.0.0.2": 0.0, "10.0.0.3": 0.0}, [])
    assert await first(proxy(concurrent=False), send) == "10.0.0.1"
    assert await first(proxy(), send, in_order=True) == "10.0.0.1"


async def test_a_refused_answer_asks_the_next_at_once():
    async def send(node):
        return None if node["ip"] == "10.0.0.1" else node["ip"]

    p = proxy()
    p.concurrency_timeout = 30  # no hedge: the None alone moves on
    t = time.monotonic()
    assert await first(p, send) == "10.0.0.2"
    assert time.monotonic() - t < 1.0


async def test_answers_not_taken_are_discarded():
    discarded: list[str] = []
    taken: list[str] = []
    send = sender({"10.0.0.1": 0.08, "10.0.0.2": 0.08, "10.0.0.3": 5}, [])
    async with aclosing(hedged(proxy(), NODES, send, discarded.append)) as answers:
        async for _, answer in answers:
            taken.append(answer)
            await asyncio.sleep(0.2)  # meanwhile the second answered as well
            break
    assert taken == ["10.0.0.1"] and discarded == ["10.0.0.2"]


async def test_limited_nodes_are_skipped_unless_every_node_is():
    """A server back from a restart is still limited for error_interval; when every replica
    is (one-node clusters), the read asks the first anyway instead of a certain 503."""
    asked: list[str] = []

    async def send(node):
        asked.append(node["ip"])
        return node["ip"]

    p = proxy()
    p.limiter.fatal(NODES[0], "refused", server=True)
    assert await first(p, send) == "10.0.0.2" and asked == ["10.0.0.2"]
    for node in NODES[1:]:
        p.limiter.fatal(node, "refused", server=True)
    asked.clear()
    assert await first(p, send) == "10.0.0.1" and asked == ["10.0.0.1"]
