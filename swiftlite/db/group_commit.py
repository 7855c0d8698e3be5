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


def take_batch(pending: list[tuple[list[Any], asyncio.Future]], max_batch: int,
               ) -> list[tuple[list[Any], asyncio.Future]]:
    """Pop the oldest (items, future) entries of `pending` holding at most `max_batch`
    items in all (at least one entry, however many items it has)."""
    batch, count = [], 0
    while pending and (not batch or count + len(pending[0][0]) <= max_batch):
        entry = pending.pop(0)
        batch.append(entry)
        count += len(entry[0])
    return batch


class GroupCommitter:
    def __init__(self, commit: Callable[[list[Any]], Any], max_batch: int = 1000,
                 gate: asyncio.Semaphore | None = None, gate_wait: float = 0.05) -> None:
        """`commit(items)` is blocking and applies all items in one transaction. `gate`:
        shared by the DBs of a device, it bounds their commits in flight; a DB waiting for
        it keeps gathering updates, so many DBs updated at once (a sharded container's
        shards) still commit in batches instead of a few rows per commit each. A DB waits
        at most `gate_wait` seconds for it, then commits anyway: one DB stuck on a lock
        or a slow disk must not hold up every other container of the device."""
        self._commit = commit
        self.merge = commit  # what a device commit round applies a batch with
        self._gate = gate
        self._gate_wait = gate_wait
        self._max_batch = max(1, max_batch)
        self._pending: list[tuple[list[Any], asyncio.Future]] = []
        self._task: asyncio.Task | None = None
        self.batches = 0
        self.items = 0
        self.gate_timeouts = 0

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
        return take_batch(self._pending, self._max_batch)

    async def _run(self) -> None:
        try:
            while self._pending:
                gate = self._gate
                held = gate is not None and await self._enter_gate(gate)
                if gate is not None and not held:
                    self.gate_timeouts += 1  # its holders are slow: go on without it
                try:
                    await self._commit_batch()
                finally:
                    if held and gate is not None:
                        gate.release()
        finally:
            self._task = None

    async def _enter_gate(self, gate: asyncio.Semaphore) -> bool:
        """Acquire `gate` within gate_wait; False if not. (Not wait_for: on 3.11 it can
        drop an acquire that completes as the timeout fires, leaking a slot for good.)"""
        acquire = asyncio.ensure_future(gate.acquire())
        try:
            done, _ = await asyncio.wait({acquire}, timeout=self._gate_wait)
        except asyncio.CancelledError:  # shutting down: hand back a slot taken meanwhile
            acquire.cancel()
            acquire.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() else gate.release())
            raise
        if not done:
            acquire.cancel()
            try:
                await acquire
            except asyncio.CancelledError:
                return False
        return True  # acquired, possibly just as the wait ran out

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
