"""Replication cost as the store grows: swiftlite's incremental digests vs listing (Swift's way).

Two object servers (real processes) are the two replicas of a small-part-power ring, so
partitions grow large. At each store size in --sizes (both replicas filled identically,
in-process without fsync, through the same journaled write path) it measures:

- pass: one object-replicator pass with nothing to do (REPLICATE every partition of the peer
  and compare; the real ObjectReplicator), beside Swift's way: re-deriving every suffix hash
  by listing every suffix and hash dir (``digests.recompute``) on both replicas;
- PUT/s over HTTP (--put-sample objects, --concurrency clients) to one server with, in the
  background, (a) nothing, (b) `swiftlite daemon object-replicator` running continuously
  (a pass every --interval s; it also syncs the new PUTs to the peer), (c) the same daemon with
  ``listing_digests = true``: identical syncing, but its own digests derived by listing
  every suffix each pass (Swift's way; the peer's REPLICATE stays incremental, so this
  understates Swift's cost).

    .venv/bin/python loadtests/bench_replication.py --sizes 10000,100000,300000 \\
        --plot loadtests/replication.png
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp  # noqa: E402

from swiftlite.common.config import load_sections  # noqa: E402
from swiftlite.common.hashing import hash_path, partition_of  # noqa: E402
from swiftlite.common.timestamp import Timestamp  # noqa: E402
from swiftlite.obj.engine import digests, writing
from swiftlite.ring import RingData, write_ring  # noqa: E402
from tests.helpers import free_port, healthy, wait_for  # noqa: E402

PY = [sys.executable, "-m", "swiftlite.cli"]


def fill_range(devs: list[str], start: int, end: int, part_power: int, size: int) -> None:
    """Write objects start..end-1 identically (same timestamp and body) on every device."""
    body = os.urandom(size)
    etag = hashlib.md5(body).hexdigest()
    for i in range(start, end):
        name = f"fill-{i:08d}"
        h = hash_path("a", "c", name)
        part = partition_of(h, part_power)
        ts = Timestamp(1_700_000_000_00000 + i).internal
        md = {"name": f"/a/c/{name}", "Content-Type": "image/jpeg"}
        for dev in devs:
            w = writing.DataWriter(dev, part, h, fsync=False)
            w.put([body], md, ts, etag)


def recompute_all(devs: list[str], parts: int) -> int:
    n = 0
    for dev in devs:
        for p in range(parts):
            n += len(digests.recompute(dev, p))
    return n


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = tempfile.mkdtemp(prefix="bench-repl-", dir=args.dir)
        self.pp = args.part_power
        self.parts = 1 << self.pp
        self.ports = [free_port(), free_port()]
        self.devs = [os.path.join(self.root, f"node{i}", "d1") for i in range(2)]
        self.confs = [os.path.join(self.root, f"node{i}.conf") for i in range(2)]
        self.procs: list[subprocess.Popen] = []
        self.filled = 0
        self.put_seq = 0

    def setup(self) -> None:
        devs = []
        for i, port in enumerate(self.ports):
            os.makedirs(self.devs[i])
            devs.append({"id": i, "region": 1, "zone": i + 1, "ip": "127.0.0.1", "port": port,
                         "device": "d1", "weight": 1.0})
            with open(self.confs[i], "w") as f:
                f.write(f"[DEFAULT]\ndevices = {os.path.dirname(self.devs[i])}\n"
                        f"swift_dir = {self.root}\nstatus_dir = {self.root}/run{i}\n"
                        f"log_level = WARNING\n\n[object-server]\nbind_ip = 127.0.0.1\n"
                        f"bind_port = {port}\nfsync = {self.args.fsync}\n\n"
                        f"[object-replicator]\ninterval = {self.args.interval}\nconcurrency = 4\n")
        with open(self.confs[0]) as f:
            text = f.read()
        self.swift_conf = os.path.join(self.root, "node0-swift.conf")
        with open(self.swift_conf, "w") as f:
            f.write(text + "listing_digests = true\n")
        tables = [array("H", [0] * self.parts), array("H", [1] * self.parts)]
        write_ring(os.path.join(self.root, "object.ring.gz"), RingData(self.pp, 2, devs, tables))
        for i, port in enumerate(self.ports):
            log = open(os.path.join(self.root, f"node{i}.log"), "ab")
            self.procs.append(subprocess.Popen(PY + ["server", "object", "-c", self.confs[i]],
                                               stdout=log, stderr=subprocess.STDOUT))
            wait_for(lambda port=port: healthy(port), 30, what="object server")

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def fill_to(self, n: int) -> float:
        t0 = time.monotonic()
        step = 5000
        with ProcessPoolExecutor(self.args.fill_procs) as pool:
            futs = [pool.submit(fill_range, self.devs, s, min(n, s + step), self.pp,
                                self.args.size) for s in range(self.filled, n, step)]
            for f in futs:
                f.result()
        self.filled = n
        for dev in self.devs:  # fold the journals, as a running server does in the background
            for p in range(self.parts):
                digests.fold(dev, p)
        return time.monotonic() - t0

    def replicator_pass(self) -> tuple[float, dict]:
        from swiftlite.common.runtime.daemon import new_stats
        from swiftlite.obj.replicator import ObjectReplicator

        conf = load_sections(self.confs[0])["object-replicator"]

        async def run() -> tuple[float, dict]:
            rep = ObjectReplicator(conf)
            await rep.setup()
            stats = new_stats()
            t0 = time.perf_counter()
            await rep.run_pass(stats)
            dt = time.perf_counter() - t0
            await rep.teardown()
            return dt, stats

        return asyncio.run(run())

    def swift_pass(self) -> float:
        t0 = time.perf_counter()
        recompute_all(self.devs, self.parts)
        return time.perf_counter() - t0

    async def _puts(self) -> float:
        body = os.urandom(self.args.size)
        names = [f"put-{self.put_seq + i:08d}" for i in range(self.args.put_sample)]
        self.put_seq += len(names)
        q: asyncio.Queue[str] = asyncio.Queue()
        for n in names:
            q.put_nowait(n)
        base = f"http://127.0.0.1:{self.ports[0]}/d1"
        conn = aiohttp.TCPConnector(limit=self.args.concurrency)
        async with aiohttp.ClientSession(connector=conn) as s:
            async def worker() -> None:
                while not q.empty():
                    n = q.get_nowait()
                    part = partition_of(hash_path("a", "c", n), self.pp)
                    async with s.put(f"{base}/{part}/a/c/{n}", data=body, headers={
                            "X-Timestamp": Timestamp.now().internal,
                            "Content-Type": "image/jpeg"}) as r:
                        if r.status != 201:
                            raise RuntimeError(f"PUT -> {r.status}")
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))
            return len(names) / (time.perf_counter() - t0)

    def put_rate(self, background: str) -> float:
        proc = None
        if background == "swiftlite":
            proc = subprocess.Popen(PY + ["daemon", "object-replicator", "-c", self.confs[0]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elif background == "swift":
            proc = subprocess.Popen(PY + ["daemon", "object-replicator", "-c", self.swift_conf],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return asyncio.run(self._puts())
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(120)


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["objects"] for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot(xs, [r["put_idle"] for r in results], "o-", label="no replicator")
    a.plot(xs, [r["put_swiftlite"] for r in results], "s-",
           label="swiftlite replicator running")
    a.plot(xs, [r["put_swift"] for r in results], "^-", label="Swift's way (listing) running")
    a.set_xscale("log")
    a.set_xlabel("objects per replica")
    a.set_ylabel("PUT/s (one object server)")
    a.set_ylim(bottom=0)
    a.legend()
    a.set_title("Write throughput as the store grows")
    b.plot(xs, [r["pass_swiftlite"] for r in results], "s-", label="swiftlite: REPLICATE only")
    b.plot(xs, [r["pass_swift"] for r in results], "^-", label="Swift's way: list every suffix")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("objects per replica")
    b.set_ylabel("seconds")
    b.legend()
    b.set_title("Replication pass with nothing to do")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10000,100000,300000")
    p.add_argument("--part-power", type=int, default=2)
    p.add_argument("--size", type=int, default=4096, help="object size in bytes")
    p.add_argument("--put-sample", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--interval", type=float, default=1.0,
                   help="the background replicators' interval between pass starts (s)")
    p.add_argument("--fill-procs", type=int, default=2)
    p.add_argument("--fsync", default="false", help="object servers' fsync setting")
    p.add_argument("--dir", default=None, help="where the temporary store lives")
    p.add_argument("--plot", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    b = Bench(args)
    results = []
    try:
        b.setup()
        print(f"part power {args.part_power} ({b.parts} partitions), 2 replicas, "
              f"{args.size} B objects, PUT sample {args.put_sample} at c={args.concurrency}, "
              f"fsync={args.fsync}, replicator interval {args.interval}s", flush=True)
        print(f"{'objects':>9} {'fill s':>7} {'pass sl s':>9} {'pass swift s':>12} "
              f"{'PUT/s idle':>10} {'PUT/s sl':>9} {'PUT/s swift':>11}", flush=True)
        for n in (int(s) for s in args.sizes.split(",")):
            fill = b.fill_to(n)
            b.replicator_pass()  # settle: sync what earlier PUT samples left behind
            pass_sl, stats = b.replicator_pass()
            assert stats["failures"] == 0 and stats["synced"] == 0, stats
            pass_swift = b.swift_pass()
            r = {"objects": n, "fill_s": round(fill, 1), "pass_swiftlite": round(pass_sl, 4),
                 "pass_swift": round(pass_swift, 3),
                 "put_idle": round(b.put_rate("none"), 1),
                 "put_swiftlite": round(b.put_rate("swiftlite"), 1),
                 "put_swift": round(b.put_rate("swift"), 1)}
            results.append(r)
            print(f"{n:>9} {r['fill_s']:>7} {r['pass_swiftlite']:>9} {r['pass_swift']:>12} "
                  f"{r['put_idle']:>10} {r['put_swiftlite']:>9} {r['put_swift']:>11}",
                  flush=True)
    finally:
        b.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot and results:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
