#!/usr/bin/env python3
"""Container updates per second with the container DBs on a separate fast device
(`meta_devices` on tmpfs, standing in for an SSD) against DBs on the same disk as the objects.

    .venv/bin/python loadtests/bench_meta_devices.py [--seconds 10] [--repeats 3] \\
        [--concurrency 32] [--size 100] [--root /tmp/bench-meta] [--tmpfs /dev/shm]
        [--modes proxy,direct,journal] [--warmup 3]

Three all-in-one clusters (`swiftlite up`, one node, --devices object devices, 3 replicas,
daemons off) run side by side:

- `same-disk`:  DBs on the object devices (no meta_devices), everything under --root;
- `meta-tmpfs`: `--meta-devices N` with `<root>/meta` on tmpfs (--tmpfs);
- `meta-disk`:  `--meta-devices N` on the same disk as the objects (a control: separate
  devices roots, same filesystem, so any gain of `meta-tmpfs` is the device's, not the
  layout's).

Two measurements, each interleaved across the configurations (the order rotates every
repeat), --repeats times; the medians are printed:

- `proxy`: object PUTs of --size bytes into one fresh container per run through the proxy,
  --concurrency at a time for --seconds. Each PUT makes three object replicas and each
  object server sends one container update to its container replica, so the container DBs
  commit three rows per PUT while the object writes flush the same disk. "DB rows/s" counts
  the rows found in the container's three DB replicas after the run, divided by the run
  time; updates not committed in time became async_pendings (printed).
- `direct`: container-server PUTs of object rows straight to one container replica (signed
  backend requests, as an object server sends them), --direct-concurrency at a time for
  --seconds, no object I/O: the DB group commit rate alone.

- `journal` (only when asked: `--modes journal`): should the object servers' digest
  journals (`hashes.journal` per partition, obj/engine/digests.py) move to the fast device too?
  No servers: tiny objects through the object server's batch write path in this process
  (`put_batch`, 32 objects x 3 devices, two syncfs per batch; journals folded past
  FOLD_BYTES as the server does), with the journals and digest files beside the objects
  (`journals-disk`) or redirected to tmpfs (`journals-tmpfs`: what a `journal_devices`
  option would do).

The configuration, fsync latency of both filesystems, and every run are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import os
import secrets
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from urllib.parse import quote

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtests.bench import Config, Endpoint, PhaseStats, Workload, run_chunk  # noqa: E402
from loadtests.bench import setup_endpoint as bench_setup_endpoint  # noqa: E402
from loadtests.up import start_cluster, stop_cluster  # noqa: E402
from swiftlite.common import signing  # noqa: E402
from swiftlite.common.config import load_sections  # noqa: E402
from swiftlite.common.hashing import hash_path, partition_of  # noqa: E402
from swiftlite.common.timestamp import Timestamp  # noqa: E402
from swiftlite.container.broker import ContainerBroker  # noqa: E402
from swiftlite.db.paths import db_file  # noqa: E402
from swiftlite.obj.engine import batch_commit, digests, hashdir, writing
from swiftlite.ring import Ring  # noqa: E402

CONFIGS = ("same-disk", "meta-tmpfs", "meta-disk")
USER, KEY, ACCOUNT = "test:tester", "testing", "AUTH_test"


def fsync_ms(directory: str, n: int = 200) -> float:
    """Median milliseconds of a 4 KiB append + fsync in `directory`."""
    path = os.path.join(directory, f".fsync-{uuid.uuid4().hex[:6]}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(times) * 1000


def up_args(name: str, args: argparse.Namespace) -> list[str]:
    base = ["--devices", str(args.devices), "--replicas", "3", "--part-power", "8"]
    if args.workers:
        base += ["--workers", str(args.workers)]
    return base if name == "same-disk" else base + ["--meta-devices", str(args.meta_devices)]


class Target:
    """One running cluster of the comparison."""

    def __init__(self, name: str, args: argparse.Namespace, tmpfs_dir: str) -> None:
        self.name = name
        root = os.path.join(args.root, name)
        os.makedirs(root)
        if name == "meta-tmpfs":
            # `up --meta-devices` lays its DB devices out under <root>/meta: put that on tmpfs.
            os.symlink(tmpfs_dir, os.path.join(root, "meta"))
        self.proc, self.info = start_cluster(root, up_args(name, args))
        self.node = self.info["nodes"][0]
        self.db_root = self.node.get("meta_devices_root") or self.node["devices_root"]

    def db_paths(self, container: str) -> list[str]:
        """Its container's three DB replicas (this cluster's [hash] affixes and ring)."""
        load_sections(self.node["conf"])
        ring = Ring.load(os.path.join(self.info["etc_dir"], "container.ring.gz"))
        part, nodes = ring.get_nodes(ACCOUNT, container)
        return [db_file(self.db_root, n["device"], "container", part, ACCOUNT, container)
                for n in nodes]

    def committed_rows(self, container: str) -> int:
        total = 0
        for path in self.db_paths(container):
            if os.path.exists(path):
                broker = ContainerBroker(path)
                total += broker.get_info()["object_count"]
                broker.close()
        return total

    def async_pendings(self) -> int:
        n = 0
        for root in {self.node["devices_root"], self.db_root}:
            for top in glob.glob(os.path.join(root, "*", "async_pending*")):
                n += sum(len(files) for _, _, files in os.walk(top))
        return n

    def stop(self) -> None:
        stop_cluster(self.proc)


async def proxy_run(t: Target, args: argparse.Namespace) -> dict[str, float]:
    container = f"meta-{uuid.uuid4().hex[:8]}"
    cfg = Config(url=t.info["proxy"]["auth_url"], user=USER, key=KEY, size=str(args.size),
                 count=1_000_000, concurrency=args.concurrency, phases=("put",),
                 container=container)
    ep = Endpoint(t.name, cfg.url, USER, KEY, container)
    await bench_setup_endpoint(ep, cfg)
    pending0 = t.async_pendings()
    try:
        await run_chunk(ep, Workload(cfg), "put", list(range(cfg.count)), cfg.concurrency,
                        args.seconds)
    finally:
        assert ep.session is not None
        await ep.session.close()
    st: PhaseStats = ep.stats["put"]
    s = st.summary()
    rows = t.committed_rows(container)
    return {"put_s": s["ops_s"], "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"],
            "errors": st.errors, "db_rows_s": rows / st.secs,
            "pending": t.async_pendings() - pending0}


async def direct_run(t: Target, args: argparse.Namespace) -> dict[str, float]:
    container = f"direct-{uuid.uuid4().hex[:8]}"
    load_sections(t.node["conf"])
    ring = Ring.load(os.path.join(t.info["etc_dir"], "container.ring.gz"))
    part, nodes = ring.get_nodes(ACCOUNT, container)
    node = nodes[0]
    base = f"/{node['device']}/{part}/{ACCOUNT}/{quote(container)}"
    url = f"http://{node['ip']}:{node['port']}"
    signer = signing.require()

    def headers(method: str, path: str, **extra: str) -> dict[str, str]:
        ts = Timestamp.now().internal
        return {"X-Timestamp": ts, signing.HEADER: signer.sign(method, path, ts), **extra}

    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            limit=args.direct_concurrency)) as http:
        async with http.put(url + base, headers=headers("PUT", base)) as r:
            assert r.status in (201, 202), r.status
        end = time.perf_counter() + args.seconds
        t0 = time.perf_counter()

        async def worker(w: int) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < end:
                path = f"{base}/w{w:03d}-{i:08d}"
                i += 1
                h = headers("PUT", path, **{"X-Size": "100", "X-Content-Type": "image/jpeg",
                                           "X-Etag": "d41d8cd98f00b204e9800998ecf8427e"})
                async with http.put(url + path, headers=h) as r:
                    await r.read()
                    if r.status != 201:
                        raise SystemExit(f"{t.name}: direct PUT {path}: {r.status}")
                done += 1

        await asyncio.gather(*(worker(w) for w in range(args.direct_concurrency)))
        elapsed = time.perf_counter() - t0
    return {"rows_s": done / elapsed}


def journal_run(t: JournalTarget, args: argparse.Namespace) -> dict[str, float]:
    """Tiny object writes through the object server's batch path (`put_batch`: 32 objects
    x 3 replicas, two syncfs per batch), in this process, for --seconds; a partition's
    journal is folded once past FOLD_BYTES, as the server does in the background."""
    with t.journals():
        body = [b"x" * args.size]
        done = batches = 0
        end = time.perf_counter() + args.seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            ts = Timestamp.now()
            jobs = []
            for _ in range(batch_commit.MAX_JOBS):
                name = f"o-{uuid.uuid4().hex}"
                h = hash_path(ACCOUNT, "journal", name)
                part = partition_of(h, 8)
                jobs.append(batch_commit.Job(
                    [writing.DataWriter(d, part, h) for d in t.devices], body,
                    {"Content-Type": "x/y", "name": f"/{ACCOUNT}/journal/{name}"},
                    ts.internal))
            batch_commit.put_batch(jobs)
            for job in jobs:
                for w, r in zip(job.writers, job.results, strict=True):
                    if not isinstance(r, hashdir.CommitResult):
                        raise SystemExit(f"journal run: write failed: {r!r}")
                    if r.journal_size > digests.FOLD_BYTES:
                        digests.fold(w.device_path, w.part)
            done += len(jobs)
            batches += 1
        elapsed = time.perf_counter() - t0
        # A journaled write's own share: open, shared flock, one append, close.
        n = 5000
        j0 = time.perf_counter()
        for i in range(n):
            with digests.journal(t.devices[0], i % 256) as j:
                j.record_delta("abc", i + 1)
        journal_us = (time.perf_counter() - j0) / n * 1e6
    return {"objects_s": done / elapsed, "ms_per_batch": elapsed / batches * 1000,
            "journal_append_us": journal_us}


class JournalTarget:
    """Three object devices on the disk; their digest journals (and digest files) either
    beside the objects, as today, or redirected to tmpfs (what a `journal_devices` option
    would do)."""

    def __init__(self, name: str, root: str, tmpfs_dir: str) -> None:
        self.name = name
        self.devices = [os.path.join(root, f"journal-{name}", f"d{i}") for i in (1, 2, 3)]
        for d in self.devices:
            os.makedirs(d)
        self.journal_root = os.path.join(tmpfs_dir, f"journal-{name}") \
            if name == "journals-tmpfs" else None

    @contextlib.contextmanager
    def journals(self):
        if self.journal_root is None:
            yield
            return
        original = digests._part_dir
        mirror = self.journal_root

        def part_dir(device_path: str, part: int | str) -> str:
            return os.path.join(mirror, os.path.basename(device_path), "objects", str(part))

        digests._part_dir = part_dir  # only this process's journal writes and folds move
        try:
            yield
        finally:
            digests._part_dir = original


def median_of(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


MAIN_KEY = {"proxy": "put_s", "direct": "rows_s", "journal": "objects_s"}
JOURNAL_CONFIGS = ("journals-disk", "journals-tmpfs")


def interleave(modes: list[str], targets: list, repeats: int,
               runner: Callable[[str, object], dict[str, float]]
               ) -> dict[str, dict[str, list[dict[str, float]]]]:
    """Every mode on every target, --repeats times, the target order rotating each repeat."""
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        m: {t.name: [] for t in targets} for m in modes}
    for rep in range(repeats):
        order = targets[rep % len(targets):] + targets[:rep % len(targets)]
        for mode in modes:
            for t in order:
                r = runner(mode, t)
                results[mode][t.name].append(r)
                # The 1-minute load average: other work on the machine skews a run.
                print(f"  repeat {rep + 1} {mode:7s} {t.name:14s} "
                      + " ".join(f"{k}={v:.1f}" for k, v in r.items())
                      + f" load={os.getloadavg()[0]:.1f}", flush=True)
    return results


def report(results: dict[str, dict[str, list[dict[str, float]]]]) -> None:
    for mode, by_target in results.items():
        names = list(by_target)
        keys = list(by_target[names[0]][0])
        print(f"  {mode:14s} " + " ".join(f"{k:>12s}" for k in keys))
        for name in names:
            print(f"  {name:14s} " + " ".join(f"{median_of(by_target[name], k):12.1f}"
                                             for k in keys))
        key = MAIN_KEY[mode]
        base = median_of(by_target[names[0]], key)
        print(f"  {mode} {key}: " + ", ".join(
            f"{n}/{names[0]} {median_of(by_target[n], key) / base:.2f}x" for n in names[1:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/tmp/bench-meta",
                    help="the disk under test (object devices; DBs for same-disk, meta-disk)")
    ap.add_argument("--tmpfs", default="/dev/shm", help="a tmpfs for meta-tmpfs's DBs")
    ap.add_argument("--seconds", type=float, default=10.0, help="per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32, help="proxy PUTs in flight")
    ap.add_argument("--direct-concurrency", type=int, default=64,
                    help="container-server PUTs in flight")
    ap.add_argument("--size", type=int, default=100, help="object body bytes")
    ap.add_argument("--devices", type=int, default=3, help="object devices")
    ap.add_argument("--meta-devices", type=int, default=3, help="DB devices (meta-*)")
    ap.add_argument("--workers", type=int, default=0,
                    help="proxy and object server workers (default: swiftlite up's: CPUs)")
    ap.add_argument("--modes", default="proxy,direct",
                    help="proxy, direct (clusters) and journal (in-process), comma-separated")
    ap.add_argument("--warmup", type=float, default=3.0,
                    help="seconds of proxy PUTs per cluster before the runs (not counted)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MAIN_KEY)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")

    # Every cluster of the run and this process share one backend secret (direct runs sign).
    os.environ.setdefault(signing.ENV, secrets.token_urlsafe(32))
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    tmpfs_dir = os.path.join(args.tmpfs, f"swiftlite-bench-meta-{os.getpid()}")
    os.makedirs(tmpfs_dir)
    print(f"bench_meta_devices: {args.repeats} repeats x {args.seconds:.0f}s per run, "
          f"modes {','.join(modes)}; {os.cpu_count()} CPUs\n"
          f"  clusters: 1 node, {args.devices} object devices, 3 replicas, part power 8, "
          f"workers {args.workers or 'CPUs'}, daemons off, db_synchronous FULL (default)\n"
          f"  same-disk: DBs on the object devices under {args.root}\n"
          f"  meta-tmpfs: {args.meta_devices} meta devices on {tmpfs_dir}\n"
          f"  meta-disk: {args.meta_devices} meta devices under {args.root} (control)\n"
          f"  proxy: {args.size}-byte object PUTs, concurrency {args.concurrency}; "
          f"direct: container-server row PUTs, concurrency {args.direct_concurrency}; "
          f"journal: {args.size}-byte objects x 3 devices in batches of "
          f"{batch_commit.MAX_JOBS}, in-process\n"
          f"  4 KiB append+fsync: disk {fsync_ms(args.root):.3f} ms, "
          f"tmpfs {fsync_ms(tmpfs_dir):.3f} ms", flush=True)
    results = {}
    cluster_modes = [m for m in modes if m != "journal"]
    targets: list[Target] = []
    try:
        if cluster_modes:
            for name in CONFIGS:
                targets.append(Target(name, args, tmpfs_dir))
            warm = argparse.Namespace(**{**vars(args), "seconds": args.warmup})
            for t in targets:  # first requests pay for imports, connections, DB creation
                asyncio.run(proxy_run(t, warm))
            results.update(interleave(cluster_modes, targets, args.repeats, lambda m, t: (
                asyncio.run(proxy_run(t, args) if m == "proxy" else direct_run(t, args)))))
        if "journal" in modes:
            jt = [JournalTarget(n, args.root, tmpfs_dir) for n in JOURNAL_CONFIGS]
            results.update(interleave(["journal"], jt, args.repeats,
                                      lambda m, t: journal_run(t, args)))
    finally:
        for t in targets:
            t.stop()
        shutil.rmtree(tmpfs_dir, ignore_errors=True)
        shutil.rmtree(args.root, ignore_errors=True)
    print("\nmedians:")
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
