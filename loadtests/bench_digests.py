"""Does a write or a REPLICATE cost more as the store grows? (It should not.)

Grows one device of a part-power-6 store (64 partitions) to each size in --sizes, and at each
size measures, against a real object server process:
- the rate of fsynced PUTs over HTTP (--put-sample objects, --concurrency clients),
- REPLICATE latency (every partition's digests, no suffix listing; p50 and p99 over the
  partitions), REPLICATE with a 4-suffix list (the replicator's per-differing-suffix cost;
  it also folds the journal), and REPLICATE again once the journals are folded,
- the object server's CPU (user + system, ms) per PUT and per folded REPLICATE, which a
  busy shared machine disturbs much less than wall-clock figures,
- beside it, recomputing every suffix digest by listing directories (what Swift pays when
  its hashes are invalidated), checked equal to what REPLICATE answered.
The store is filled in-process without fsync (fast) through the same journaled write path.

    .venv/bin/python loadtests/bench_digests.py --sizes 10000,100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp  # noqa: E402
import msgpack  # noqa: E402

from swiftlite.common.hashing import hash_path, partition_of  # noqa: E402
from swiftlite.common.timestamp import Timestamp  # noqa: E402
from swiftlite.obj.engine import digests, writing
from tests.helpers import ServerProcess, free_port  # noqa: E402


def fill(dev: str, start: int, end: int, part_power: int, body: bytes) -> None:
    md = {"Content-Type": "application/octet-stream"}
    t0 = int(time.time() * 100000) - 10**8  # older than anything the measured PUTs send
    for i in range(start, end):
        name = f"fill-{i}"
        h = hash_path("a", "c", name)
        w = writing.DataWriter(dev, partition_of(h, part_power), h, fsync=False)
        w.put([body], dict(md, name=f"/a/c/{name}"), Timestamp(t0 + i).internal)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process: steadier than wall time on a shared machine."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill_parallel(dev: str, start: int, end: int, part_power: int, body: bytes,
                  procs: int) -> None:
    step = max(1, (end - start) // (procs * 8))
    with ProcessPoolExecutor(procs) as ex:
        futs = [ex.submit(fill, dev, a, min(a + step, end), part_power, body)
                for a in range(start, end, step)]
        for f in futs:
            f.result()


async def put_rate(base: str, n: int, conc: int, size: int, part_power: int, tag: str) -> float:
    body = os.urandom(size)
    todo = iter(range(n))

    async def worker(s: aiohttp.ClientSession) -> None:
        for i in todo:
            name = f"put-{tag}-{i}"
            part = partition_of(hash_path("a", "c", name), part_power)
            async with s.put(f"{base}/sda/{part}/a/c/{name}", data=body,
                             headers={"X-Timestamp": Timestamp.now().internal}) as r:
                await r.read()
                assert r.status == 201, r.status

    async with aiohttp.ClientSession() as s:
        t = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(conc)))
        return n / (time.perf_counter() - t)


async def replicate_all(base: str, parts: int, suffixes: bool = False
                        ) -> tuple[list[float], dict[int, dict]]:
    lat = []
    got = {}
    async with aiohttp.ClientSession() as s:
        for p in range(parts):
            path = f"{base}/sda/{p}/digests"  # MERGE .../digests: Swift's REPLICATE
            if suffixes:
                path += "/000-001-002-003"  # a replicator's typical handful of differing ones
            t = time.perf_counter()
            async with s.request("MERGE", path) as r:
                raw = await r.read()
            lat.append(time.perf_counter() - t)  # the answer, not our decoding of it
            got[p] = msgpack.unpackb(raw)
    return lat, got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--part-power", type=int, default=6)
    ap.add_argument("--put-sample", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--put-size", type=int, default=4096)
    ap.add_argument("--fill-size", type=int, default=256)
    ap.add_argument("--fill-procs", type=int, default=4)
    ap.add_argument("--root", default=None, help="work dir (default: a temp dir, removed)")
    ap.add_argument("--start", type=int, default=0,
                    help="objects already stored under --root by an earlier run (not refilled)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    parts = 2 ** args.part_power
    root = args.root or tempfile.mkdtemp(prefix="bench-digests-")
    devices = os.path.join(root, "devices")
    dev = os.path.join(devices, "sda")
    os.makedirs(dev, exist_ok=True)
    conf = os.path.join(root, "object-server.conf")
    with open(conf, "w") as f:
        f.write(f"[DEFAULT]\ndevices = {devices}\n[object-server]\nio_threads = 8\n"
                "log_level = WARNING\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"config: part_power={args.part_power} ({parts} partitions, 4096 suffixes each), "
          f"1 device, fill objects {args.fill_size} B (no fsync), measured PUTs "
          f"{args.put_sample} x {args.put_size} B fsynced at c={args.concurrency}, "
          f"1 object-server worker, root={root}")
    print(f"{'objects':>9} {'fill/s':>8} {'PUT/s':>7} {'PUT cpu':>8} {'REPL ms p50':>11} "
          f"{'p99':>6} "
          f"{'REPL+4suf ms':>12} {'REPL folded':>11} {'REPL cpu':>9} {'recompute all s':>15} "
          f"{'per part ms':>11}")
    proc = ServerProcess("object", conf, port).start()
    stored = args.start
    try:
        for target in sizes:
            t = time.perf_counter()
            if target > stored:
                fill_parallel(dev, stored, target, args.part_power, b"f" * args.fill_size,
                              args.fill_procs)
            os.sync()  # measure from a clean page cache, not against the fill's writeback
            fill_rate = (target - stored) / max(time.perf_counter() - t, 1e-9)
            stored = target
            c0 = cpu_seconds(proc.proc.pid)
            rate = asyncio.run(put_rate(base, args.put_sample, args.concurrency, args.put_size,
                                        args.part_power, str(target)))
            put_cpu = (cpu_seconds(proc.proc.pid) - c0) / args.put_sample
            stored += args.put_sample
            lat, got = asyncio.run(replicate_all(base, parts))
            lat_s, _ = asyncio.run(replicate_all(base, parts, suffixes=True))
            c0 = cpu_seconds(proc.proc.pid)
            lat_f, _ = asyncio.run(replicate_all(base, parts))  # journals now folded
            repl_cpu = (cpu_seconds(proc.proc.pid) - c0) / parts
            t = time.perf_counter()
            full = {p: digests.recompute(dev, p) for p in range(parts)}
            recompute = time.perf_counter() - t
            assert got == full, "REPLICATE digests differ from a full recompute"
            lat.sort()
            print(f"{stored:>9} {fill_rate:>8.0f} {rate:>7.0f} {put_cpu * 1000:>8.2f} "
                  f"{statistics.median(lat) * 1000:>11.2f} "
                  f"{lat[int(len(lat) * 0.99) - 1] * 1000:>6.2f} "
                  f"{statistics.median(lat_s) * 1000:>12.2f} "
                  f"{statistics.median(lat_f) * 1000:>11.2f} {repl_cpu * 1000:>9.2f} "
                  f"{recompute:>15.2f} "
                  f"{recompute / parts * 1000:>11.1f}", flush=True)
    finally:
        proc.stop()
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
