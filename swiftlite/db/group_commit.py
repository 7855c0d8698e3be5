"""Group commit: concurrent updates to one DB share one transaction (one fsync).

The first update to arrive while no commit is running starts a committer task; updates that
arrive while a commit is in flight queue up and all go into the next transaction. Each
caller's future resolves only after the transaction holding its rows has committed, so a
2xx still means durable. The committer runs as its own task so a cancelled request cannot
abandon the others' rows half way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from swiftlite.common.threadpool import run_blocking


class GroupCommitter:
    def __init__(self, commit: Callable[[list[Any]], Any], max_batch: int = 1000,
                 gate: asyncio.Semaphore | None = None) -> None:
        """`commit(items)` is blocking and applies all items in one transaction. `gate`:
        shared by the DBs of a device, it bounds their commits in flight; a DB waiting for
        it keeps gathering updates, so many DBs updated at once (a sharded container's
        shards) still commit in batches instead of a few rows per commit each."""
        self._commit = commit
        self._gate = gate
        self._max_batch = max(1, max_batch)
        self._pending: list[tuple[list[Any], asyncio.Future]] = []
        self._task: asyncio.Task | None = None
        self.batches = 0
        self.items = 0

    @property
    def busy(self) -> bool:
        return self._task is not None

    async def submit(self, items: list[Any]) -> Any:
        """Queue `items`; returns the commit result once they are durable (or raises)."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((items, fut))
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        return await asyncio.shield(fut)

    def _take_batch(self) -> list[tuple[list[Any], asyncio.Future]]:
        batch, count = [], 0
        while self._pending and (not batch or count + len(self._pending[0][0])
                                 <= self._max_batch):
            entry = self._pending.pop(0)
            batch.append(entry)
            count += len(entry[0])
        return batch

    async def _run(self) -> None:
        try:
            while self._pending:
                if self._gate is not None:
                    async with self._gate:
                        await self._commit_batch()
                else:
                    await self._commit_batch()
        finally:
            self._task = None

    async def _commit_batch(self) -> None:
        batch = self._take_batch()  # after the gate: what came in while waiting goes too
        items = [i for entry in batch for i in entry[0]]
        try:
            result = await run_blocking(self._commit, items)
        except Exception as exc:  # every waiter in the batch sees the failure
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        self.batches += 1
        self.items += len(items)
        for _, fut in batch:
            if not fut.done():
                fut.set_result(result)
