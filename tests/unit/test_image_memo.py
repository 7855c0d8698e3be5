"""The in-memory variant memo (swiftlite/image/memo.py) and the per-account slots and
single flights (swiftlite/image/concurrency.py)."""

from __future__ import annotations

import asyncio

import pytest

from swiftlite.image.concurrency import AccountSlots, Flights
from swiftlite.image.limits import ImageRefused
from swiftlite.image.memo import VariantMemo


def test_memo_budget_and_lru():
    memo = VariantMemo(budget=10, max_item=6)
    memo.put("a", {}, b"xxxx")
    memo.put("b", {}, b"yyyy")
    memo.put("big", {}, b"z" * 7)  # past max_item: not kept
    assert memo.get("a") is not None and memo.get("big") is None
    memo.put("c", {}, b"wwww")  # over budget: "b", the least recently used, goes
    assert memo.get("b") is None and memo.get("a") and memo.get("c")
    assert memo.used == 8


async def test_flights_run_once_and_share_errors():
    flights, runs = Flights(), []

    async def make():
        runs.append(1)
        await asyncio.sleep(0.01)
        return "made"
    results = await asyncio.gather(*(flights.run("k", make) for _ in range(5)))
    assert runs == [1] and {r for r, _ in results} == {"made"}
    assert [led for _, led in results].count(True) == 1 and len(flights) == 0

    async def refuse():
        raise ImageRefused(415, "no")
    with pytest.raises(ImageRefused):
        await flights.run("bad", refuse)


async def test_account_slots_wait_then_refuse():
    slots = AccountSlots(limit=1, wait=0.05)
    async with slots.slot("a"):
        async with slots.slot("b"):  # another account is not held up
            pass
        with pytest.raises(ImageRefused) as exc:
            async with slots.slot("a"):
                pass
        assert exc.value.status == 429
    async with slots.slot("a"):  # released: free again
        assert slots.busy("a") == 1
    assert slots.busy("a") == 0
