"""Flushes shared across processes: a syncfs one worker starts after another's writes covers
them, a failed one fails every process it covered, and a worker killed mid-flush blocks
nobody."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import os
import signal
import threading

import pytest

from swiftlite.obj import durability
from swiftlite.obj.durability import SharedFlush
from tests.helpers import wait_for


@pytest.fixture
def shm(tmp_path, monkeypatch):
    """A private counter directory: these tests count flushes exactly."""
    monkeypatch.setattr(SharedFlush, "DIR", str(tmp_path))
    dev = tmp_path / "dev"
    dev.mkdir()
    return str(dev)


def _flusher(dev: str, n: int, out) -> None:
    sf = SharedFlush(os.stat(dev).st_dev)
    fd = os.open(dev, os.O_RDONLY)
    for _ in range(n):
        sf.flush(fd)
    out.put((sf.flushes, sf.covered))


def test_processes_flushing_at_once_share_flushes(shm):
    """Eight processes, 40 flushes each: every call returns having had a flush start after
    it (its own or a covering one), and the processes together flush fewer times."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_flusher, args=(shm, 40, out)) for _ in range(8)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    own = sum(f for f, _ in got)
    covered = sum(c for _, c in got)
    assert own + covered == 8 * 40
    assert covered > 0 and own < 8 * 40
    started, done = SharedFlush._FIELDS.unpack_from(
        open(os.path.join(os.path.dirname(shm), SharedFlush.NAME.format(
            dev=os.stat(shm).st_dev)), "rb").read(32))[:2]
    assert started == done == own


def test_a_caller_never_counts_a_flush_begun_before_its_call(shm):
    """A flush already running when a caller arrives does not cover it: it waits for that
    one, then flushes itself."""
    sf = SharedFlush(os.stat(shm).st_dev)
    fd = os.open(shm, os.O_RDONLY)
    sf.flush(fd)  # creates the counter file
    # Another process is mid-flush (holds the lock, started counted, done not yet).
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()

    def leader():
        other = SharedFlush(os.stat(shm).st_dev)
        assert other._open()
        fcntl.flock(other._fd, fcntl.LOCK_EX)
        s, d, f, e = SharedFlush._FIELDS.unpack_from(other._map)
        SharedFlush._FIELDS.pack_into(other._map, 0, s + 1, d, f, e)
        ready.set()
        release.wait(30)
        SharedFlush._FIELDS.pack_into(other._map, 0, s + 1, s + 1, f, e)
        fcntl.flock(other._fd, fcntl.LOCK_UN)

    p = ctx.Process(target=leader)
    p.start()
    assert ready.wait(30)
    release.set()
    sf.flush(fd)  # arrives while flush 2 runs: needs flush 3, which it does itself
    p.join(10)
    assert sf.flushes == 2 and sf.covered == 0


def _waiters_on(path: str) -> int:
    """Blocked flock waiters on `path` (Linux lists them in /proc/locks with '->')."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return sum(1 for line in f if "->" in line and line.split()[-3].endswith(f":{ino}"))


def test_a_failed_flush_fails_the_processes_it_covered(shm):
    """Another process's flush that started after this caller's call fails (EIO): the
    caller, covered by it, fails too; a later call is not failed by that old failure."""
    sf = SharedFlush(os.stat(shm).st_dev)
    fd = os.open(shm, os.O_RDONLY)
    sf.flush(fd)
    ctx = multiprocessing.get_context("fork")
    holding, go = ctx.Event(), ctx.Event()

    def failing_leader():
        other = SharedFlush(os.stat(shm).st_dev)
        assert other._open()
        fcntl.flock(other._fd, fcntl.LOCK_EX)
        holding.set()
        assert go.wait(30)
        # Its flush (started after the parent's call, which waits on the lock) fails.
        s, d, f, e = SharedFlush._FIELDS.unpack_from(other._map)
        SharedFlush._FIELDS.pack_into(other._map, 0, s + 1, s + 1, s + 1, errno.EIO)
        fcntl.flock(other._fd, fcntl.LOCK_UN)

    p = ctx.Process(target=failing_leader)
    p.start()
    assert holding.wait(30)
    errors: list[OSError] = []

    def call():
        try:
            sf.flush(fd)
        except OSError as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    wait_for(lambda: _waiters_on(sf.path) == 1, 10, what="the caller waiting on the lock")
    go.set()
    t.join(30)
    p.join(30)
    assert sf.covered == 1 and sf.flushes == 1
    assert len(errors) == 1 and errors[0].errno == errno.EIO
    sf.flush(fd)  # a flush after the failed one: no error
    assert sf.flushes == 2


def test_a_process_killed_while_flushing_blocks_nobody(shm):
    sf = SharedFlush(os.stat(shm).st_dev)
    fd = os.open(shm, os.O_RDONLY)
    sf.flush(fd)
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()

    def stuck():
        other = SharedFlush(os.stat(shm).st_dev)
        assert other._open()
        fcntl.flock(other._fd, fcntl.LOCK_EX)
        s, d, f, e = SharedFlush._FIELDS.unpack_from(other._map)
        SharedFlush._FIELDS.pack_into(other._map, 0, s + 1, d, f, e)  # started, never done
        ready.set()
        signal.pause()

    p = ctx.Process(target=stuck)
    p.start()
    assert ready.wait(30)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    sf.flush(fd)  # the kernel dropped the dead process's flock: this one flushes itself
    assert sf.flushes == 2


def test_a_counter_file_another_user_could_write_is_not_trusted(shm):
    path = os.path.join(SharedFlush.DIR, SharedFlush.NAME.format(dev=os.stat(shm).st_dev))
    with open(path, "wb") as f:
        f.write(b"\xff" * 4096)  # "a flush finished" forever, if it were believed
    os.chmod(path, 0o666)
    sf = SharedFlush(os.stat(shm).st_dev)
    fd = os.open(shm, os.O_RDONLY)
    sf.flush(fd)
    assert sf._map is None and sf.covered == 0  # flushed by itself, file ignored
    os.unlink(path)
    os.symlink(os.path.join(os.path.dirname(path), "elsewhere"), path)
    sf2 = SharedFlush(os.stat(shm).st_dev)
    sf2.flush(fd)
    assert sf2._map is None
