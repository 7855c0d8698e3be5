"""Group durability: concurrent writers share flushes, and nobody returns before a flush
that started after its call."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from swiftlite.obj.engine import durability
from swiftlite.obj.engine.durability import GroupSync, syncfs_available


def test_syncfs_is_available_on_linux():
    assert syncfs_available()


def test_single_caller_flushes_once(tmp_path):
    gs = GroupSync(str(tmp_path))
    gs.sync()
    assert gs.flushes == 1
    gs.sync()
    assert gs.flushes == 2
    gs.close()


def test_concurrent_callers_share_flushes(tmp_path, monkeypatch):
    # Each flush takes 50 ms, as a disk's does: on tmpfs a flush is instant, and a loaded
    # machine once ran all 32 writers one after another (32 flushes).
    monkeypatch.setattr(durability, "_delay", [0.05])
    gs = GroupSync(str(tmp_path))
    n = 32
    barrier = threading.Barrier(n)
    errors = []

    def writer(i: int) -> None:
        try:
            barrier.wait()
            with open(tmp_path / f"f{i}", "wb") as f:
                f.write(os.urandom(4096))
            gs.sync()
        except Exception as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Group commit: far fewer flushes than writers (at most two rounds per arrival wave).
    assert 1 <= gs.flushes <= n // 4
    gs.close()


def test_caller_waits_for_a_flush_started_after_it(tmp_path):
    """A caller arriving mid-flush must not ride on that flush (it may predate its write)."""
    gs = GroupSync(str(tmp_path))
    started = []
    real = gs.fd
    order = []

    # Observe the sequence through the counters: hold the condition while a flush "runs".
    with gs._cond:
        gs._running = True
        gs._started += 1
        started.append(gs._started)

    def late() -> None:
        gs.sync()
        order.append(("late-done", gs._done))

    t = threading.Thread(target=late)
    t.start()
    # Finish the fake in-flight flush: the late caller must still run its own.
    with gs._cond:
        gs._running = False
        gs._done = started[0]
        gs._cond.notify_all()
    t.join(10)
    assert order and order[0][1] >= started[0] + 1
    assert gs.fd == real
    gs.close()


def test_flush_gathers_writers_still_committing(tmp_path):
    """Writers announced with writing() are waited for: one flush covers the whole wave."""
    gs = GroupSync(str(tmp_path), gather=10.0)  # generous: the wave completes long before
    n = 8
    inside = threading.Barrier(n)
    errors = []

    def writer(i: int) -> None:
        try:
            with gs.writing():
                inside.wait()  # everybody is committing before anybody syncs
                (tmp_path / f"g{i}").write_bytes(b"x" * 100)
                gs.sync()
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(8)
    assert not errors and not any(t.is_alive() for t in threads)
    assert gs.flushes == 1
    gs.close()


def test_lone_writer_does_not_wait_for_the_gather_window(tmp_path):
    gs = GroupSync(str(tmp_path), gather=30.0)
    done = threading.Event()

    def lone() -> None:
        with gs.writing():
            gs.sync()
        done.set()

    threading.Thread(target=lone, daemon=True).start()
    assert done.wait(10), "a lone writer waited for others that were not coming"
    assert gs.flushes == 1
    gs.close()


def test_devices_on_one_filesystem_share_a_syncer(tmp_path):
    from swiftlite.obj.engine.durability import Syncers
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    s = Syncers()
    assert s.for_device(str(tmp_path / "d1")) is s.for_device(str(tmp_path / "d2"))
    s.close()


@pytest.fixture
def failing_flushes():
    """Fault injection through the durability layer's own hook; off again afterwards."""
    yield durability.set_failing_flushes
    durability.set_failing_flushes(None)


def test_injected_flush_failure_from_the_environment(tmp_path, monkeypatch, failing_flushes):
    """SWIFTLITE_FAIL_FLUSHES (read by configure, as a server does) fails exactly that flush
    with EIO; the flushes around it succeed."""
    monkeypatch.setenv(durability.FAIL_ENV, "2")
    assert durability.configure("batch") == "batch"
    gs = GroupSync(str(tmp_path))
    gs.sync()
    with pytest.raises(OSError) as info:
        gs.sync()
    assert info.value.errno == errno.EIO
    gs.sync()
    assert (gs.flushes, gs.failures) == (3, 1)
    gs.close()


def test_a_failed_flush_fails_its_writer_even_after_a_later_flush_succeeds(tmp_path,
                                                                           failing_flushes):
    """A writer's pages may go out with any flush that ends after its first write (the
    kernel reports a writeback error once, then the next syncfs returns 0). Its own sync
    must fail although the flush it waits for succeeds."""
    gs = GroupSync(str(tmp_path))
    failing_flushes("1")
    since = gs.epoch()  # before the first write of a streamed object
    (tmp_path / "big").write_bytes(os.urandom(1 << 16))
    with pytest.raises(OSError):
        gs.sync()  # someone else's flush: it fails, with our pages in it
    with pytest.raises(OSError) as info:
        gs.sync(since)  # our flush succeeds; the failure it follows still counts
    assert info.value.errno == errno.EIO and gs.flushes == 2
    gs.sync(gs.epoch())  # a write begun after the failure is not held to it
    gs.sync()
    gs.close()


def test_every_waiter_a_failed_flush_covered_sees_the_failure(tmp_path, failing_flushes):
    """Eight writers share one flush (gathered); it fails: each of them raises, none of
    them succeeds, and whoever arrives after it gets the next flush, which succeeds."""
    gs = GroupSync(str(tmp_path), gather=10.0)
    failing_flushes("1")
    n = 8
    inside = threading.Barrier(n)
    outcomes: list[object] = []

    def writer(i: int) -> None:
        with gs.writing():
            inside.wait()
            (tmp_path / f"w{i}").write_bytes(b"x" * 100)
            try:
                gs.sync()
                outcomes.append("ok")
            except OSError as exc:
                outcomes.append(exc.errno)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(8)
    assert outcomes == [errno.EIO] * n and gs.flushes == 1
    gs.sync()
    assert gs.flushes == 2
    gs.close()


def test_failures_are_kept_per_generation_and_bounded(tmp_path, failing_flushes):
    """Many failed flushes: a writer that began before all of them still fails (even once
    the oldest records are dropped), one that began after them does not."""
    gs = GroupSync(str(tmp_path))
    since = gs.epoch()
    count = durability._KEEP_FAILED + 10
    failing_flushes(",".join(str(k) for k in range(1, count + 1)))
    for _ in range(count):
        with pytest.raises(OSError):
            gs.sync()
    assert len(gs._failed) == durability._KEEP_FAILED
    with pytest.raises(OSError):
        gs.sync(since)
    gs.sync(gs.epoch())
    gs.close()
