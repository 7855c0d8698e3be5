"""How many durable small writes can one filesystem take, and how close does the object
engine's committer get? Worker processes write objects to devices that share one
filesystem, the way an object server's workers do on one disk, with no HTTP in the way.

Modes, interleaved round by round at each worker count (A B C, then C B A, ...):

- `ceiling`: the disk's durable-write ceiling for this write pattern, with as little Python
  as possible. Each worker writes `--concurrency` files of `--size` bytes to tmp/, flushes
  the filesystem (syncfs), renames them into place, flushes again, and goes on: the
  sequence every acknowledged swiftlite PUT pays, with no hashing, journal or locks.
- `layout`: `ceiling`, but each object's files go where swiftlite puts them, a hash dir of
  their own (`objects/<part>/<suffix>/<hash>/`, made as needed): the disk's ceiling for
  this on-disk layout, whose directories cost metadata writes of their own.
- `serial`: `BatchCommitter(pipeline=False)`, one batch at a time (write, flush, rename,
  flush, answer), as before the pipeline.
- `threads2`: `serial` with two committer threads per worker (`commit_threads = 2`): one
  batch's syscalls run while the other's wait on the disk.
- `pipeline`: `BatchCommitter(pipeline=True)`: batch n+1 is written while
  batch n's flush runs, and one flush covers batch n's renames and batch n+1's data.

In the committer modes each worker runs `--concurrency` PUTs at once, each writing one body
to `--replicas` of `--devices` device directories (as one object server writes a grouped
PUT), and counts the PUTs answered. Figures: objects/s (PUTs), files/s (objects times
replicas) and flushes per second, summed over the workers.

    .venv/bin/python loadtests/bench_commit.py [--workers 1,2,4,8,16] [--seconds 5] \\
        [--rounds 2] [--size 64k] [--replicas 3] [--devices 4] [--concurrency 32] \\
        [--modes ceiling,layout,serial,threads2,pipeline] [--root DIR]

`--root` must be on the disk to measure (default: a temp dir under the current directory;
tmpfs makes every flush free and the figures meaningless, which the output says).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from swiftlite.common.config import parse_size  # noqa: E402
from swiftlite.obj.engine import durability, writing
from swiftlite.obj.engine.batch_commit import BatchCommitter  # noqa: E402

MODES = ("ceiling", "layout", "serial", "threads2", "pipeline")


def fs_type(path: str) -> str:
    try:
        out = subprocess.run(["df", "-T", path], capture_output=True, text=True, timeout=10)
        return out.stdout.splitlines()[-1].split()[1]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


def _ceiling(devs: list[str], n: int, size: int, conc: int, replicas: int,
             deadline: float, layout: bool = False) -> tuple[int, int]:
    """Write, flush, rename, flush, `conc` objects (of `replicas` files) at a time; with
    `layout`, each into a hash dir of its own."""
    body = os.urandom(size)
    fd_root = os.open(devs[0], os.O_RDONLY | os.O_DIRECTORY)
    done = flushes = 0
    k = 0
    try:
        while time.monotonic() < deadline:
            moves = []
            for _ in range(conc):
                k += 1
                for r in range(replicas):
                    dev = devs[(k + r) % len(devs)]
                    tmp = os.path.join(dev, "tmp", f"w{n}-{k}-{r}")
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    os.write(fd, body)
                    os.close(fd)
                    if layout:
                        h = hashlib.md5(f"w{n}-{k}".encode()).hexdigest()
                        final = os.path.join(dev, "objects", str(int(h[:4], 16) % 64),
                                             h[-3:], h)
                    else:
                        final = os.path.join(dev, "objects", f"w{n}", f"{k % 4096:03x}")
                    moves.append((tmp, final))
            durability.syncfs(fd_root)
            for tmp, final in moves:
                try:
                    os.rename(tmp, os.path.join(final, os.path.basename(tmp)))
                except FileNotFoundError:
                    os.makedirs(final, exist_ok=True)
                    os.rename(tmp, os.path.join(final, os.path.basename(tmp)))
            durability.syncfs(fd_root)
            flushes += 2
            done += conc
    finally:
        os.close(fd_root)
    return done, flushes


async def _committer(devs: list[str], n: int, size: int, conc: int, replicas: int,
                     deadline: float, pipeline: bool, threads: int = 1) -> tuple[int, int]:
    committer = BatchCommitter(threads=threads, pipeline=pipeline)
    body = os.urandom(size)
    etag = hashlib.md5(body).hexdigest()
    syncer = durability.SYNCERS.for_device(devs[0])
    before = syncer.flushes
    done = [0]
    counter = [0]

    async def client() -> None:
        while time.monotonic() < deadline:
            counter[0] += 1
            h = hashlib.md5(f"w{n}-{counter[0]}".encode()).hexdigest()
            first = int(h[:4], 16)
            writers = [writing.DataWriter(devs[(first + r) % len(devs)], first % 64, h)
                       for r in range(replicas)]
            ts = f"{time.time():016.5f}"
            _, results = await committer.put(writers, [body], {"name": f"/a/c/{h}"}, ts,
                                             etag)
            bad = [r for r in results if isinstance(r, BaseException)]
            if bad:
                raise bad[0]
            done[0] += 1

    await asyncio.gather(*(client() for _ in range(conc)))
    return done[0], syncer.flushes - before


def _worker(mode: str, devs: list[str], n: int, args, barrier, out) -> None:
    durability.configure("batch")
    barrier.wait()
    deadline = time.monotonic() + args.seconds
    if mode in ("ceiling", "layout"):
        res = _ceiling(devs, n, args.size, args.concurrency, args.replicas, deadline,
                       mode == "layout")
    else:
        try:
            import uvloop
            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        res = runner(_committer(devs, n, args.size, args.concurrency, args.replicas, deadline,
                                mode == "pipeline", 2 if mode == "threads2" else 1))
    out.put(res)


def run_one(mode: str, workers: int, args, root: str) -> dict[str, float]:
    base = tempfile.mkdtemp(prefix=f"{mode}-", dir=root)
    devs = []
    for d in range(args.devices):
        dev = os.path.join(base, f"d{d}")
        os.makedirs(os.path.join(dev, "tmp"))
        os.makedirs(os.path.join(dev, "objects"))
        devs.append(dev)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(mode, devs, n, args, barrier, out))
             for n in range(workers)]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.monotonic()
    results = [out.get(timeout=args.seconds + 120) for _ in procs]
    secs = max(time.monotonic() - t0, args.seconds)
    for p in procs:
        p.join()
    shutil.rmtree(base, ignore_errors=True)
    objects = sum(r[0] for r in results)
    flushes = sum(r[1] for r in results)
    return {"objects/s": objects / secs, "files/s": objects * args.replicas / secs,
            "flushes/s": flushes / secs, "objects/flush": objects / max(flushes, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", default="64k")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=32, help="PUTs in flight per worker")
    ap.add_argument("--root", default=None, help="a directory on the disk to measure")
    args = ap.parse_args()
    args.size = parse_size(args.size)
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}")
    root = tempfile.mkdtemp(prefix="bench-commit-", dir=args.root or os.getcwd())
    fs = fs_type(root)
    print(f"# bench_commit: size={args.size} replicas={args.replicas} devices={args.devices} "
          f"concurrency={args.concurrency}/worker seconds={args.seconds} rounds={args.rounds} "
          f"root={root} ({fs}) cpus={os.cpu_count()}", flush=True)
    if fs == "tmpfs":
        print("# warning: tmpfs: flushes cost nothing here; measure on a disk (--root)")
    try:
        rows = []
        for workers in [int(w) for w in args.workers.split(",") if w]:
            got: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for rnd in range(args.rounds):
                for mode in modes if rnd % 2 == 0 else modes[::-1]:
                    got[mode].append(run_one(mode, workers, args, root))
            for mode in modes:
                med = {k: statistics.median(r[k] for r in got[mode]) for k in got[mode][0]}
                rows.append((workers, mode, med))
                print(f"workers={workers:<3} {mode:<9} " + "  ".join(
                    f"{k}={v:,.1f}" for k, v in med.items()), flush=True)
        ratios = [m for m in ("threads2", "pipeline") if m in modes and "serial" in modes]
        print("\n| workers | " + " | ".join(f"{m} objects/s" for m in modes)
              + "".join(f" | {m}/serial" for m in ratios) + " |")
        print("|---:|" + "---:|" * (len(modes) + len(ratios)))
        for workers in sorted({w for w, _, _ in rows}):
            by = {m: r for w, m, r in rows if w == workers}
            print(f"| {workers} | " + " | ".join(f"{by[m]['objects/s']:,.0f}" for m in modes)
                  + "".join(f" | {by[m]['objects/s'] / max(by['serial']['objects/s'], 1e-9):.2f}x"
                            for m in ratios) + " |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
