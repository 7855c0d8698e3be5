"""Small PUTs committed in batches: one thread writes, flushes and renames many objects at once.

A durable small PUT is mostly syscalls: per replica an open, a write, a mkdir, a journal
append, a flock, a rename, and two shared flushes. Run from 32 pool threads at once, every
one of those syscalls releases the GIL and has to win it back, so a single object-server
process spent more time handing the GIL around (futex waits, wake-ups) than doing the work,
and its PUT rate stalled at about two thirds of what two processes reached on the same CPU.

`BatchCommitter` gives every whole-body PUT of a process to one committer thread instead
(one per filesystem). The thread takes everything queued as one batch (no two jobs for the
same hash dir), writes every job's files, flushes the filesystems once, renames every file
under its hash dir lock, flushes once more, and only then answers each job. That is the same
durable sequence as `put_many` (data flushed before any rename, renames flushed before any
answer) with the same two flushes, shared by the whole batch, and hardly any GIL contention:
the committer's only rival for the GIL is the event loop. While one batch commits, the next
one queues; with `commit_pipeline` it is written meanwhile instead (`_run_pipelined`, off by
default: on ext4 it measured no faster).

Lock order stays the writers' order (journal shared, then hash dir, see `hashdir`); a batch
holds the hash dirs of all its jobs until its final flush. Other writers hold one hash dir
at a time and never wait on the committer, so no cycle can form.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue as queues
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from swiftlite.common.observe import metrics
from swiftlite.common.threadpool import deliver
from swiftlite.obj.engine import bodysum, durability, page_cache
from swiftlite.obj.engine.direct_io import aligned_image
from swiftlite.obj.engine.fileformat import pack_trailer
from swiftlite.obj.engine.hashdir import CommitResult, Renamed
from swiftlite.obj.engine.writing import DataWriter, ETagMismatch

MAX_JOBS = 32  # per batch: bounds the hash dirs (fds, flocks) one batch holds at once
LARGE_BODY = 256 * 1024  # a body this big goes to the large lane (see BatchCommitter)
LARGE_BATCH_BYTES = 8 * 1024 * 1024  # a large-lane batch stops growing past this much data


@dataclass
class Job:
    """One object body to write to one or more devices."""

    writers: list[DataWriter]
    chunks: list[bytes]
    metadata: dict[str, str]
    timestamp: str
    expected_etag: str | None = None
    etag: str = ""
    results: list[CommitResult | BaseException | None] = field(default_factory=list)
    error: BaseException | None = None  # refuses the whole job (ETag mismatch)
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future | None = None
    buffered: bool = False  # its files went through the page cache (not O_DIRECT)

    @functools.cached_property
    def size(self) -> int:
        """The body's bytes."""
        return sum(len(c) for c in self.chunks)

    @functools.cached_property
    def nbytes(self) -> int:
        """Bytes this job writes in all (its body once per device)."""
        return self.size * len(self.writers)

    @functools.cached_property
    def keys(self) -> frozenset[tuple[str, str, str]]:
        """The hash dirs this job writes (the committer's scans of its queue read this)."""
        return frozenset((w.device_path, str(w.part), w.hexhash) for w in self.writers)

    def outcome(self) -> tuple[str, list[CommitResult | BaseException]]:
        if self.error is not None:
            raise self.error
        return self.etag, self.results  # type: ignore[return-value]


def put_many(writers: list[DataWriter], chunks: list[bytes], metadata: dict[str, str],
             timestamp: str, expected_etag: str | None = None
             ) -> tuple[str, list[CommitResult | BaseException]]:
    """One body to several devices (distinct hash dirs), with one shared flush for all data
    files and one for all renames. Each device's outcome is its own: a CommitResult or the
    exception that refused or failed it. Returns the body's MD5 with them; ETagMismatch
    refuses them all. Needs sync_mode = batch (flushes are per filesystem)."""
    job = Job(writers, chunks, metadata, timestamp, expected_etag)
    put_batch([job])
    return job.outcome()


def put_batch(jobs: list[Job], direct_body: int = 0,
              window: page_cache.WrittenWindow | None = None) -> None:
    """Commit every job durably with two flushes in all; outcomes are set on the jobs.
    Files written through the page cache join `window` once committed.

    Jobs must not share a hash dir (the committer never batches two such jobs): this thread
    would wait on its own flock. A job that names one hash dir twice is refused.
    """
    batch = Batch()
    with batch.stack:
        batch.write(jobs, direct_body, announce=True)
        if not batch.live:
            return
        try:
            batch.flush()  # every data file, before any rename
        except BaseException as exc:
            batch.fail_written(exc)
            return
        batch.publish()
        if not batch.renamed:
            return
        try:
            batch.flush()
        except BaseException as exc:
            batch.fail_renamed(exc)
            return
        batch.finish(window)


class Batch:
    """One batch on its way: written, flushed, renamed, flushed, answered. It holds what
    the way needs until `stack` closes: every writer's claim (an abort from the server waits
    for us) and, once renamed, every hash dir's lock. `syncers` are the filesystems it
    writes, each with its epoch from before this batch's first write there: a failed flush
    that ends after it may have lost this batch's pages, even if a later one succeeds."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.stack = contextlib.ExitStack()
        self.live: list[tuple[Job, int]] = []  # written, not yet renamed
        self.renamed: list[tuple[Job, int, Renamed]] = []
        self.syncers: dict[int, tuple[durability.GroupSync, int]] = {}
        self.fsync = False  # some writer flushes (fsync = false: tests only)
        self.started = time.monotonic()

    def write(self, jobs: list[Job], direct_body: int = 0, announce: bool = False) -> None:
        """Write the jobs' temp files (more can be added until the first flush). `announce`
        tells each filesystem's flush leaders a commit is on its way (see GroupSync)."""
        for job in jobs:
            if len(job.keys) < len(job.writers):
                job.error = ValueError("two writers for one hash dir")
        self.jobs += jobs
        jobs = [job for job in jobs if job.error is None]
        for job in jobs:
            for w in job.writers:
                self.fsync = self.fsync or w.fsync
                g = durability.syncer(w.device_path)
                if g is not None and id(g) not in self.syncers:
                    self.syncers[id(g)] = (g, g.epoch())
                    if announce:
                        self.stack.enter_context(g.writing())
        for job in jobs:
            for w in job.writers:
                self.stack.enter_context(w.claim())
            self.live += _write_job(job, direct_body)

    def flush(self) -> None:
        flush(self.syncers, self.fsync)

    def fail_written(self, exc: BaseException) -> None:
        """A flush that covered the data failed: nothing written is kept."""
        for job, i in self.live:
            job.results[i] = exc
            job.writers[i].discard()
        self.live = []

    def publish(self) -> None:
        """The data is durable: rename every file into its hash dir, each held locked until
        `stack` closes. A refused or failed rename fails only its own job."""
        for job, i in self.live:
            w = job.writers[i]
            w.close_flushed()
            try:
                self.renamed.append((job, i, self.stack.enter_context(
                    w.publish(job.timestamp, job.metadata))))
            except BaseException as exc:
                job.results[i] = exc
                w.discard()
        self.live = []

    def fail_renamed(self, exc: BaseException) -> None:
        """The flush of the renames failed: none is reported committed, and none removes
        the older files it replaced."""
        for job, i, _ in self.renamed:
            job.results[i] = exc
            job.writers[i].discard()
        self.renamed = []

    def finish(self, window: page_cache.WrittenWindow | None = None) -> None:
        """The renames are durable: older files go, each job hears its outcome."""
        for job, i, r in self.renamed:
            try:
                job.results[i] = job.writers[i].committed(r.finish(), job.metadata)
            except BaseException as exc:  # noqa: BLE001 - durable; only the cleanup failed
                job.results[i] = exc
            if window is not None and job.buffered:
                name = f"{job.timestamp}.{job.writers[i].ext}"
                window.add(os.path.join(r.held.path, name), job.size)
        self.renamed = []

    def fail(self, exc: BaseException) -> None:
        """Something unexpected: every job not yet answered hears of it."""
        for job in self.jobs:
            if job.error is None:
                job.error = exc


def flush(syncers: dict[int, tuple[durability.GroupSync, int]], fsync: bool = True) -> None:
    """Flush each filesystem once; raise if a flush since its epoch failed."""
    if fsync:
        for g, since in syncers.values():
            g.sync(since)


def _write_job(job: Job, direct_body: int = 0) -> list[tuple[Job, int]]:
    """Hash the body, check the ETag, write each device's temp file (body and trailer in
    one write; with direct I/O from one aligned copy when the body has `direct_body` bytes
    or more, and that is not 0). Returns the (job, writer index) pairs still alive."""
    sums = bodysum.Summer().feed(job.chunks)
    job.etag = sums.etag
    job.results = [None] * len(job.writers)
    if sums.refuses(job.expected_etag):
        job.error = ETagMismatch(job.etag)
        return []
    size = job.size
    job.metadata = dict(sums.stamp(job.metadata), **{"X-Timestamp": job.timestamp,
                                                      "Content-Length": str(size)})
    trailer = pack_trailer(job.metadata)
    image = aligned_image([*job.chunks, trailer]) if direct_body and size >= direct_body \
        else None
    job.buffered = image is None
    live = []
    for i in sorted(range(len(job.writers)), key=lambda k: job.writers[k].device_path):
        w = job.writers[i]
        try:
            if image is None:
                w.write_whole([*job.chunks, trailer], size)
            else:
                w.write_image(*image, size)
            live.append((job, i))
        except BaseException as exc:
            job.results[i] = exc
            w.discard()
    return live


class BatchCommitter:
    """Committer threads (per process); `put` hands them a job and awaits the outcome.

    Jobs queue by the set of filesystems they write to, each set with its own thread(s), so
    a slow or failing disk holds up only the batches that write to it. A job whose hash dir
    another batch holds (in any queue) waits for a later batch: two batches never wait on
    each other's locks. With two or more threads per set, one batch can write and rename
    while another waits on its flush.

    Bodies of `large_body` bytes or more have a lane of their own per set, with
    `large_threads` threads and batches of about LARGE_BATCH_BYTES: writing a 1 MiB file
    takes about as long as flushing it, so one thread writing while the other flushes keeps
    the disk busy (1 MiB PUTs 1.4-1.7x). Small bodies are syscall-bound, and there a second
    thread only adds GIL hand-offs (0.89x at 64 KiB), so their lane keeps `threads`.
    """

    def __init__(self, max_jobs: int = MAX_JOBS, threads: int = 1, large_threads: int = 2,
                 large_body: int = LARGE_BODY, direct_body: int = 0,
                 written_cache: int | None = None, pipeline: bool = False) -> None:
        self.max_jobs = max(1, max_jobs)
        self.pipeline = pipeline  # small-body threads overlap batches (see _run_pipelined)
        # The page cache keeps this many bytes of the files written last (None: all).
        self.window = None if written_cache is None else page_cache.WrittenWindow(written_cache)
        self.direct_body = direct_body  # see _write_job
        self.threads = max(1, threads)
        self.large_threads = max(1, large_threads)
        self.large_body = large_body
        self._cv = threading.Condition()
        self._queues: dict[tuple[frozenset[int], bool], list[Job]] = {}
        self._held: set[tuple[str, str, str]] = set()  # hash dirs of batches in progress
        self._pid = -1
        self._first_uses = 0  # jobs waiting for a device's first use (see _enqueue_in_order)
        self._order: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.batches = 0  # for tests and stats
        self.jobs = 0

    async def put(self, writers: list[DataWriter], chunks: list[bytes],
                  metadata: dict[str, str], timestamp: str, expected_etag: str | None = None
                  ) -> tuple[str, list[CommitResult | BaseException]]:
        """`put_many`, committed with whatever else is queued for the same filesystems."""
        loop = asyncio.get_running_loop()
        job = Job(writers, chunks, metadata, timestamp, expected_etag, loop=loop,
                  future=loop.create_future())
        paths = [w.device_path for w in writers]
        syncers = durability.known_syncers(paths)
        if syncers is None or self._first_uses:
            await self._enqueue_in_order(job, paths)
        else:
            self._enqueue(job, syncers)
        await job.future
        return job.outcome()

    async def _enqueue_in_order(self, job: Job, paths: list[str]) -> None:
        """A device's first use stats and opens it (to find its filesystem's syncer): that
        runs in the thread pool, and until it is done later jobs queue behind this one, in
        the order they came (FIFO lock), as they do otherwise."""
        loop = asyncio.get_running_loop()
        if self._order is None or self._order[0] is not loop:
            self._order = (loop, asyncio.Lock())
        self._first_uses += 1
        try:
            async with self._order[1]:
                self._enqueue(job, await durability.syncers_of(paths))
        finally:
            self._first_uses -= 1

    def _enqueue(self, job: Job, syncers: list[durability.GroupSync | None]) -> None:
        large = job.nbytes >= self.large_body * len(job.writers)
        key = (frozenset(id(g) for g in syncers if g is not None), large)
        with self._cv:
            if self._pid != os.getpid():  # first use, or a forked worker: its own threads
                self._pid = os.getpid()
                self._queues, self._held = {}, set()
                if self.window is not None:  # the parent's files are not this worker's
                    self.window = page_cache.WrittenWindow(self.window.limit,
                                                           self.window.max_files)
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = []
                limit = LARGE_BATCH_BYTES if large else 0
                for n in range(self.large_threads if large else self.threads):
                    name = f"swiftlite-commit-{len(self._queues)}{'L' if large else ''}.{n + 1}"
                    run = self._run_pipelined if self.pipeline and not large else self._run
                    threading.Thread(target=run, args=(queue, limit), daemon=True,
                                     name=name).start()
            queue.append(job)
            self._cv.notify_all()

    def _run(self, queue: list[Job], max_bytes: int = 0) -> None:
        while True:
            with self._cv:
                while not (batch := self._take(queue, max_bytes)):
                    self._cv.wait()
            try:
                t0 = time.monotonic()
                put_batch(batch, self.direct_body, self.window)
                metrics.batch_committed(len(batch), time.monotonic() - t0)
            except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
                for job in batch:
                    if job.error is None:
                        job.error = exc
            self._answer(batch)

    def _run_pipelined(self, queue: list[Job], max_bytes: int = 0) -> None:
        """Batches overlap: batch n+1 is written while the flush that makes batch n's data
        durable runs (in a flusher thread of this one), and the next flush covers batch n's
        renames and batch n+1's data at once. Each batch still goes write, flush, rename,
        flush, answer, in that order, but a busy filesystem sees one flush per batch instead
        of two, and the committer writes while the disk flushes instead of waiting on it.
        A lone PUT takes the same two flushes as ever, with no delay.

        A failed flush fails both batches it covered, and the epochs (see Batch) fail a
        batch whose writes a failed flush overlapped, even when a later flush succeeds.

        Off by default (`commit_pipeline`): on ext4 it measured no faster (0.84-1.03x at
        64 KiB, 1 to 4 workers on 16 cores; loadtests/RESULTS.md): creating a file waits
        while the journal commits a flush, so the writing that should overlap a flush
        waits for it instead."""
        flusher = _Flusher(threading.current_thread().name + "f")
        fresh: Batch | None = None  # being written while `flushing` runs
        written: Batch | None = None  # its data is what `flushing` makes durable
        renamed: Batch | None = None  # its renames are
        flushing: Future | None = None
        while True:
            with self._cv:
                while True:
                    room = self.max_jobs - (len(fresh.jobs) if fresh else 0)
                    jobs = self._take(queue, max_bytes, room) if room > 0 else []
                    if jobs or (flushing is None and fresh is not None) or \
                            (flushing is not None and flushing.done()):
                        break
                    self._cv.wait()
            if jobs:
                fresh = fresh or Batch()
                try:
                    fresh.write(jobs, self.direct_body)
                except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
                    _step(fresh, fresh.fail_written, exc)  # nothing of it gets renamed
                    fresh.fail(exc)
                continue  # more may come while the flush runs
            error = flushing.exception() if flushing is not None else None
            if renamed is not None:
                if error is None:
                    _step(renamed, renamed.finish, self.window)
                else:
                    _step(renamed, renamed.fail_renamed, error)
                self._answered(renamed)
            renamed = None
            if written is not None:
                ok = _step(written, written.publish) if error is None else \
                    _step(written, written.fail_written, error)
                if ok and written.renamed:
                    renamed = written
                else:
                    self._answered(written)
            written, fresh = fresh, None
            if written is not None and not written.live:  # every job refused: no flush
                self._answered(written)
                written = None
            syncers, fsync = _union(written, renamed)
            flushing = None
            if written is not None or renamed is not None:
                flushing = flusher.submit(flush, syncers, fsync)
                flushing.add_done_callback(self._wake)

    def _answered(self, batch: Batch) -> None:
        """A pipelined batch is done: release what it holds and answer its jobs."""
        batch.stack.close()
        metrics.batch_committed(len(batch.jobs), time.monotonic() - batch.started)
        self._answer(batch.jobs)

    def _wake(self, _future: Future) -> None:
        with self._cv:
            self._cv.notify_all()

    def _answer(self, batch: list[Job]) -> None:
        """Free the batch's hash dirs for jobs queued behind it and wake its PUTs."""
        with self._cv:
            for job in batch:
                self._held -= job.keys
            self.batches += 1
            self.jobs += len(batch)
            self._cv.notify_all()  # jobs that waited for these hash dirs
        for job in batch:
            assert job.loop is not None and job.future is not None
            deliver(job.loop, job.future, None, None)
        if self.window is not None:  # after the answers: no PUT waits for this
            metrics.written_dropped(self.window.drop_overflow())

    def _take(self, queue: list[Job], max_bytes: int = 0, room: int = 0) -> list[Job]:
        """The next batch from `queue`, in order, sharing no hash dir with a batch in
        progress (lock held), and (`max_bytes`) not much past that many bytes; the rest
        stays queued. `room`: at most that many jobs instead of max_jobs."""
        batch: list[Job] = []
        later: list[Job] = []
        nbytes = 0
        for job in queue:
            if len(batch) < (room or self.max_jobs) and not job.keys & self._held and \
                    not (max_bytes and batch and nbytes >= max_bytes):
                batch.append(job)
                nbytes += job.nbytes
                self._held |= job.keys
            else:
                later.append(job)
        queue[:] = later
        return batch


def _union(*batches: Batch | None) -> tuple[dict[int, tuple[durability.GroupSync, int]], bool]:
    """The filesystems that batches in flight write, each with the oldest of their epochs."""
    syncers: dict[int, tuple[durability.GroupSync, int]] = {}
    fsync = False
    for batch in batches:
        if batch is None:
            continue
        fsync = fsync or batch.fsync
        for key, (g, since) in batch.syncers.items():
            syncers[key] = (g, min(since, syncers.get(key, (g, since))[1]))
    return syncers, fsync


def _step(batch: Batch, step, *args) -> bool:
    """One step of a pipelined batch; False when it broke (every job then hears of it)."""
    try:
        step(*args)
        return True
    except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
        batch.fail(exc)
        batch.live, batch.renamed = [], []
        return False


class _Flusher:
    """A pipelined committer's flushes run here, one at a time, while it writes. A daemon
    thread, like the committer's own: a flush hung on a dead disk must not hold up exit."""

    def __init__(self, name: str) -> None:
        self._jobs: queues.SimpleQueue = queues.SimpleQueue()
        threading.Thread(target=self._run, daemon=True, name=name).start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - the committer reads it
                future.set_exception(exc)
            else:
                future.set_result(None)
