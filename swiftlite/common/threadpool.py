"""The bounded thread pool every server sends its blocking work to (fsync, SQLite, reads).

One pool per process keeps the number of threads touching the disks fixed; the event loop
only awaits the results, so it never blocks on I/O.

It is leaner than `loop.run_in_executor`: a job is a tuple on a SimpleQueue and its result
goes straight to the asyncio future through `call_soon_threadsafe`, with no
concurrent.futures.Future (a Condition and an RLock per call) in between. Every PUT and GET
makes at least one such hop, so that overhead was paid on every request.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_size = 8
_pool: _Pool | None = None


def state() -> tuple[int, int]:
    """(jobs queued, threads started) of this process's pool: metrics samples it once a
    second rather than the pool setting a gauge per job, which would cost about as much as
    the rest of a job's hand-over."""
    pool = _pool
    if pool is None or pool.pid != os.getpid():
        return 0, 0
    return pool.queued, pool.started


class _Pool:
    def __init__(self, size: int) -> None:
        self.jobs: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self.size = size
        self.started = 0
        self.idle = 0  # threads waiting for a job
        self.queued = 0  # jobs submitted and not yet taken
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child starts its own threads

    def submit(self, job: tuple) -> None:
        with self.lock:
            # Start a thread when the queued jobs outnumber the threads waiting for one.
            # ("No thread idle" is not enough: a burst of submits would all see the one
            # thread just started as idle, and jobs that block until a later job runs
            # would then wait on each other with the pool below its size.)
            self.queued += 1
            if self.queued > self.idle and self.started < self.size:
                self.started += 1
                threading.Thread(target=self._run, name=f"swiftlite-io-{self.started}",
                                 daemon=True).start()
        self.jobs.put(job)

    def _run(self) -> None:
        jobs = self.jobs
        while True:
            with self.lock:
                self.idle += 1
            job = jobs.get()
            with self.lock:
                self.idle -= 1
                if job is not None:
                    self.queued -= 1
            if job is None:
                return
            fn, args, loop, fut = job
            try:
                result = fn(*args)
            except BaseException as exc:  # delivered to the awaiting coroutine
                deliver(loop, fut, None, exc)
            else:
                deliver(loop, fut, result, None)
            del job, fn, args, fut

    def shutdown(self) -> None:
        for _ in range(self.started):
            self.jobs.put(None)


def deliver(loop: asyncio.AbstractEventLoop, fut: asyncio.Future, result: Any,
             exc: BaseException | None) -> None:
    try:
        loop.call_soon_threadsafe(_set, fut, result, exc)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def _set(fut: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if fut.cancelled():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def configure(size: int) -> None:
    """Set the pool size; call before the first use (server start-up)."""
    global _size, _pool
    _size = max(1, size)
    if _pool is not None:
        _pool.shutdown()
        _pool = None


def _get_pool() -> _Pool:
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = _Pool(_size)
    return _pool


def submit(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`fn(*args)` in the pool; its result (or exception) in the returned future."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()
    _get_pool().submit((fn, args, loop, fut))
    return fut


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    return await submit(fn, *args)
