"""Four storage hosts and a proxy, each on its own loopback address with the same ports, as on
real machines: a hung host, a fifth host added, a host removed and a disk replaced, all under a
steady read and write load during which no acknowledged object may be unreadable.

The scenarios run in order on one cluster (module fixture): each starts from where the last
left the rings and the data, as an operator's week would.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass, field

import pytest

from tests.helpers import wait_for
from tests.multihost import MultiHost, host_ip, start_multihost

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multihost")]

NODE_TIMEOUT = 2.0
# What a client may wait beyond the proxy's node timeout: a handoff's answer, the proxy's
# own work, a loaded 2-core CI machine.
MARGIN = 2.0
ACCOUNT = "AUTH_test"
CONTAINER = "imgs"


def body(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest() * 64  # 2 KiB, derived from the name


@dataclass
class Load:
    """A writer and a reader through the proxy: the writer PUTs new objects, the reader GETs
    acknowledged ones at random. Every acknowledged object must read back whole, always."""

    mh: MultiHost
    acked: list[str] = field(default_factory=list)
    write_failures: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    latencies: list[tuple[str, float]] = field(default_factory=list)
    reads: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seq = 0
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True)
                         for w in (self._write, self._read)]

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self.acked), self.reads

    def mark(self) -> tuple[int, int]:
        """Where the load is now; `since(mark)` tells how much ran after."""
        return self.counts()

    def since(self, mark: tuple[int, int], writes: int, reads: int) -> bool:
        w, r = self.counts()
        return w - mark[0] >= writes and r - mark[1] >= reads

    def _run(self, step) -> None:
        conn = self.mh.connection(timeout=NODE_TIMEOUT + 30)
        while not self._stop.is_set():
            step(conn)

    def _write(self, conn) -> None:
        with self._lock:
            self._seq += 1
            name = f"load-{self._seq:06d}"
        start = time.monotonic()
        try:
            conn.put_object(CONTAINER, name, body(name))
        except Exception as exc:  # not acknowledged: allowed, but counted and reported
            self.write_failures.append(f"{name}: {exc!r}"[:200])
            return
        finally:
            self.latencies.append(("PUT", time.monotonic() - start))
        with self._lock:
            self.acked.append(name)

    def _read(self, conn) -> None:
        with self._lock:
            if not self.acked:
                name = None
            else:
                name = random.choice(self.acked)
        if name is None:
            self._stop.wait(0.05)
            return
        start = time.monotonic()
        try:
            _, got = conn.get_object(CONTAINER, name)
            if got != body(name):
                self.unreadable.append(f"{name}: wrong bytes")
        except Exception as exc:
            self.unreadable.append(f"{name}: {exc!r}"[:200])
        finally:
            self.latencies.append(("GET", time.monotonic() - start))
            with self._lock:
                self.reads += 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # 64 partitions a ring (part power 6): every host still holds some of each ring, and a
    # drain or refill moves a quarter of what part power 8 moved (the suite's longest tests).
    mh = start_multihost(str(tmp_path_factory.mktemp("multihost")), hosts=4,
                         node_timeout=NODE_TIMEOUT, part_power=6)
    conn = mh.connection()
    conn.put_container(CONTAINER)
    seeded = [f"seed-{i:04d}" for i in range(150)]
    for name in seeded:
        conn.put_object(CONTAINER, name, body(name))
    mh.seeded = seeded  # type: ignore[attr-defined]
    yield mh
    mh.stop()


def report_latency(what: str, samples: list[tuple[str, float]]) -> None:
    """Print what clients saw (pytest -s shows it; the closing figures come from here)."""
    for method in ("PUT", "GET"):
        ts = sorted(t for m, t in samples if m == method)
        if ts:
            print(f"\n{what}: {method} n={len(ts)} p50={ts[len(ts) // 2]:.3f}s "
                  f"p99={ts[int(len(ts) * 0.99)]:.3f}s max={ts[-1]:.3f}s")


def all_readable(mh: MultiHost, names: list[str]) -> None:
    conn = mh.connection()
    bad = []
    for name in names:
        try:
            if conn.get_object(CONTAINER, name)[1] != body(name):
                bad.append(name)
        except Exception as exc:
            bad.append(f"{name}: {exc!r}")
    assert not bad, f"{len(bad)} acknowledged objects unreadable: {bad[:5]}"


def fully_replicated(mh: MultiHost, names: list[str]) -> list[str]:
    """Names whose primaries (per the current ring) do not all hold the object yet."""
    return [n for n in names if mh.replicas_in_place(ACCOUNT, CONTAINER, n) < mh.replicas]


def settled(mh: MultiHost, names: list[str]) -> bool:
    """Every object on all its primaries and no host holding partitions not its own."""
    return not any(mh.misplaced(kind) for kind in ("object", "container", "account")) \
        and not fully_replicated(mh, names)


def check_after(mh: MultiHost, load: Load) -> None:
    """After a scenario: no acknowledged object was ever unreadable, and every object, old
    and new, is on all its primaries and reads back; the next scenario expects them all."""
    assert not load.unreadable, load.unreadable[:5]
    names = mh.seeded + load.acked  # type: ignore[attr-defined]
    assert not fully_replicated(mh, names)
    all_readable(mh, names)
    mh.seeded = names  # type: ignore[attr-defined]


def test_hung_host_bounded_latency_then_handoffs_revert(cluster):
    mh = cluster
    load = Load(mh).start()
    try:
        wait_for(lambda: load.since((0, 0), 10, 10), 60, what="load to run")
        before = len(load.latencies)
        pids = mh.hang_host(2)
        mark = load.mark()
        wait_for(lambda: load.since(mark, 40, 40), 120, what="load while host2 hangs")
        during = load.latencies[before:]
        # Writes meant for host2 went to handoffs: other hosts hold partitions not theirs.
        handoffs = mh.misplaced("object")
        mh.resume_host(pids)
        mark = load.mark()
        wait_for(lambda: load.since(mark, 20, 20), 60, what="load after host2 resumed")
    finally:
        load.stop()
    report_latency("while host2 hangs", during)
    slowest = max(t for _, t in during)
    assert slowest < NODE_TIMEOUT + MARGIN, sorted(during, key=lambda x: -x[1])[:5]
    # The proxy noticed: host2's devices were error limited, so writes went to handoffs
    # without waiting on it.
    with open(os.path.join(mh.proxy_root, "logs", "proxy-server.log")) as f:
        limited = [line for line in f if "error limited" in line]
    assert any(f"node {host_ip(2)}:" in line for line in limited), limited
    assert not load.write_failures, load.write_failures[:5]
    assert handoffs and 2 not in handoffs, handoffs
    # Once host2 answers again, its replicas come home and the handoff copies go.
    wait_for(lambda: settled(mh, mh.seeded + load.acked), 120,  # type: ignore[attr-defined]
             interval=0.5, what="handoffs to revert")
    check_after(mh, load)


def test_add_fifth_host_under_load(cluster):
    mh = cluster
    load = Load(mh).start()
    try:
        wait_for(lambda: load.since((0, 0), 10, 10), 60, what="load to run")
        mh.add_host(5)
        mh.start_host(5)
        mh.wait_host(5)
        before = {n: mh.assigned_parts(n) for n in (1, 2, 3, 4)}
        mh.rebalance()
        mh.push_rings()
        moved = {n: {p for d, ps in before[n].items()
                     for p in ps - mh.assigned_parts(n).get(d, set())} for n in before}
        assert sum(map(len, moved.values())) > 0 and any(mh.assigned_parts(5).values())
        names = mh.seeded + load.acked  # type: ignore[attr-defined]
        wait_for(lambda: settled(mh, names), 180, interval=0.5, what="partitions to move")
        mark = load.mark()
        wait_for(lambda: load.since(mark, 10, 10), 60, what="load after the move")
    finally:
        load.stop()
    check_after(mh, load)
    # The moved partitions left their old hosts: nothing misplaced anywhere.
    assert not mh.misplaced("object")
    assert any(mh.parts_on(5).values()), "host5 received no partitions"


def test_remove_host_under_load(cluster):
    mh = cluster
    load = Load(mh).start()
    try:
        wait_for(lambda: load.since((0, 0), 10, 10), 60, what="load to run")
        # Drain first (weight 0: its partitions go elsewhere, it still serves until empty),
        # then take its devices out of the rings and the host out of service.
        for kind in ("object", "container", "account"):
            mh.ring_builder(kind, "set_weight", "127.0.0.2", "0")
        mh.rebalance()
        mh.push_rings()
        wait_for(lambda: not any(any(mh.parts_on(1, k).values())
                                 for k in ("object", "container", "account")),
                 180, interval=0.5, what="host1 to drain")
        for kind in ("object", "container", "account"):
            mh.ring_builder(kind, "remove", "127.0.0.2")
        mh.rebalance()
        mh.push_rings()
        mark = load.mark()
        wait_for(lambda: load.since(mark, 10, 10), 60, what="load after the ring change")
        mh.stop_host(1)
        del mh.hosts[1]
        mark = load.mark()
        wait_for(lambda: load.since(mark, 10, 10), 60, what="load without host1")
        names = mh.seeded + load.acked  # type: ignore[attr-defined]
        wait_for(lambda: settled(mh, names), 180, interval=0.5, what="replicas in place")
    finally:
        load.stop()
    check_after(mh, load)


def test_replaced_disk_refills_from_peers(cluster):
    mh = cluster
    host = mh.hosts[3]
    dev = host.devices[0]
    expected = mh.assigned_parts(3)[dev] & set().union(
        *(ps for n in mh.hosts if n != 3 for ps in mh.parts_on(n).values()))
    assert expected
    # A failed disk swapped for an empty one: the host is down while the disk is changed.
    mh.stop_host(3)
    shutil.rmtree(f"{host.devices_root}/{dev}")
    os.makedirs(f"{host.devices_root}/{dev}")
    mh.start_host(3)
    mh.wait_host(3)
    names = mh.seeded  # type: ignore[attr-defined]
    all_readable(mh, names)  # the two other replicas serve meanwhile
    wait_for(lambda: expected <= mh.parts_on(3)[dev] and not fully_replicated(mh, names),
             180, interval=0.5, what=f"host3/{dev} to refill")
