"""How GETs spread over an object's replicas: the share of reads each replica served (the
goal: each within 10% of a third).

usage: python loadtests/bench_read_spread.py [--nodes 3] [--objects 200] [--reads 6000]
           [--conc 16] [--no-local-reads] [--root /tmp/bench-spread]

Starts `swiftlite up --no-daemons --nodes N` (one device per node, so each replica has its own
server), PUTs --objects small objects, GETs them --reads times in all (uniformly), then reads
the proxy's replica reads per device from its /metrics (`swiftlite_proxy_replica_reads_total`,
the proxy's own local reads and those through the object servers alike).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
import urllib.request

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
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


def replica_reads(metrics_url: str) -> dict[str, dict[str, float]]:
    """{device: {via: reads}} from the proxy's /metrics."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "swiftlite_proxy_replica_reads_total":
                dev = out.setdefault(sample.labels["device"], {})
                dev[sample.labels["via"]] = sample.value
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--reads", type=int, default=6000)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--no-local-reads", action="store_true")
    ap.add_argument("--root", default="/tmp/bench-spread")
    args = ap.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    up, info = start_cluster(args.root, ["--nodes", str(args.nodes), "--devices", "1",
                                         "--replicas", "3", "--workers", "1",
                                         *(["--no-local-reads"] if args.no_local_reads
                                           else [])])
    try:
        proxy = info["proxy"]["auth_url"].rsplit("/auth/", 1)[0]
        asyncio.run(run(info["proxy"]["auth_url"], args.objects, args.reads, args.conc))
        # The proxy adds its counts to /metrics once a second.
        deadline = time.monotonic() + 10
        while True:
            counts = replica_reads(proxy + "/metrics")
            total = sum(sum(v.values()) for v in counts.values())
            if total >= args.reads or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        print(f"config: {args.nodes} nodes x 1 device, 3 replicas, {args.objects} objects of "
              f"4 KiB, {args.reads} GETs at concurrency {args.conc} through one proxy (one "
              f"worker), local reads {'off' if args.no_local_reads else 'on'}")
        for dev, vias in sorted(counts.items()):
            n = sum(vias.values())
            share = n / total
            print(f"{dev}: {n:.0f} GETs ({', '.join(f'{k} {v:.0f}' for k, v in vias.items())}), "
                  f"{share:.3f} of all, {share * args.nodes - 1:+.1%} from an even share")
    finally:
        stop_cluster(up)
        shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
