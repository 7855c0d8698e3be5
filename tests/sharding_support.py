"""Test support for container sharding: a cluster with a small threshold, the sharder run
as a real process, writers that keep a model of what a container must list."""

from __future__ import annotations

import configparser
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import Any

from tests.cluster import Cluster, start_cluster

THRESHOLD = 2000


def sharding_cluster(root: str, nodes: int = 1, devices: int = 4, batch: int = 200,
                     threshold: int = THRESHOLD) -> Cluster:
    c = start_cluster(root, nodes=nodes, devices=devices, replicas=3, part_power=6,
                      extra_args=["--shard-threshold", str(threshold)])
    for node in c.nodes:
        # shrunk_grace 0: a collapsed root's former shards go on the next pass.
        set_conf(node["conf"], "container-sharder", cleave_batch_size=batch, shrunk_grace=0)
        # Tests run the updater by hand (--once): no waiting on retry back-off.
        set_conf(node["conf"], "object-updater", retry_min=0)
    return c


def set_conf(path: str, section: str, **options: Any) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    if not parser.has_section(section):
        parser.add_section(section)
    for k, v in options.items():
        parser[section][k] = str(v)
    with open(path, "w") as f:
        parser.write(f)


def run_daemon(c: Cluster, daemon: str, index: int = 0, env: dict[str, str] | None = None,
               timeout: float = 120) -> int:
    """One pass of a daemon on a node (`--once`); its exit status (9: the test hook's
    abrupt exit, as a kill -9 would leave things)."""
    node = c.nodes[index]
    log = open(os.path.join(c.root, "logs", f"{node['name']}-{daemon}-once.log"), "ab")
    try:
        return subprocess.run(
            [sys.executable, "-m", "swiftlite.cli", "daemon", daemon, "-c", node["conf"],
             "--once"], stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
            env={**os.environ, **(env or {})}).returncode
    finally:
        log.close()


def shards(c: Cluster, path: str) -> dict[str, Any]:
    """`swiftlite shards --root ROOT PATH --json`."""
    out = subprocess.run([sys.executable, "-m", "swiftlite.cli", "shards", "--root", c.root,
                          path, "--json"], capture_output=True, text=True, timeout=60,
                         check=True)
    return json.loads(out.stdout)


def manual_split(c: Cluster, path: str, rows_per_shard: int) -> None:
    """`swiftlite shards --root ROOT PATH split` (the manual override)."""
    subprocess.run([sys.executable, "-m", "swiftlite.cli", "shards", "--root", c.root, path,
                    "split", "--rows-per-shard", str(rows_per_shard)], check=True,
                   capture_output=True, timeout=60)


def split(c: Cluster, path: str, rows_per_shard: int) -> None:
    """A manual split, then one sharder pass to cleave it."""
    manual_split(c, path, rows_per_shard)
    assert run_daemon(c, "container-sharder") == 0


def converge(c: Cluster) -> None:
    """What the daemons do in time: saved updates replayed, DB replicas synced (rows a
    root replica took before it heard of the shards reach the leader), the sharder's
    forwarding, and the replicas synced again."""
    for daemon in ("object-updater", "container-replicator", "container-sharder",
                   "container-replicator"):
        for i in range(len(c.nodes)):
            assert run_daemon(c, daemon, i) == 0


def put_many(c: Cluster, container: str, names: Iterable[str], threads: int = 12,
             body: bytes = b"x") -> None:
    """PUT every name (retrying failures), from several connections at once."""
    todo = list(names)
    chunks = [todo[i::threads] for i in range(threads)]

    def work(chunk: list[str]) -> None:
        conn = c.connection()
        for name in chunk:
            for attempt in range(5):
                try:
                    conn.put_object(container, name, body)
                    break
                except Exception:
                    if attempt == 4:
                        raise

    run_threads(work, chunks)


def run_threads(fn, args_list: list[Any]) -> None:
    errors: list[BaseException] = []

    def wrap(a: Any) -> None:
        try:
            fn(a)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    ts = [threading.Thread(target=wrap, args=(a,)) for a in args_list]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


class Storm:
    """Writers doing PUTs, overwrites and DELETEs until stopped; each owns its names, so
    the model (name -> size, or absent) is exact however the requests interleave."""

    def __init__(self, c: Cluster, container: str, model: dict[str, int], writers: int = 8,
                 seed: int = 1) -> None:
        self.c = c
        self.container = container
        self.model = model
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.writers = writers
        self.seed = seed
        self.ops = 0
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self) -> Storm:
        for w in range(self.writers):
            t = threading.Thread(target=self._run, args=(w,))
            t.start()
            self.threads.append(t)
        return self

    def _run(self, w: int) -> None:
        rnd = random.Random(self.seed * 1000 + w)
        try:
            conn = self.c.connection()
            with self.lock:  # the other writers are already adding to the model
                names = list(self.model)
            mine = sorted(n for n in names if hash_owner(n, self.writers) == w)
            while not self.stop_event.is_set():
                op = rnd.random()
                if op < 0.4 or not mine:
                    name = f"{rnd.choice('abcdefgh')}/storm-{w}-{rnd.randrange(10**9):09d}"
                    size = rnd.randrange(1, 20)
                    self._retry(conn.put_object, self.container, name, b"s" * size)
                    mine.append(name)
                    with self.lock:
                        self.model[name] = size
                elif op < 0.75:
                    name = mine.pop(rnd.randrange(len(mine)))
                    self._retry(self._delete, conn, name)
                    with self.lock:
                        self.model.pop(name, None)
                else:
                    name = rnd.choice(mine)
                    size = rnd.randrange(1, 20)
                    self._retry(conn.put_object, self.container, name, b"o" * size)
                    with self.lock:
                        self.model[name] = size
                self.ops += 1
        except BaseException as exc:  # noqa: BLE001
            self.errors.append(exc)

    def _delete(self, conn, name: str) -> None:
        from swiftclient import ClientException

        try:
            conn.delete_object(self.container, name)
        except ClientException as exc:
            if exc.http_status != 404:  # a retried DELETE that had landed
                raise

    @staticmethod
    def _retry(fn, *args: Any) -> None:
        for attempt in range(5):
            try:
                fn(*args)
                return
            except Exception:
                if attempt == 4:
                    raise

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join()
        if self.errors:
            raise self.errors[0]


def hash_owner(name: str, writers: int) -> int:
    return sum(name.encode()) % writers


def listing_names(conn, container: str, **kw: Any) -> list[str]:
    _, rows = conn.get_container(container, full_listing=True, **kw)
    return [r.get("name", r.get("subdir")) for r in rows]


def memory_fetch(names: list[str]):
    """A DB's listing fetch over a sorted list of names (the broker's query, in memory), for
    swiftlite.db.listing.walk: the model listings are checked against."""
    from swiftlite.db.listing import Bounds, next_after

    def fetch(b: Bounds, prefix: str | None, limit: int, reverse: bool):
        def ok(n: str) -> bool:
            if b.lo is not None and (n < b.lo or (n == b.lo and not b.lo_incl)):
                return False
            if b.hi is not None and n >= b.hi:
                return False
            if prefix:
                up = next_after(prefix)
                if n < prefix or (up is not None and n >= up):
                    return False
            return True
        rows = [(n, "0000000001.00000", 0, "x", "e") for n in names if ok(n)]
        return (rows[::-1] if reverse else rows)[:limit]
    return fetch


def tiles(ranges: list[dict]) -> bool:
    """Ranges (in order) cover '' to '' with no gap or overlap."""
    bounds = [(r["lower"], r["upper"]) for r in ranges]
    return bool(bounds) and bounds[0][0] == "" and bounds[-1][1] == "" and all(
        a[1] == b[0] and a[1] for a, b in zip(bounds, bounds[1:], strict=False))
