"""The bounded process pool that makes variants off the event loop.

Decoding is CPU work measured in tens to hundreds of milliseconds, and a decoder is the
code most exposed to hostile bytes: both are reasons to keep it out of the proxy process.
Workers are started lazily from a forkserver (not forked from a proxy worker with its event
loop, threads and sockets), import Pillow once, and live on. Each worker's address space is
capped (`memory_mib`, RLIMIT_AS), so an image that slips past the header checks fails with
MemoryError inside the worker (422) instead of growing the host's memory.

Each job also has a CPU budget (`cpu_seconds`, RLIMIT_CPU): a job past it kills its worker.
A worker that dies (that, a crash in a decoder, the OOM killer) breaks the whole executor, and
every job it held fails with it; the next job gets a fresh executor. Since only one of them
broke it, each of those jobs runs once more alone, in an executor of its own: the culprit
breaks only that one (422), and the others are made as if nothing had happened.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from swiftlite.image.grammar import Variant
from swiftlite.image.limits import ImageRefused, Limits
from swiftlite.image.render import Rendered, render


def _init_worker(memory_mib: int) -> None:
    if memory_mib > 0:
        cap = memory_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    # A worker killed by its CPU limit (below) leaves no core file behind.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _job(data: bytes, variant: Variant, limits: Limits, cpu_seconds: int) -> Rendered:
    """`render` under a CPU budget: the soft RLIMIT_CPU is moved to this job's start plus
    `cpu_seconds`, so a job past it gets SIGXCPU and its worker dies (even inside a C
    decoder, where no Python-level timeout could reach)."""
    if cpu_seconds > 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = usage.ru_utime + usage.ru_stime
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft = int(used) + 1 + cpu_seconds
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    return render(data, variant, limits)


class RenderPool:
    def __init__(self, workers: int = 2, memory_mib: int = 1024, cpu_seconds: int = 30) -> None:
        self.workers = max(1, workers)
        self.memory_mib = memory_mib
        self.cpu_seconds = cpu_seconds
        self._executor: ProcessPoolExecutor | None = None
        self._alone: asyncio.Semaphore | None = None  # retries alone, `workers` at a time

    def _new(self, workers: int) -> ProcessPoolExecutor:
        ctx = multiprocessing.get_context("forkserver")
        # Workers fork from a server that has the renderer (and Pillow) imported, and not
        # the proxy's __main__.
        ctx.set_forkserver_preload(["swiftlite.image.render"])
        return ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                   initargs=(self.memory_mib,))

    def _get(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = self._new(self.workers)
        return self._executor

    async def render(self, data: bytes, variant: Variant, limits: Limits) -> Rendered:
        executor = self._get()
        loop = asyncio.get_running_loop()
        args = (_job, data, variant, limits, self.cpu_seconds)
        try:
            return await loop.run_in_executor(executor, *args)
        except BrokenProcessPool:
            if self._executor is executor:
                self._executor = None
                executor.shutdown(wait=False, cancel_futures=True)
        except MemoryError:
            raise ImageRefused(422, "Image too large to process") from None
        # This job may only have shared the executor with the one that broke it.
        if self._alone is None:
            self._alone = asyncio.Semaphore(self.workers)
        async with self._alone:
            solo = self._new(1)
            try:
                return await loop.run_in_executor(solo, *args)
            except BrokenProcessPool:
                raise ImageRefused(422, "Image could not be processed within the limits") \
                    from None
            except MemoryError:
                raise ImageRefused(422, "Image too large to process") from None
            finally:
                solo.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
