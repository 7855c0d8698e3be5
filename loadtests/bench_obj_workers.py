"""Does read throughput grow when the object server gets more CPU? GET/s of 64 KiB objects
through two all-in-one clusters that differ only in object-server worker processes (1 and
2), each with a 2-worker proxy, rounds interleaved (A B A B ...).

Both are `swiftlite up --nodes 1 --devices 4 --workers 2 --no-daemons --no-local-reads`
(reads through the object servers); the first is then restarted with `workers = 1` in its
node's [object-server] section.

    .venv/bin/python loadtests/bench_obj_workers.py [--rounds 6] [--seconds 3] [--conc 32]
"""

from __future__ import annotations

import argparse
import asyncio
import configparser
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp  # noqa: E402

from loadtests.bench_get_paths import SIZE, bench_args, interleaved, print_medians  # noqa: E402
from loadtests.up import start_cluster, stop_cluster  # noqa: E402

NAMES = 64
# Reads go through the object servers (no local reads): their CPU is what is measured.
UP = ["--nodes", "1", "--devices", "4", "--workers", "2", "--no-local-reads"]


def set_object_workers(root: str, workers: int) -> None:
    """Change a stopped root's object-server workers (its node config and its plan)."""
    conf = os.path.join(root, "etc", "node1.conf")
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
    parser.read(conf)
    parser["object-server"]["workers"] = str(workers)
    with open(conf, "w") as f:
        parser.write(f)
    plan_path = os.path.join(root, "etc", "plan.json")
    with open(plan_path) as f:
        plan = json.load(f)
    plan["nodes"][0]["workers"]["object"] = workers
    with open(plan_path, "w") as f:
        json.dump(plan, f)


async def prepare(s: aiohttp.ClientSession, proxy: str) -> tuple[list[str], dict[str, str]]:
    async with s.get(f"{proxy}/auth/v1.0", headers={"X-Auth-User": "test:tester",
                                                    "X-Auth-Key": "testing"}) as r:
        storage, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
    h = {"X-Auth-Token": token}
    await (await s.put(f"{storage}/workers", headers=h)).release()
    for i in range(NAMES):
        await (await s.put(f"{storage}/workers/o{i}", data=os.urandom(SIZE),
                           headers=h)).release()
    return [f"{storage}/workers/o{i}" for i in range(NAMES)], h


async def bench(proxies: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    async with aiohttp.ClientSession() as s:
        targets = {k: await prepare(s, url) for k, url in proxies.items()}
        return await interleaved(s, targets, args)


def main() -> int:
    args = bench_args(__doc__)
    roots = {k: tempfile.mkdtemp(prefix=f"bench-objw-{k}-") for k in ("1 worker", "2 workers")}
    procs = []
    try:
        proc, _ = start_cluster(roots["1 worker"], UP)
        stop_cluster(proc)
        set_object_workers(roots["1 worker"], 1)
        proxies = {}
        for kind, root in roots.items():
            proc, cluster = start_cluster(root, UP)
            procs.append(proc)
            proxies[kind] = cluster["proxy"]["url"]
        rates = asyncio.run(bench(proxies, args))
    finally:
        for proc in procs:
            stop_cluster(proc)
    print(f"config: swiftlite up {' '.join(UP)} --no-daemons (3 replicas, proxy 2 workers), "
          f"object server 1 or 2 workers; {SIZE // 1024} KiB GETs, {NAMES} names, "
          f"concurrency {args.conc}, {args.rounds} x {args.seconds}s rounds per cluster, "
          f"interleaved, cpus={os.cpu_count()}")
    med = print_medians(rates, 'object server ')
    print(f"2 workers / 1 worker: {med['2 workers'] / med['1 worker']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
