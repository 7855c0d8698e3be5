"""Does PUT throughput grow with cores? 64 KiB PUT/s and GET/s through one all-in-one node
(`swiftlite up --nodes 1 --devices 4 --workers N --no-daemons`: four devices on one
filesystem, 3 replicas, N proxy and N object-server workers) at each N, in three modes of
the object servers' committers: `serial` (`commit_pipeline = false`: one batch at a time),
`threads2` (`commit_threads = 2`: two such committers per worker) and `pipeline`
(`commit_pipeline = true`).

Several client processes (--clients, each --concurrency requests in flight, aiohttp) PUT
fresh objects for --seconds, then GET what they stored for --seconds; their counts are
summed. Modes take turns at each N (A B C, then C B A, ...).

    .venv/bin/python loadtests/bench_put_workers.py [--workers 1,2,8,16] [--seconds 6] \\
        [--rounds 1] [--clients 4] [--concurrency 16] [--size 64k] \\
        [--modes serial,threads2,pipeline] [--root DIR]

`--root` must be on the disk to measure (default: the current directory's filesystem).
"""

from __future__ import annotations

import argparse
import asyncio
import configparser
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp  # noqa: E402

from loadtests.bench_commit import fs_type  # noqa: E402
from loadtests.up import start_cluster, stop_cluster  # noqa: E402
from swiftlite.common.config import parse_size  # noqa: E402

MODES = ("serial", "threads2", "pipeline")


def set_option(root: str, section: str, key: str, value: str) -> None:
    """Change one option of a stopped root's node config."""
    conf = os.path.join(root, "etc", "node1.conf")
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
    parser.read(conf)
    parser[section][key] = value
    with open(conf, "w") as f:
        parser.write(f)


async def _client(proxy: str, n: int, args, t_put: float, out) -> None:
    body = os.urandom(args.size)
    conn = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=conn) as s:
        async with s.get(f"{proxy}/auth/v1.0", headers={"X-Auth-User": "test:tester",
                                                        "X-Auth-Key": "testing"}) as r:
            storage, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
        h = {"X-Auth-Token": token}
        base = f"{storage}/bench-{n}-{os.getpid()}"
        await (await s.put(base, headers=h)).release()
        stored: list[str] = []
        counter = [0]
        errors = [0]

        async def putter(deadline: float) -> None:
            while time.monotonic() < deadline:
                counter[0] += 1
                url = f"{base}/o{counter[0]}"
                async with s.put(url, data=body, headers=h) as r:
                    await r.read()
                    if r.status == 201:
                        stored.append(url)
                    else:
                        errors[0] += 1

        got = [0]

        async def getter(k: int, deadline: float) -> None:
            i = k
            while time.monotonic() < deadline and stored:
                async with s.get(stored[i % len(stored)], headers=h) as r:
                    await r.read()
                    if r.status == 200:
                        got[0] += 1
                    else:
                        errors[0] += 1
                i += args.concurrency

        # Every client starts at t_put (wall clock shared by the processes).
        await asyncio.sleep(max(0.0, t_put - time.time()))
        t0 = time.monotonic()
        await asyncio.gather(*(putter(t0 + args.seconds) for _ in range(args.concurrency)))
        put_secs = time.monotonic() - t0
        t1 = time.monotonic()
        await asyncio.gather(*(getter(k, t1 + args.seconds) for k in range(args.concurrency)))
        get_secs = time.monotonic() - t1
    out.put((len(stored), put_secs, got[0], get_secs, errors[0]))


def _client_proc(proxy: str, n: int, args, t_put: float, out) -> None:
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        run(_client(proxy, n, args, t_put, out))
    except BaseException:
        out.put((0, 1.0, 0, 1.0, -1))  # the run fails at once, not at the queue's timeout
        raise


def run_one(root: str, workers: int, mode: str, args) -> dict[str, float]:
    set_option(root, "object-server", "commit_pipeline", str(mode == "pipeline").lower())
    set_option(root, "object-server", "commit_threads", "2" if mode == "threads2" else "1")
    os.unlink(os.path.join(root, "cluster.json"))  # the last start's ports
    proc, cluster = start_cluster(root, ["--workers", str(workers)])
    try:
        proxy = cluster["proxy"]["url"]
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        t_put = time.time() + 1.5  # the clients' start, once every one is up
        procs = [ctx.Process(target=_client_proc, args=(proxy, n, args, t_put, out))
                 for n in range(args.clients)]
        for p in procs:
            p.start()
        res = [out.get(timeout=4 * args.seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        if any(r[4] < 0 for r in res):
            raise SystemExit(f"a client failed (workers={workers}, {mode})")
    finally:
        stop_cluster(proc)
    put_secs = max(r[1] for r in res)
    get_secs = max(r[3] for r in res)
    return {"PUT/s": sum(r[0] for r in res) / put_secs,
            "GET/s": sum(r[2] for r in res) / get_secs,
            "errors": sum(r[4] for r in res)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,8,16")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight per client")
    ap.add_argument("--size", default="64k")
    ap.add_argument("--root", default=None, help="a directory on the disk to measure")
    args = ap.parse_args()
    args.size = parse_size(args.size)
    modes = [m for m in args.modes.split(",") if m]
    base = tempfile.mkdtemp(prefix="bench-putw-", dir=args.root or os.getcwd())
    print(f"# bench_put_workers: swiftlite up --nodes 1 --devices 4 --workers N --no-daemons; "
          f"size={args.size} clients={args.clients}x{args.concurrency} "
          f"seconds={args.seconds} rounds={args.rounds} root={base} ({fs_type(base)}) "
          f"cpus={os.cpu_count()}", flush=True)
    table = []
    try:
        for workers in [int(w) for w in args.workers.split(",") if w]:
            root = os.path.join(base, f"w{workers}")
            proc, _ = start_cluster(root, ["--nodes", "1", "--devices", "4",
                                           "--workers", str(workers)])
            stop_cluster(proc)
            got: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for rnd in range(args.rounds):
                for mode in modes if rnd % 2 == 0 else modes[::-1]:
                    r = run_one(root, workers, mode, args)
                    got[mode].append(r)
                    print(f"workers={workers:<3} {mode:<9} PUT/s={r['PUT/s']:,.0f} "
                          f"GET/s={r['GET/s']:,.0f} errors={r['errors']}", flush=True)
            med = {m: {k: statistics.median(r[k] for r in got[m]) for k in got[m][0]}
                   for m in modes}
            table.append((workers, med))
            shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\n| workers | " + " | ".join(f"{m} PUT/s | {m} GET/s" for m in modes) + " |")
    print("|---:|" + "---:|---:|" * len(modes))
    for workers, med in table:
        print(f"| {workers} | " + " | ".join(
            f"{med[m]['PUT/s']:,.0f} | {med[m]['GET/s']:,.0f}" for m in modes) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
