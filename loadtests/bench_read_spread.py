"""How GETs spread over an object's replicas: the share of reads each replica's object server
answered (the goal: each within 10% of a third).

usage: python loadtests/bench_read_spread.py [--nodes 3] [--objects 200] [--reads 6000]
           [--conc 16] [--root /tmp/bench-spread]

Starts `swiftlite up --no-daemons --nodes N` (one device per node, so each replica has its own
server), PUTs --objects small objects, GETs them --reads times in all (uniformly), then counts
in each node's object-server log the GETs it answered.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil

import aiohttp
from up import start_cluster, stop_cluster


async def run(auth_url: str, objects: int, reads: int, conc: int) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(auth_url, headers={"X-Auth-User": "test:tester",
                                            "X-Auth-Key": "testing"}) as r:
            h = {"X-Auth-Token": r.headers["X-Auth-Token"]}
            url = r.headers["X-Storage-Url"]
        await (await s.put(f"{url}/spread", headers=h)).release()
        for i in range(objects):
            await (await s.put(f"{url}/spread/o{i}", data=b"x" * 4096, headers=h)).release()
        todo = iter(range(reads))

        async def worker() -> None:
            for n in todo:
                async with s.get(f"{url}/spread/o{n % objects}", headers=h) as r:
                    await r.read()
                    assert r.status == 200, r.status

        await asyncio.gather(*(worker() for _ in range(conc)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--reads", type=int, default=6000)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--root", default="/tmp/bench-spread")
    args = ap.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    up, info = start_cluster(args.root, ["--nodes", str(args.nodes), "--devices", "1",
                                         "--replicas", "3"])
    try:
        asyncio.run(run(info["proxy"]["auth_url"], args.objects, args.reads, args.conc))
        counts = {}
        for node in info["nodes"]:
            with open(os.path.join(args.root, "logs", f"{node['name']}-object.log"),
                      errors="replace") as f:
                counts[node["name"]] = sum(1 for line in f
                                           if " GET /" in line and "/spread/o" in line)
        total = sum(counts.values())
        print(f"config: {args.nodes} nodes x 1 device, 3 replicas, {args.objects} objects of "
              f"4 KiB, {args.reads} GETs at concurrency {args.conc} through one proxy")
        for name, n in counts.items():
            share = n / total
            print(f"{name}: {n} GETs, {share:.3f} of all, {share * args.nodes - 1:+.1%} "
                  "from an even share")
    finally:
        stop_cluster(up)
        shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
