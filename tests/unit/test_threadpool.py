"""The bounded thread pool: results and errors reach the awaiting coroutine, the pool never
grows past its size, and a cancelled waiter does not break it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from swiftlite.common import threadpool


@pytest.fixture(autouse=True)
def _restore_size():
    yield
    threadpool.configure(8)  # the default, for tests that run after these in this process


async def test_results_errors_and_bound():
    threadpool.configure(3)
    names: set[str] = set()
    gate = threading.Barrier(3, timeout=10)

    def job(i: int) -> int:
        names.add(threading.current_thread().name)
        if i < 3:
            gate.wait()  # three jobs at once: needs three threads
        return i * 2

    out = await asyncio.gather(*(threadpool.run_blocking(job, i) for i in range(20)))
    assert out == [i * 2 for i in range(20)]
    assert len(names) == 3  # never more threads than the size

    def boom() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await threadpool.run_blocking(boom)
    assert await threadpool.run_blocking(lambda a, b=0: a + b, 1, b=2) == 3


async def test_cancelled_waiter_leaves_the_pool_working():
    threadpool.configure(1)
    release = threading.Event()
    task = asyncio.ensure_future(threadpool.run_blocking(release.wait, 10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await threadpool.run_blocking(lambda: "still fine") == "still fine"


async def test_a_burst_behind_an_idle_thread_still_gets_threads():
    """An idle thread covers one queued job, not a burst: two jobs submitted together while
    one thread waits must get a second thread (the first blocks until the second runs)."""
    threadpool.configure(2)
    assert await threadpool.run_blocking(lambda: 1) == 1  # one thread started, now idle
    gate = threading.Barrier(2, timeout=5)
    out = await asyncio.gather(threadpool.run_blocking(gate.wait),
                               threadpool.run_blocking(gate.wait))
    assert sorted(out) == [0, 1]
