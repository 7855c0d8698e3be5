"""The bounded thread pool every server sends its blocking work to (fsync, SQLite, reads).

One pool per process keeps the number of threads touching the disks fixed; the event loop
only awaits the futures, so it never blocks on I/O.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_size = 8


def configure(size: int) -> None:
    """Set the pool size; call before the first use (server start-up)."""
    global _size, _pool
    _size = max(1, size)
    if _pool is not None:
        _pool.shutdown(wait=False)
        _pool = None


def pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_size, thread_name_prefix="swiftlite-io")
    return _pool


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    return await loop.run_in_executor(pool(), fn, *args)
