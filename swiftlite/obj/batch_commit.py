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
one queues.

Lock order stays the writers' order (journal shared, then hash dir, see `diskfile`); a batch
holds the hash dirs of all its jobs until its final flush. Other writers hold one hash dir
at a time and never wait on the committer, so no cycle can form.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import time
from dataclasses import dataclass, field

from swiftlite.common import metrics
from swiftlite.common.threadpool import deliver
from swiftlite.obj import bodysum, durability, page_cache
from swiftlite.obj.direct_io import aligned_image
from swiftlite.obj.diskfile import CommitResult, DataWriter, ETagMismatch, Renamed, pack_trailer

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
    for job in jobs:
        if len(job.keys) < len(job.writers):
            job.error = ValueError("two writers for one hash dir")
    jobs = [job for job in jobs if job.error is None]
    # Each filesystem's epoch from before any write: a failed flush that ends after it may
    # have lost this batch's pages, even if a later one succeeds.
    syncers = {id(g): (g, g.epoch()) for g in (durability.syncer(w.device_path)
                                               for job in jobs for w in job.writers)
               if g is not None}

    def flush_all() -> None:
        if not any(w.fsync for job in jobs for w in job.writers):
            return  # fsync = false (tests only): nothing to wait for
        for g, since in syncers.values():
            g.sync(since)

    live: list[tuple[Job, int]] = []
    with contextlib.ExitStack() as stack:
        for g, _ in syncers.values():  # once per batch: a flush leader waits for each writer
            stack.enter_context(g.writing())
        for job in jobs:
            for w in job.writers:
                stack.enter_context(w.claim())  # an abort from the server waits for us
            live += _write_job(job, direct_body)
        if not live:
            return
        try:
            flush_all()  # every data file, before any rename
        except BaseException as exc:
            for job, i in live:
                job.results[i] = exc
                job.writers[i].discard()
            return
        for job, i in live:
            job.writers[i].close_flushed()
        _commit_all(live, flush_all, window)


def _write_job(job: Job, direct_body: int = 0) -> list[tuple[Job, int]]:
    """Hash the body, check the ETag, write each device's temp file (body and trailer in
    one write; with direct I/O from one aligned copy when the body has `direct_body` bytes
    or more, and that is not 0). Returns the (job, writer index) pairs still alive."""
    sums = bodysum.Summer().feed(job.chunks)
    job.etag = sums.etag
    job.results = [None] * len(job.writers)
    if job.expected_etag and job.expected_etag.strip('"').lower() != job.etag:
        job.error = ETagMismatch(job.etag)
        return []
    size = job.size
    job.metadata = dict(job.metadata, ETag=job.etag, **{"X-Timestamp": job.timestamp,
                                                        "Content-Length": str(size),
                                                        bodysum.CHECK_KEY: sums.check})
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


def _commit_all(live: list[tuple[Job, int]], flush_all,
                window: page_cache.WrittenWindow | None = None) -> None:
    """Rename every live file into its hash dir, all of them held locked, then flush once
    for all; older files go only after that flush. One loop and one ExitStack, however big
    the batch (the stack holds the locks, not the call depth).

    A refused or failed rename fails only its own job. A failed final flush fails every
    rename it was to make durable: none removes the older files it replaced.
    """
    with contextlib.ExitStack() as stack:
        renamed: list[tuple[Job, int, Renamed]] = []
        for job, i in live:
            w = job.writers[i]
            try:
                r = stack.enter_context(w.publish(job.timestamp, job.metadata))
                renamed.append((job, i, r))
            except BaseException as exc:
                job.results[i] = exc
                w.discard()
        if not renamed:
            return
        try:
            flush_all()
        except BaseException as exc:
            for job, i, _ in renamed:
                job.results[i] = exc
                job.writers[i].discard()
            return
        for job, i, r in renamed:
            try:
                job.results[i] = job.writers[i].committed(r.finish(), job.metadata)
            except BaseException as exc:  # noqa: BLE001 - durable; only the cleanup failed
                job.results[i] = exc
            if window is not None and job.buffered:
                window.add(os.path.join(r.held.path, f"{job.timestamp}.data"), job.size)


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
                 written_cache: int | None = None) -> None:
        self.max_jobs = max(1, max_jobs)
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
                    threading.Thread(target=self._run, args=(queue, limit), daemon=True,
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

    def _take(self, queue: list[Job], max_bytes: int = 0) -> list[Job]:
        """The next batch from `queue`, in order, sharing no hash dir with a batch in
        progress (lock held), and (`max_bytes`) not much past that many bytes; the rest
        stays queued."""
        batch: list[Job] = []
        later: list[Job] = []
        nbytes = 0
        for job in queue:
            if len(batch) < self.max_jobs and not job.keys & self._held and \
                    not (max_bytes and batch and nbytes >= max_bytes):
                batch.append(job)
                nbytes += job.nbytes
                self._held |= job.keys
            else:
                later.append(job)
        queue[:] = later
        return batch
