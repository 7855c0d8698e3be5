"""The pipelined committer (commit_pipeline) with two batches in flight: kill -9 loses no
acknowledged write and leaves no partial object; a failed flush acknowledges nothing it
covered.

Every flush of the server is slowed down (SWIFTLITE_FLUSH_DELAY_MS), so the batches can be
caught on disk while a flush runs. A lead PUT goes first, alone: its batch's data flush
(flush 1) is running once its temp file is in tmp/. The first burst is sent then and written
during flush 1, as the next batch. When the lead's file is renamed into its hash dir, flush 1
is over and flush 2 (the lead's rename, the first burst's data) has begun: the second burst
is sent then and written during flush 2, as the batch after. Every batch boundary is read
off the disk (temp files in tmp/, <timestamp>.data in hash dirs), never off a clock:

    lead renamed, both bursts in tmp/   flush 2 running: the lead's rename flush and the
                                        first burst's data flush; the second burst written
    first burst renamed, second in tmp/ flush 3 running: the first burst's rename flush and
                                        the second burst's data flush
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from dataclasses import dataclass

import aiohttp
import msgpack
import pytest

from swiftlite.common.hashing import hash_path
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import digests, durability
from swiftlite.obj.engine.fileformat import hash_dir
from tests.helpers import ServerProcess, async_wait_for, free_port

PART = 1
BURST = 20  # PUTs per burst: less than commit_batch_jobs (32), so a burst is one batch
DELAY = 1.5  # seconds each flush of the first server takes (SWIFTLITE_FLUSH_DELAY_MS): wide
# enough that a burst is surely written inside one flush on a loaded CI machine
PREFIX = 32  # bytes that tell one body from another (random bodies)


@dataclass
class Write:
    name: str
    body: bytes
    ts: str
    sent: float = 0.0
    status: int | None = None  # None: no answer (the server died with it in flight)
    took: float = 0.0  # seconds from sending to the answer
    task: asyncio.Task | None = None


class Rig:
    """One object server (one process) on one device, and the writes sent to it."""

    def __init__(self, tmp_path) -> None:
        devices = tmp_path / "devices"
        self.dev = str(devices / "sda")
        os.makedirs(os.path.join(self.dev, "tmp"))
        conf = tmp_path / "object-server.conf"
        # One process: its committer thread sees every PUT, and the kill takes down exactly
        # the process whose temp files the restart must find dead.
        conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[object-server]\n"
                        "workers = 1\nwrite_batch_size = 16k\ncommit_pipeline = true\n")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/sda/{PART}/a/c"
        self.proc = ServerProcess("object", str(conf), self.port)
        self.writes: list[Write] = []
        self._tick = Timestamp.now().ticks

    def new(self, name: str) -> Write:
        self._tick += 1
        w = Write(name, os.urandom(3000 + len(self.writes) * 37), Timestamp(self._tick).internal)
        self.writes.append(w)
        return w

    def send(self, s: aiohttp.ClientSession, writes: list[Write]) -> None:
        for w in writes:
            w.task = asyncio.ensure_future(self._put(s, w))

    async def _put(self, s: aiohttp.ClientSession, w: Write) -> None:
        w.sent = time.monotonic()
        try:
            async with s.put(f"{self.base}/{w.name}", data=w.body,
                             headers={"X-Timestamp": w.ts,
                                      "ETag": hashlib.md5(w.body).hexdigest(),
                                      "Content-Type": "application/octet-stream"}) as r:
                await r.read()
                w.status, w.took = r.status, time.monotonic() - w.sent
        except (aiohttp.ClientError, OSError):
            w.status = None

    # ---- what the disk shows ----------------------------------------------------------------

    def in_tmp(self) -> set[str]:
        """Names whose temp file (its body's start at least) is in tmp/."""
        by_prefix = {w.body[:PREFIX]: w.name for w in self.writes}
        tdir = os.path.join(self.dev, "tmp")
        found = set()
        for n in os.listdir(tdir):
            try:
                with open(os.path.join(tdir, n), "rb") as f:
                    head = f.read(PREFIX)
            except FileNotFoundError:  # renamed or removed meanwhile
                continue
            if head in by_prefix:
                found.add(by_prefix[head])
        return found

    def renamed(self) -> set[str]:
        """Names whose <timestamp>.data is in its hash dir."""
        return {w.name for w in self.writes if os.path.exists(os.path.join(
            hash_dir(self.dev, PART, hash_path("a", "c", w.name)), f"{w.ts}.data"))}

    def answered(self, writes: list[Write]) -> list[str]:
        """Those of `writes` answered already."""
        return [w.name for w in writes if w.task is not None and w.task.done()]

    # ---- after -------------------------------------------------------------------------------

    async def get(self, s: aiohttp.ClientSession, w: Write) -> tuple[int, bytes]:
        async with s.get(f"{self.base}/{w.name}") as r:
            return r.status, await r.read()

    async def check_digests(self, s: aiohttp.ClientSession) -> None:
        """The partition's digests as the server keeps them (journal, no listing) are what a
        full listing gives, and stay so after the written suffixes are re-derived."""
        truth = digests.recompute(self.dev, PART)
        url = f"http://127.0.0.1:{self.port}/sda/{PART}/digests"
        async with s.request("MERGE", url) as r:
            assert r.status == 200
            assert msgpack.unpackb(await r.read()) == truth
        sufs = sorted({hash_path("a", "c", w.name)[-3:] for w in self.writes})
        async with s.request("MERGE", f"{url}/{'-'.join(sufs)}") as r:
            assert r.status == 200
            assert msgpack.unpackb(await r.read()) == truth

    async def serves_a_new_put(self, s: aiohttp.ClientSession) -> None:
        w = self.new("after")
        self.send(s, [w])
        await asyncio.wait_for(w.task, 20)
        assert w.status == 201
        assert await self.get(s, w) == (200, w.body)


async def _two_batches_in_flight(rig: Rig, s: aiohttp.ClientSession
                                 ) -> tuple[Write, list[Write], list[Write]]:
    """Send the lead PUT and both bursts (see the module's docstring); return once the lead
    is renamed and both bursts are written to tmp/, none of them renamed: flush 2 running."""
    lead = rig.new("lead")
    rig.send(s, [lead])
    await async_wait_for(lambda: "lead" in rig.in_tmp(), 20, 0.01,
                         what="the lead PUT's temp file (its data flush running)")
    first = [rig.new(f"first{i}") for i in range(BURST)]
    names1 = {w.name for w in first}
    rig.send(s, first)

    def first_written() -> str | None:
        renamed = rig.renamed()
        if renamed & names1:
            return "missed"  # the first burst shared the lead's batch after all
        if "lead" in renamed:
            return "ok" if names1 <= rig.in_tmp() else "missed"
        return None

    assert await async_wait_for(first_written, 20, 0.01,
                                what="the lead renamed (its data flush over)") == "ok", \
        "the first burst was not written while the lead's data flush ran"
    second = [rig.new(f"second{i}") for i in range(BURST)]
    names2 = {w.name for w in second}
    rig.send(s, second)

    def second_written() -> str | None:
        if rig.renamed() & (names1 | names2):
            return "missed"  # flush 2 ended before the second burst was written
        return "ok" if (names1 | names2) <= rig.in_tmp() else None

    assert await async_wait_for(second_written, 20, 0.01,
                                what="the second burst's temp files") == "ok", \
        "the second burst was not written while flush 2 ran"
    # The lead's rename is not flushed yet (flush 2 runs), so nothing may be answered.
    answered = rig.answered([lead, *first, *second])
    assert not answered, f"answered while flush 2 ran: {answered}"
    return lead, first, second


async def _kill_and_check(rig: Rig, s: aiohttp.ClientSession, monkeypatch,
                          expect_renamed: set[str], expect_tmp: set[str],
                          unflushed: set[str]) -> None:
    """kill -9 now. The disk must show `expect_renamed` renamed and `expect_tmp` in tmp/
    (the state the test waited for), and none of `unflushed` (those whose rename was not
    flushed when the server died) may be answered; any answer is a 201 that took two whole
    flushes. Then restart without the delay: tmp/ is emptied, the renamed writes (every
    acknowledged one among them) are whole, the others are 404, the digests are exact."""
    rig.proc.kill()
    await asyncio.wait_for(asyncio.gather(*(w.task for w in rig.writes)), 20)
    renamed, in_tmp = rig.renamed(), rig.in_tmp()
    assert (renamed, in_tmp) == (expect_renamed, expect_tmp), \
        "the kill did not land where the test waited"
    for w in rig.writes:
        # Any answer is a 201 that took at least two whole flushes (data, then rename).
        assert w.status in (None, 201), (w.name, w.status)
        if w.status == 201:
            assert w.took >= 2 * DELAY, f"{w.name} answered after {w.took:.3f}s"
    acked = {w.name for w in rig.writes if w.status == 201}
    assert not acked & unflushed, f"answered before their flush: {sorted(acked & unflushed)}"

    monkeypatch.delenv(durability.DELAY_ENV)
    rig.proc.start()
    assert os.listdir(os.path.join(rig.dev, "tmp")) == []  # dead temp files removed
    for w in rig.writes:
        status, body = await rig.get(s, w)
        if w.name in renamed:  # whole, never partial (kill -9 keeps the page cache)
            assert (status, body) == (200, w.body), (w.name, status, len(body))
        else:
            assert w.name not in acked and status == 404, (w.name, status)
    await rig.check_digests(s)
    await rig.serves_a_new_put(s)


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """The object server with slow flushes, not started (a test may set more fault
    injection first), stopped after the test."""
    monkeypatch.setenv(durability.DELAY_ENV, str(int(DELAY * 1000)))
    rig = Rig(tmp_path)
    yield rig
    rig.proc.stop()


@pytest.mark.slow
async def test_kill_while_a_batch_is_written_during_the_flush_of_the_one_before(
        rig, monkeypatch):
    """Killed during flush 2: the lead renamed, its rename not flushed; the first burst's
    data being flushed; the second burst written after it, not flushed at all."""
    rig.proc.start()
    async with aiohttp.ClientSession() as s:
        lead, first, second = await _two_batches_in_flight(rig, s)
        in_tmp = {w.name for w in first + second}
        # Flush 2 still runs (the first burst is in tmp/): it is the lead's rename flush.
        await _kill_and_check(rig, s, monkeypatch, {"lead"}, in_tmp, {"lead"} | in_tmp)
        assert [w.name for w in rig.writes if w.status] == ["after"]


@pytest.mark.slow
async def test_kill_while_a_renamed_batch_waits_for_its_rename_flush(rig, monkeypatch):
    """Killed during flush 3: the first burst renamed into its hash dirs, that rename not
    flushed (so not answered); the second burst's data being flushed."""
    rig.proc.start()
    async with aiohttp.ClientSession() as s:
        lead, first, second = await _two_batches_in_flight(rig, s)
        names1, names2 = {w.name for w in first}, {w.name for w in second}

        def first_renamed() -> str | None:
            renamed = rig.renamed()
            if renamed & names2:
                return "missed"  # flush 3 ended before the kill
            return "ok" if names1 <= renamed and names2 <= rig.in_tmp() else None

        assert await async_wait_for(first_renamed, 20, 0.01,
                                    what="the first burst renamed") == "ok", \
            "flush 3 ended before the test saw the first burst renamed"
        # Renamed, but the flush that makes the renames durable (flush 3) still runs.
        answered = rig.answered(first + second)
        assert not answered, f"answered while flush 3 ran: {answered}"
        # Flush 3 still runs (the second burst is in tmp/): the first burst's renames
        # are not durable. The lead's were (flush 2): it may have its 201.
        await _kill_and_check(rig, s, monkeypatch, {"lead"} | names1, names2,
                              names1 | names2)
        assert not [w.name for w in first + second if w.status]


@pytest.mark.slow
async def test_failed_flush_covering_two_batches_acknowledges_neither(rig, monkeypatch):
    """Flush 3 (the first burst's renames and the second burst's data) fails: no write of
    either burst is acknowledged, the second burst's are gone, and the server goes on."""
    monkeypatch.setenv(durability.FAIL_ENV, "3")
    rig.proc.start()
    async with aiohttp.ClientSession() as s:
        lead, first, second = await _two_batches_in_flight(rig, s)
        await asyncio.wait_for(asyncio.gather(*(w.task for w in rig.writes)), 20)
        assert lead.status == 201 and lead.took >= 2 * DELAY
        for w in first + second:
            assert w.status is not None and w.status >= 500, (w.name, w.status)
        assert await rig.get(s, lead) == (200, lead.body)
        for w in second:  # its data flush failed: its temp files went
            assert (await rig.get(s, w))[0] == 404, w.name
        for w in first:
            # Its data was flushed (flush 2) and renamed; only the flush of the rename
            # failed, and that leaves the renamed file in place (as put_batch and
            # hashdir.commit do). Not acknowledged: it may stay or go, never partial.
            status, body = await rig.get(s, w)
            assert (status, body) == (200, w.body) or status == 404, (w.name, status)
        await rig.serves_a_new_put(s)
        assert os.listdir(os.path.join(rig.dev, "tmp")) == []
        await rig.check_digests(s)
    assert "injected: flush 3" in rig.proc.log_text()
