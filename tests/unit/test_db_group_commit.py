"""Group commit: concurrent submissions share transactions; every caller sees the outcome."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.broker import DatabaseNotFound
from swiftlite.db.group_commit import GroupCommitter


async def test_concurrent_updates_share_commits(tmp_path):
    b = ContainerBroker(str(tmp_path / "c.db"), account="a", container="c")
    b.put_db(Timestamp.now().internal, {})
    gc = GroupCommitter(b.merge_items)
    now = time.time()

    async def one(i: int):
        return await gc.submit([{"name": f"o{i}", "created_at": Timestamp.parse(now).internal,
                                 "size": i, "content_type": "t", "etag": "e", "deleted": 0}])

    await asyncio.gather(*(one(i) for i in range(32)))
    info = b.get_info()
    assert info["object_count"] == 32 and info["bytes_used"] == sum(range(32))
    assert gc.items == 32
    assert gc.batches < 32 and b.item_commits == gc.batches


async def test_batches_wait_for_the_running_commit():
    gate = threading.Event()
    seen: list[list[int]] = []

    def commit(items):
        gate.wait(5)
        seen.append(list(items))
        return len(items)

    gc = GroupCommitter(commit, max_batch=3)
    first = asyncio.create_task(gc.submit([0]))
    await asyncio.sleep(0)
    await asyncio.sleep(0.01)  # let the first commit start (and block on the gate)
    rest = [asyncio.create_task(gc.submit([i])) for i in range(1, 6)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(first, *rest)
    assert seen == [[0], [1, 2, 3], [4, 5]]  # queued ones batched, capped at max_batch
    assert results == [1, 3, 3, 3, 2, 2]


async def test_failures_reach_every_waiter(tmp_path):
    b = ContainerBroker(str(tmp_path / "missing.db"))
    gc = GroupCommitter(b.merge_items)
    row = {"name": "o", "created_at": Timestamp.now().internal, "size": 1}
    results = await asyncio.gather(*(gc.submit([row]) for _ in range(4)),
                                   return_exceptions=True)
    assert all(isinstance(r, DatabaseNotFound) for r in results)
    assert not gc.busy
    with pytest.raises(DatabaseNotFound):
        await gc.submit([row])


async def test_a_shared_gate_bounds_commits_and_grows_batches():
    """DBs sharing a device gate: at most `n` commits run at once, and a DB waiting for the
    gate commits everything that came in meanwhile as one batch."""
    running = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()
    seen: dict[str, list[list[int]]] = {}

    def committer(name: str):
        def commit(items):
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            release.wait(5)
            with lock:
                running -= 1
            seen.setdefault(name, []).append(list(items))
            return len(items)
        return commit

    gate = asyncio.Semaphore(1)
    a = GroupCommitter(committer("a"), gate=gate, gate_wait=30)
    b = GroupCommitter(committer("b"), gate=gate, gate_wait=30)
    first = asyncio.create_task(a.submit([0]))
    while running == 0:  # a's first commit holds the gate
        await asyncio.sleep(0.001)
    waiting = [asyncio.create_task(b.submit([i])) for i in range(1, 5)]
    await asyncio.sleep(0.01)
    assert running == 1  # b waits for the gate instead of committing beside a
    release.set()
    await asyncio.gather(first, *waiting)
    assert peak == 1
    assert seen == {"a": [[0]], "b": [[1, 2, 3, 4]]}  # b's four updates in one commit


async def test_a_stuck_commit_holds_the_gate_only_for_gate_wait():
    """One DB whose commit hangs (a lock, a slow disk) must not stall the device's other DBs:
    they wait gate_wait at most, then commit beside it; no gate slot is lost."""
    release = threading.Event()
    started = threading.Event()

    def stuck(items):
        started.set()
        release.wait(10)
        return len(items)

    gate = asyncio.Semaphore(1)
    a = GroupCommitter(stuck, gate=gate, gate_wait=0.05)
    b = GroupCommitter(lambda items: len(items), gate=gate, gate_wait=0.05)
    first = asyncio.create_task(a.submit([0]))
    while not started.is_set():
        await asyncio.sleep(0.001)
    assert await asyncio.wait_for(b.submit([1, 2]), 5) == 2  # done while a still hangs
    assert not first.done() and b.gate_timeouts == 1
    release.set()
    assert await first == 1
    assert not gate.locked()  # a gave its slot back and b never took one
    assert await asyncio.wait_for(b.submit([3]), 5) == 1 and b.gate_timeouts == 1
