"""Two asyncio guards for variant work in one proxy worker.

- `Flights`: concurrent first requests for one variant make it once; the others await the
  same task. The task is shielded, so a client that hangs up does not cancel the work the
  others wait on.
- `AccountSlots`: at most `limit` variants being made at once per account; a request past it
  waits up to `wait` seconds for a slot, then is refused (429), so one tenant's burst of new
  sizes cannot fill the process pool's queue for everyone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any

from swiftlite.image.limits import ImageRefused


class Flights:
    def __init__(self) -> None:
        self._flying: dict[Hashable, asyncio.Future[Any]] = {}

    def __len__(self) -> int:
        return len(self._flying)

    async def run(self, key: Hashable, make: Callable[[], Awaitable[Any]]) -> tuple[Any, bool]:
        """(result, whether this caller started the work)."""
        task = self._flying.get(key)
        led = task is None
        if task is None:
            task = asyncio.ensure_future(make())
            self._flying[key] = task
            task.add_done_callback(lambda t: self._landed(key, t))
        return await asyncio.shield(task), led

    def _landed(self, key: Hashable, task: asyncio.Future[Any]) -> None:
        if self._flying.get(key) is task:
            del self._flying[key]
        if not task.cancelled():
            task.exception()  # retrieved: no "never retrieved" warning when nobody waits


class AccountSlots:
    def __init__(self, limit: int, wait: float) -> None:
        self.limit = max(1, limit)
        self.wait = wait
        self._busy: dict[str, int] = {}
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}

    def busy(self, account: str) -> int:
        return self._busy.get(account, 0)

    @asynccontextmanager
    async def slot(self, account: str):
        await self._acquire(account)
        try:
            yield
        finally:
            self._release(account)

    async def _acquire(self, account: str) -> None:
        if self._busy.get(account, 0) < self.limit:
            self._busy[account] = self._busy.get(account, 0) + 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiters.setdefault(account, deque())
        queue.append(fut)
        try:
            async with asyncio.timeout(self.wait):
                await fut  # a releaser hands its slot over by resolving it
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                self._release(account)  # handed over as the timeout fired: pass it on
            else:
                fut.cancel()
            raise ImageRefused(429, "Too many image variants being made for this account; "
                                    "retry shortly") from None
        finally:
            if fut in queue:
                queue.remove(fut)
            if not queue:
                self._waiters.pop(account, None)

    def _release(self, account: str) -> None:
        queue = self._waiters.get(account)
        while queue:
            fut = queue.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot moves to the waiter: busy stays the same
                return
        left = self._busy.get(account, 0) - 1
        if left > 0:
            self._busy[account] = left
        else:
            self._busy.pop(account, None)
