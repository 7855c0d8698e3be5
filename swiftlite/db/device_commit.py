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

With `apply_delay` (container DBs), a logged round does not apply its rows at all: once
the log holds them they are durable, so each DB keeps them (DatabaseBroker.add_pending)
until it has `apply_rows` of them or the oldest has waited `apply_delay`, and applies them
then in one transaction. Uniform updates over ten shards give each shard one or two rows
a round, and a transaction costs about what five rows do (its stat, sequence and tail
pages, locks, BEGIN and COMMIT); held a few rounds, they share one. Every use of the DB
in this process applies its held rows first, so reads see every acknowledged update;
other processes (the daemons) see them at most `apply_delay` late. A segment of the log
is retired only after every row held on the device is applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from swiftlite.common.observe import metrics
from swiftlite.common.threadpool import run_blocking
from swiftlite.db.broker import Busy, DatabaseNotFound
from swiftlite.db.group_commit import take_batch
from swiftlite.db.quarantine import is_corrupt, quarantine_db
from swiftlite.db.update_log import DeviceLog, UpdateLog, _Segment, encode

log = logging.getLogger("swiftlite.db.device_commit")

# Seconds before held rows that failed to apply with an error (not a busy lock) are
# tried again (a damaged DB is quarantined first: the retry finds it gone, drops them, and
# replication rebuilds it from the other replicas).
_FAILED_PAUSE = 1.0

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
                 lock_wait: float = 0.02, min_dbs: int = 2, apply_delay: float = 0.0,
                 apply_rows: int = 64) -> None:
        """`min_dbs`: a round with fewer DBs commits each durably (its own WAL flush, as
        without the log): the log only pays when one flush stands in for several.
        `apply_delay` > 0: a logged round holds its rows for a later apply (module doc)."""
        self._log = dlog
        self._ulog = ulog
        self._max_batch = max(1, max_batch)
        self._lock_wait = lock_wait
        self._min_dbs = max(1, min_dbs)
        self._apply_delay = max(0.0, apply_delay)
        self._apply_rows = max(1, apply_rows)
        self._dbs: dict[str, _DB] = {}  # DBs with updates waiting, by path, in arrival order
        # Brokers holding logged rows not applied yet, and rotated segments that wait for
        # them to be applied before they retire. Touched only by this committer's own
        # jobs, one at a time.
        self._held: dict[str, Any] = {}
        self._held_segments: list[_Segment] = []
        self._failed: dict[str, float] = {}  # DB -> when to try again after an error
        self._wake = asyncio.Event()
        self._closing = False  # draining: every held row is due now
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
        else:
            self._wake.set()  # it may be waiting for held rows to come due
        return await asyncio.shield(fut)

    def _take_round(self) -> list[tuple[_DB, _Waiting, list[Any]]]:
        work = []
        for path, db in list(self._dbs.items()):
            batch = take_batch(db.waiting, self._max_batch)
            if not db.waiting:
                del self._dbs[path]
            work.append((db, batch, [i for entry in batch for i in entry[0]]))
        return work

    def _due(self, broker: Any, now: float) -> bool:
        """Its held rows are to be applied now. No rows left (a read of this process
        applied them) counts too: that is checked under the DB's lock, as the read may
        still be committing them."""
        return (not broker.has_pending
                or broker.pending_due(now, self._apply_rows, self._apply_delay))

    def _next_due(self) -> float:
        """Seconds until held rows must be applied (0: now)."""
        if not self._held or self._closing:
            return 0.0
        now = time.monotonic()
        if any(self._due(b, now) for b in self._held.values()):
            return 0.0
        return self._apply_delay / 4  # none due yet: look again soon

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if an update arrives (submit wakes us)."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _apply(self) -> None:
        retire, busy = await run_blocking(self._apply_due)
        for seg in retire:
            self._ulog.retire(seg, self._log.dev_path)
        if busy:  # another writer holds a DB: let it finish before trying again
            await self._pause(max(self._lock_wait, 0.01))

    async def _run(self) -> None:
        try:
            while self._dbs or self._held or self._held_segments:
                if not self._dbs:
                    wait = self._next_due()
                    if wait > 0:
                        await self._pause(wait)
                        continue
                    await self._apply()
                    continue
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
                if self._held_segments or (self._held and self._next_due() == 0):
                    await self._apply()
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
        hold = logged and self._apply_delay > 0
        for db, _, items in work:
            try:
                if hold:  # durable once logged below; applied later (module doc)
                    broker = db.broker
                    if not broker.exists():
                        raise DatabaseNotFound(broker.db_file)
                    broker.add_pending(items)
                    if broker.db_file not in self._held:
                        self._held[broker.db_file] = broker
                        metrics.db_held([], 1)
                    outcomes.append((True, None))
                else:
                    outcomes.append((True, db.merge(items, durable=not logged,
                                                    wait=self._lock_wait)))
                if logged:
                    records.append((db.rel, encode(db.rel, items)))
            except Busy:
                outcomes.append((None, None))
            except Exception as exc:
                outcomes.append((False, exc))
        retire = self._log.rotate_if_due()
        if retire is not None and (self._held or self._held_segments):
            self._held_segments.append(retire)  # retired once its held rows are applied
            retire = None
        if records:
            try:
                self._log.write(records)
            except Exception as exc:
                outcomes = [(False, exc) if ok else (ok, v) for ok, v in outcomes]
                # Applied but not durable: the callers see a failure and retry.
        return outcomes, retire

    def _apply_due(self) -> tuple[list[_Segment], int]:
        """(blocking) Apply the held rows that are due (all of them while a rotated segment
        waits on them); returns the segments now free to retire, and how many DBs were
        too busy to take their rows."""
        now = time.monotonic()
        every = bool(self._held_segments) or self._closing
        busy = 0
        applied: list[int] = []
        before = len(self._held)
        for path, broker in list(self._held.items()):
            if every or self._due(broker, now):
                if self._failed.get(path, 0.0) > now:
                    busy += 1
                    continue
                try:
                    n = broker.apply_pending(self._lock_wait)
                except Exception as exc:  # kept held (and in the log); tried again later
                    log.exception("applying held rows to %s (retried in %ss)", path,
                                  _FAILED_PAUSE)
                    if is_corrupt(exc):  # moved aside: the retry finds it gone, drops them
                        quarantine_db(path, broker.KIND, exc)
                    self._failed[path] = now + _FAILED_PAUSE
                    n = None
                if n is None:
                    busy += 1
                    continue
                self._failed.pop(path, None)
                del self._held[path]  # rounds add rows only between these jobs
                if n:
                    applied.append(n)
        metrics.db_held(applied, len(self._held) - before)
        if self._held_segments and not self._held:
            free, self._held_segments = self._held_segments, []
            return free, busy
        return [], busy

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
        """Finish every round and apply every held row (a stop)."""
        self._closing = True
        self._wake.set()
        while self._task is not None or self._deferring:
            if self._task is not None:
                await asyncio.shield(self._task)
            if self._deferring:
                await asyncio.gather(*list(self._deferring), return_exceptions=True)
