"""Batched commits: many PUTs written, flushed and renamed by one thread, two flushes a batch."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import threading

import pytest

from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import (
    digests,
    direct_io,
    durability,
    fileformat,
    hashdir,
    reading,
    writing,
)
from swiftlite.obj.engine.batch_commit import BatchCommitter, put_many


@pytest.fixture
def devs(tmp_path):
    assert durability.configure("batch") == "batch"
    out = []
    for d in ("d1", "d2", "d3"):
        (tmp_path / d).mkdir()
        out.append(str(tmp_path / d))
    return out


def _hash(i: int) -> str:
    return hashlib.md5(f"obj{i}".encode()).hexdigest()


def test_put_many_one_hop_two_flushes_and_outcomes_per_device(tmp_path):
    assert durability.configure("batch") == "batch"
    for d in ("d1", "d2", "d3"):
        (tmp_path / d).mkdir()
    h = "b" * 32
    body = [b"hello ", b"world"]
    etag = hashlib.md5(b"hello world").hexdigest()
    # d2 already has a newer copy: only it refuses; d9 does not exist: only it fails.
    writing.DataWriter(str(tmp_path / "d2"), 5, h).put([b"new"], {"name": "/a/c/o"},
                                                       "0000000002.00000")
    gs = durability.SYNCERS.for_device(str(tmp_path / "d1"))
    before = gs.flushes
    writers = [writing.DataWriter(str(tmp_path / d), 5, h) for d in ("d1", "d2", "d3", "d9")]
    got, out = put_many(writers, body, {"name": "/a/c/o",
                                                 "Content-Type": "text/plain"},
                                 "0000000001.00000", etag)
    assert got == etag
    assert isinstance(out[0], hashdir.CommitResult) and isinstance(out[2], hashdir.CommitResult)
    assert isinstance(out[1], hashdir.Conflict)
    assert isinstance(out[3], hashdir.DeviceMissing)
    assert gs.flushes - before == 2  # data files once, renames once: not per device
    for d in ("d1", "d3"):
        info = reading.open_object(str(tmp_path / d), 5, h, 1 << 20, True)
        assert info.status == "ok" and info.body == b"hello world"
        assert info.metadata["ETag"] == etag and info.metadata["Content-Length"] == "11"
        info.close()
        assert os.listdir(tmp_path / d / "tmp") == []
    assert os.listdir(tmp_path / "d2" / "tmp") == []


@pytest.mark.parametrize("pipeline", [False, True], ids=["serial", "pipeline"])
async def test_concurrent_puts_share_batches_and_flushes(devs, pipeline):
    """40 grouped PUTs at once (two of them the same object, newest last): each is committed
    on every device, in fewer batches than jobs, with at most two flushes per batch
    (pipelined, one flush may cover one batch's renames and the next one's data)."""
    committer = BatchCommitter(pipeline=pipeline)
    gs = durability.SYNCERS.for_device(devs[0])
    before = gs.flushes
    base = Timestamp.now().ticks

    async def one(i: int, h: str, ts: str, body: bytes):
        writers = [writing.DataWriter(d, i % 4, h) for d in devs]
        return await committer.put(writers, [body], {"name": f"/a/c/o{i}"}, ts,
                                   hashlib.md5(body).hexdigest())

    jobs = [one(i, _hash(i), Timestamp(base + i).internal, b"x" * (100 + i))
            for i in range(38)]
    dup = _hash(0)  # object 0 twice more: older then newer than its first write
    jobs.append(one(0, dup, Timestamp(base - 5).internal, b"old"))
    jobs.append(one(0, dup, Timestamp(base + 99).internal, b"newest"))
    out = await asyncio.gather(*jobs)
    for i, (etag, results) in enumerate(out[:38]):
        assert etag == hashlib.md5(b"x" * (100 + i)).hexdigest()
        if i:  # object 0's first write may run after the newest one: then it is refused
            assert all(isinstance(r, hashdir.CommitResult) for r in results), results
    assert all(isinstance(r, hashdir.Conflict) for r in out[38][1])  # older than stored
    for d in devs:
        info = reading.open_object(d, 0, dup, 1 << 20, True)
        assert info.status == "ok" and info.body == b"newest"
        info.close()
        assert os.listdir(os.path.join(d, "tmp")) == []
        for part in range(4):  # the journal saw every rename
            assert digests.get_digests(d, part) == digests.recompute(d, part)
    assert committer.jobs == 40
    assert committer.batches < committer.jobs
    # Two flushes per batch at most: the device's syncer is the process's, and a flush begun
    # for someone else after a batch's writes (a previous test's straggler, under load)
    # serves that batch too, so now and then there is one fewer.
    assert 0 < gs.flushes - before <= 2 * committer.batches


async def test_one_bad_job_leaves_its_batch_alone(devs):
    committer = BatchCommitter()
    ts = Timestamp.now().internal

    async def one(i: int, expected: str | None):
        return await committer.put([writing.DataWriter(d, 1, _hash(i)) for d in devs],
                                   [b"body"], {"name": f"/a/c/o{i}"}, ts, expected)

    good = hashlib.md5(b"body").hexdigest()
    out = await asyncio.gather(one(1, good), one(2, "0" * 32), one(3, None),
                               return_exceptions=True)
    assert isinstance(out[1], writing.ETagMismatch)
    for got in (out[0], out[2]):
        assert got[0] == good and all(isinstance(r, hashdir.CommitResult) for r in got[1])
    assert not os.path.exists(fileformat.hash_dir(devs[0], 1, _hash(2)))
    # A job naming one hash dir twice is refused instead of waiting on its own flock.
    with pytest.raises(ValueError):
        await committer.put([writing.DataWriter(devs[0], 1, _hash(4)) for _ in range(2)],
                            [b"b"], {"name": "/a/c/o4"}, ts)
    etag, res = await one(5, None)  # and the committer still works
    assert isinstance(res[0], hashdir.CommitResult)


@pytest.mark.parametrize("pipeline", [False, True], ids=["serial", "pipeline"])
async def test_committer_thread_per_process_survives_a_failed_flush(devs, monkeypatch,
                                                                   pipeline):
    committer = BatchCommitter(pipeline=pipeline)
    ts = Timestamp.now().internal
    calls = []

    def failing(fd):
        calls.append(threading.current_thread().name)
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(durability, "syncfs", failing)
    _, res = await committer.put([writing.DataWriter(devs[0], 2, _hash(6))], [b"b"],
                                 {"name": "/a/c/o6"}, ts)
    assert isinstance(res[0], OSError)  # nothing acknowledged without its flush
    # The committer's thread flushes (pipelined: its flusher thread).
    assert calls == ["swiftlite-commit-1.1" + ("f" if pipeline else "")]
    assert not os.path.exists(fileformat.hash_dir(devs[0], 2, _hash(6)))
    assert os.listdir(os.path.join(devs[0], "tmp")) == []
    monkeypatch.undo()
    _, res = await committer.put([writing.DataWriter(devs[0], 2, _hash(6))], [b"b"],
                                 {"name": "/a/c/o6"}, Timestamp.now().internal)
    assert isinstance(res[0], hashdir.CommitResult)


async def test_a_stalled_disk_holds_up_only_its_own_batches(devs, monkeypatch):
    """Jobs queue per filesystem: while one filesystem's flush hangs, PUTs to another
    filesystem (here tmpfs) still commit; the stalled one completes once its flush does."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("needs a second filesystem (/dev/shm)")
    fast_dev = tempfile.mkdtemp(dir="/dev/shm")
    release = threading.Event()
    try:
        if os.stat(fast_dev).st_dev == os.stat(devs[0]).st_dev:
            pytest.skip("/dev/shm is not a separate filesystem here")
        slow_fs = os.stat(devs[0]).st_dev
        real = durability.syncfs

        def syncfs(fd):
            if os.fstat(fd).st_dev == slow_fs:
                assert release.wait(30)
            real(fd)
        monkeypatch.setattr(durability, "syncfs", syncfs)
        committer = BatchCommitter()
        ts = Timestamp.now().internal
        slow = asyncio.ensure_future(committer.put(
            [writing.DataWriter(devs[0], 0, _hash(7))], [b"s"], {"name": "/a/c/o7"}, ts))
        _, res = await asyncio.wait_for(committer.put(
            [writing.DataWriter(fast_dev, 0, _hash(8))], [b"f"], {"name": "/a/c/o8"}, ts), 10)
        assert isinstance(res[0], hashdir.CommitResult)
        assert not slow.done()
        release.set()
        _, res = await asyncio.wait_for(slow, 10)
        assert isinstance(res[0], hashdir.CommitResult)
    finally:
        release.set()
        shutil.rmtree(fast_dev, ignore_errors=True)


def test_failed_final_flush_fails_every_rename_and_keeps_older_copies(devs, monkeypatch):
    """The second flush (renames) fails: no job in the batch may be reported committed, and
    none may have removed the older file its new one replaces."""
    from swiftlite.obj.engine.batch_commit import Job, put_batch

    h = _hash(9)
    old = Timestamp.now()
    put_many([writing.DataWriter(devs[0], 3, h)], [b"older"], {"name": "/a/c/o9"},
             old.internal)
    calls = []
    real = durability.syncfs

    def syncfs(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real(fd)
    monkeypatch.setattr(durability, "syncfs", syncfs)
    ts = Timestamp(old.ticks + 10).internal
    jobs = [Job([writing.DataWriter(d, 3, h) for d in devs[:2]], [b"newer"],
                {"name": "/a/c/o9"}, ts)]
    jobs += [Job([writing.DataWriter(devs[0], 3, _hash(10 + k))], [b"n"],
                 {"name": f"/a/c/o{10 + k}"}, ts) for k in range(2)]
    put_batch(jobs)
    assert len(calls) == 2
    for job in jobs:
        assert all(isinstance(r, OSError) for r in job.results), job.results
    hdir = fileformat.hash_dir(devs[0], 3, h)
    assert f"{old.internal}.data" in os.listdir(hdir)  # the older copy is still there


def test_a_batch_far_past_the_old_recursion_limit_commits_and_flushes_every_job(devs):
    """500 jobs on 3 devices (1500 renames; the old recursive chain overflowed near 112 jobs
    and answered the outer ones without the final flush): every file is renamed, the batch
    flushes exactly twice, and every job reports its commit."""
    from swiftlite.obj.engine.batch_commit import Job, put_batch

    gs = durability.SYNCERS.for_device(devs[0])
    before = gs.flushes
    ts = Timestamp.now().internal
    jobs = [Job([writing.DataWriter(d, i % 8, _hash(1000 + i)) for d in devs],
                [b"b%d" % i], {"name": f"/a/c/big{i}"}, ts) for i in range(500)]
    put_batch(jobs)
    for job in jobs:
        assert job.error is None
        assert all(isinstance(r, hashdir.CommitResult) for r in job.results), job.results
    assert gs.flushes - before == 2  # the data files once, every rename once
    for d in devs:
        assert os.listdir(os.path.join(d, "tmp")) == []
        for part in range(8):
            assert digests.get_digests(d, part) == digests.recompute(d, part)
    for i in (0, 257, 499):
        info = reading.open_object(devs[2], i % 8, _hash(1000 + i), 1 << 20, True)
        assert info.status == "ok" and info.body == b"b%d" % i
        info.close()


async def test_large_bodies_commit_in_their_own_lane_beside_small_ones(devs):
    """Bodies past `large_body` go to a lane of their own with two threads, small ones stay
    on the single small-body thread; both kinds commit whole, with every replica readable,
    and the same object's small and large writes never run at once (newest wins)."""
    committer = BatchCommitter(large_threads=2, large_body=64 * 1024)
    base = Timestamp.now().ticks
    big = [os.urandom(300_000) for _ in range(6)]

    async def one(i: int, body: bytes, ts: int):
        writers = [writing.DataWriter(d, 1, _hash(i)) for d in devs]
        # Many pieces, as a body read off the socket arrives: written without a join.
        chunks = [body[k:k + 7000] for k in range(0, len(body), 7000)]
        return await committer.put(writers, chunks, {"name": f"/a/c/o{i}"},
                                   Timestamp(ts).internal, hashlib.md5(body).hexdigest())

    jobs = [one(i, big[i], base + i) for i in range(6)]
    jobs += [one(100 + i, b"s" * 500, base + i) for i in range(6)]
    jobs.append(one(0, b"small and newest", base + 50))  # same object as big[0]
    await asyncio.gather(*jobs)
    lanes = {t.name.split(".")[0] for t in threading.enumerate()
             if t.name.startswith("swiftlite-commit-")}
    assert any(n.endswith("L") for n in lanes) and any(not n.endswith("L") for n in lanes)
    for d in devs:
        for i in range(1, 6):
            info = reading.open_object(d, 1, _hash(i), 1 << 20, True)
            assert info.body == big[i] and info.etag_ok
            info.close()
        info = reading.open_object(d, 1, _hash(0), 1 << 20, True)
        assert info.body == b"small and newest"
        info.close()
        assert os.listdir(os.path.join(d, "tmp")) == []


def _direct_io_works(path: str) -> bool:
    try:
        fd = os.open(os.path.join(path, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(path, "probe"))
    return True


@pytest.mark.parametrize("size", [300_000, 4096 * 64, 1 << 20])
def test_large_bodies_are_written_with_direct_io_byte_for_byte(devs, size):
    """A body past direct_body goes to disk from one page-aligned copy (O_DIRECT), padded
    and then cut to its length: every replica holds exactly the body and its trailer."""
    from swiftlite.obj.engine.batch_commit import Job, put_batch

    body = os.urandom(size)
    h = _hash(size)
    writers = [writing.DataWriter(d, 3, h) for d in devs]
    job = Job(writers, [body[:1000], body[1000:]], {"name": "/a/c/big"}, "0000000001.00000")
    direct = _direct_io_works(devs[0])
    put_batch([job], direct_body=256 * 1024)
    etag, results = job.outcome()
    assert etag == hashlib.md5(body).hexdigest()
    assert all(isinstance(r, hashdir.CommitResult) for r in results)
    # Where the filesystem has no O_DIRECT (tmpfs), the same bytes are written buffered.
    assert (devs[0] in direct_io._refused) is not direct
    for d in devs:
        info = reading.open_object(d, 3, h, 2 << 20, True)
        assert info.status == "ok" and info.body == body and info.etag_ok
        path = os.path.join(fileformat.hash_dir(d, 3, h), "0000000001.00000.data")
        assert os.path.getsize(path) == size + len(fileformat.pack_trailer(info.metadata))
        info.close()
        assert os.listdir(os.path.join(d, "tmp")) == []


def test_direct_io_falls_back_to_buffered_writes_where_refused(devs):
    """A filesystem that refuses O_DIRECT (EINVAL, as tmpfs) gets buffered writes, and is
    not asked again."""
    from swiftlite.obj.engine.batch_commit import Job, put_batch

    shm = tempfile.mkdtemp(dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    if shm is None or _direct_io_works(shm):
        pytest.skip("no filesystem without O_DIRECT here")
    try:
        dev = os.path.join(shm, "d1")
        os.mkdir(dev)
        body = os.urandom(300_000)
        for n in (1, 2):
            job = Job([writing.DataWriter(dev, 1, _hash(n))], [body], {"name": f"/a/c/{n}"},
                      f"000000000{n}.00000")
            put_batch([job], direct_body=1)
            assert isinstance(job.outcome()[1][0], hashdir.CommitResult)
            assert dev in direct_io._refused
            info = reading.open_object(dev, 1, _hash(n), 1 << 20, True)
            assert info.body == body and info.etag_ok
            info.close()
    finally:
        shutil.rmtree(shm, ignore_errors=True)


@pytest.mark.parametrize("sizes", [[70_000] * 30, [4096, 1, 8191, 1 << 20, 3], [1 << 20] * 3])
def test_streamed_bodies_are_written_with_direct_io_byte_for_byte(devs, sizes):
    """A streamed body (a batch per write, the rest with the trailer at put) goes through an
    aligned buffer with O_DIRECT, whatever its pieces' sizes: the file is exactly the body
    and its trailer."""
    parts = [os.urandom(n) for n in sizes]
    body = b"".join(parts)
    h = _hash(len(body))
    w = writing.DataWriter(devs[0], 2, h, direct=True)
    for i in range(0, len(parts) - 1, 3):
        w.write(parts[i:min(i + 3, len(parts) - 1)])
    res = w.put(parts[-1:], {"name": "/a/c/streamed"}, "0000000001.00000")
    assert res.metadata["ETag"] == hashlib.md5(body).hexdigest()
    assert (w._stager is None) and (devs[0] in direct_io._refused) is not \
        _direct_io_works(devs[0])
    info = reading.open_object(devs[0], 2, h, 8 << 20, True)
    assert info.status == "ok" and info.body == body and info.etag_ok
    path = os.path.join(fileformat.hash_dir(devs[0], 2, h), "0000000001.00000.data")
    assert os.path.getsize(path) == len(body) + len(fileformat.pack_trailer(info.metadata))
    info.close()
    assert os.listdir(os.path.join(devs[0], "tmp")) == []
