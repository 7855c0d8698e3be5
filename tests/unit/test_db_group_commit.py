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
