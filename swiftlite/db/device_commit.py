"""Device commit rounds: every DB of a device commits its waiting item updates in one
thread job, made durable by one flush of the device's update log.

A per-DB group commit (swiftlite.db.group_commit) batches the updates of one DB. When the
updates of one container are spread over its shards (or many containers are busy at
once), each DB has only a few in flight, and the per-commit costs dominate: a thread hop,
a WAL flush, a wake-up of the event loop, for every three or so rows. Here one task per
device gathers what every DB of the device has waiting, and one thread job applies each
DB's batch in its own transaction without flushing it (`synchronous = NORMAL`), appends
them all to the device's update log and flushes that once (swiftlite.db.update_log). The
callers are answered after that flush: a 2xx still means durable. Updates that arrive
during a round go into the next. A round of a single DB (time-ordered names all going to
one container, say) commits it with its own WAL flush instead, as without the log: the
log saves nothing there and would add its write.

A DB another writer holds (a listing in progress, the replicator, another worker) is not
waited for beyond `lock_wait`: its batch goes to that DB's own group committer instead,
which waits as long as it must and flushes the DB itself, so one busy DB never stalls the
device's round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from swiftlite.common import metrics
from swiftlite.common.threadpool import run_blocking
from swiftlite.db.broker import Busy
from swiftlite.db.group_commit import take_batch
from swiftlite.db.update_log import DeviceLog, UpdateLog, encode

# (items, future) entries of one DB waiting for a round, with what merges them.
_Waiting = list[tuple[list[Any], asyncio.Future]]


class _DB:
    __slots__ = ("broker", "merge", "rel", "waiting")

    def __init__(self, broker: Any, merge: Callable[..., Any], rel: str) -> None:
        self.broker = broker
        self.merge = merge
        self.rel = rel
        self.waiting: _Waiting = []


class DeviceCommitter:
    def __init__(self, dlog: DeviceLog, ulog: UpdateLog, max_batch: int = 1000,
                 lock_wait: float = 0.02, min_dbs: int = 2) -> None:
        """`min_dbs`: a round with fewer DBs commits each durably (its own WAL flush, as
        without the log): the log only pays when one flush stands in for several."""
        self._log = dlog
        self._ulog = ulog
        self._max_batch = max(1, max_batch)
        self._lock_wait = lock_wait
        self._min_dbs = max(1, min_dbs)
        self._dbs: dict[str, _DB] = {}  # DBs with updates waiting, by path, in arrival order
        self._task: asyncio.Task | None = None
        self._deferring: set[asyncio.Task] = set()
        self.rounds = 0
        self.items = 0
        self.deferred = 0  # batches handed to a busy DB's own committer

    async def submit(self, broker: Any, merge: Callable[..., Any], rel: str,
                     items: list[Any]) -> Any:
        """Queue `items` for `broker`'s DB (`merge(items, durable=, wait=)` applies them);
        returns its result once they are durable (or raises)."""
        fut = asyncio.get_running_loop().create_future()
        db = self._dbs.get(broker.db_file)
        if db is None:
            db = self._dbs[broker.db_file] = _DB(broker, merge, rel)
        db.waiting.append((items, fut))
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        return await asyncio.shield(fut)

    def _take_round(self) -> list[tuple[_DB, _Waiting, list[Any]]]:
        work = []
        for path, db in list(self._dbs.items()):
            batch = take_batch(db.waiting, self._max_batch)
            if not db.waiting:
                del self._dbs[path]
            work.append((db, batch, [i for entry in batch for i in entry[0]]))
        return work

    async def _run(self) -> None:
        try:
            while self._dbs:
                work = self._take_round()
                started = time.monotonic()
                try:
                    outcomes, retire = await run_blocking(self._round, work)
                except Exception as exc:  # the log's flush failed: nobody's rows are durable
                    outcomes, retire = [(False, exc)] * len(work), None
                self._ulog.retire(retire, self._log.dev_path)
                self.rounds += 1
                metrics.db_round(sum(len(items) for _, _, items in work), len(work),
                                 time.monotonic() - started,
                                 sum(ok is None for ok, _ in outcomes))
                for (db, batch, items), (ok, value) in zip(work, outcomes, strict=True):
                    if ok is None:  # busy: its own committer waits and flushes the DB
                        self.deferred += 1
                        task = asyncio.create_task(self._defer(db, batch, items))
                        self._deferring.add(task)
                        task.add_done_callback(self._deferring.discard)
                        continue
                    self.items += len(items) if ok else 0
                    for _, fut in batch:
                        if not fut.done():
                            if ok:
                                fut.set_result(value)
                            else:
                                fut.set_exception(value)
        finally:
            self._task = None

    def _round(self, work: list[tuple[_DB, _Waiting, list[Any]]],
               ) -> tuple[list[tuple[bool | None, Any]], Any]:
        """(blocking) Apply each DB's batch unflushed, log them all, flush the log once.
        Returns per DB (True, result), (False, exception) or (None, None) for busy, and a
        segment the log rotated away from."""
        outcomes: list[tuple[bool | None, Any]] = []
        records: list[tuple[str, bytes]] = []
        logged = len(work) >= self._min_dbs
        for db, _, items in work:
            try:
                outcomes.append((True, db.merge(items, durable=not logged,
                                                wait=self._lock_wait)))
                if logged:
                    records.append((db.rel, encode(db.rel, items)))
            except Busy:
                outcomes.append((None, None))
            except Exception as exc:
                outcomes.append((False, exc))
        retire = self._log.rotate_if_due()
        if records:
            try:
                self._log.write(records)
            except Exception as exc:
                outcomes = [(False, exc) if ok else (ok, v) for ok, v in outcomes]
                # Applied but not durable: the callers see a failure and retry.
        return outcomes, retire

    async def _defer(self, db: _DB, batch: _Waiting, items: list[Any]) -> None:
        try:
            result = await db.broker.committer.submit(items)
        except Exception as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        self.items += len(items)
        for _, fut in batch:
            if not fut.done():
                fut.set_result(result)

    def tick(self) -> None:
        """Retire an aged-out (or full, or broken) segment while no round runs, as the next
        round would (its DBs get flushed)."""
        if self._task is None:
            self._ulog.retire(self._log.rotate_if_due(), self._log.dev_path)

    async def drain(self) -> None:
        while self._task is not None or self._deferring:
            if self._task is not None:
                await asyncio.shield(self._task)
            if self._deferring:
                await asyncio.gather(*list(self._deferring), return_exceptions=True)
