"""Growing a cluster: how long a fifth host takes to receive its partitions, and what moves.

Four storage hosts on their own loopback addresses (tests/multihost.py: each runs
`swiftlite node` with its replicators) hold --objects objects of --size bytes, three
replicas, written straight to their primaries' disks through the journaled write path (as
bench_replication.py fills, so a 200k-object store is ready in a minute rather than an hour
of PUTs). Then, as an operator would: start host 5, `swiftlite-ring-builder add` its
devices, `rebalance`, copy the rings to every host. The clock runs from the ring push until
every partition sits only where the new ring puts it (the old hosts let go of a moved
partition only once every new primary holds it).

Run once per --mode, interleaved in one run: `incremental` (swiftlite's digests) and
`listing` (the replicators derive their own digests by listing every suffix each pass, as
Swift does; the peers' REPLICATE answers stay incremental, so this understates Swift).

    .venv/bin/python loadtests/bench_rebalance.py --objects 200000 --size 4096
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from swiftlite.common import hashing  # noqa: E402
from swiftlite.common.timestamp import Timestamp  # noqa: E402
from swiftlite.obj.engine import writing
from tests.helpers import wait_for  # noqa: E402
from tests.multihost import KINDS, MultiHost, host_ip  # noqa: E402

ACCOUNT, CONTAINER = "AUTH_bench", "imgs"


def fill(builders: str, hosts_root: str, hash_conf: dict[str, str], start: int, end: int,
         size: int) -> int:
    """Write objects start..end-1 on each of their primaries (per the object ring)."""
    from swiftlite.ring import Ring

    hashing.set_hash_path_affixes(hash_conf["hash_path_prefix"],
                                  hash_conf["hash_path_suffix"])
    ring = Ring.load(os.path.join(builders, "object.ring.gz"), reload_interval=1e9)
    by_ip = {host_ip(n): os.path.join(hosts_root, f"host{n}", "srv") for n in range(1, 9)}
    body = os.urandom(size)
    etag = hashlib.md5(body).hexdigest()
    for i in range(start, end):
        name = f"img-{i:08d}.jpg"
        h = hashing.hash_path(ACCOUNT, CONTAINER, name)
        part, nodes = ring.get_nodes(ACCOUNT, CONTAINER, name)
        ts = Timestamp(1_700_000_000_00000 + i).internal
        md = {"name": f"/{ACCOUNT}/{CONTAINER}/{name}", "Content-Type": "image/jpeg"}
        for node in nodes:
            dev = os.path.join(by_ip[node["ip"]], node["device"])
            writing.DataWriter(dev, part, h, fsync=False).put([body], md, ts, etag)
    return end - start


def data_on(mh: MultiHost, n: int) -> tuple[int, int]:
    """(objects, bytes) in .data files on host n."""
    count = size = 0
    for dirpath, _, files in os.walk(mh.hosts[n].devices_root):
        for f in files:
            if f.endswith(".data"):
                count += 1
                size += os.path.getsize(os.path.join(dirpath, f))
    return count, size


def run(mode: str, args: argparse.Namespace) -> dict:
    root = tempfile.mkdtemp(prefix=f"bench-rebal-{mode}-", dir=args.dir)
    extra = {"object-replicator": {"concurrency": args.replicator_concurrency,
                                   "listing_digests": str(mode == "listing").lower()},
             "DEFAULT": {"log_level": "WARNING"}}
    mh = MultiHost(root, part_power=args.part_power, devices=args.devices,
                   daemon_interval=args.interval, extra=extra)
    try:
        for n in range(1, 5):
            mh.add_host(n)
        for kind in KINDS:
            mh.ring_builder(kind, "rebalance", ok=(0, 1))
        mh.push_rings()
        t = time.monotonic()
        step = max(1000, args.objects // 64)
        with ProcessPoolExecutor(args.fill_procs) as pool:
            list(pool.map(fill, *zip(*[(mh.builders, root, mh.hash_conf, s,
                                        min(args.objects, s + step), args.size)
                                       for s in range(0, args.objects, step)], strict=True)))
        print(f"  [{mode}] filled {args.objects} objects x3 in {time.monotonic() - t:.1f}s",
              flush=True)
        for n in range(1, 5):
            mh.start_host(n)
        for n in range(1, 5):
            mh.wait_host(n)
        mh.add_host(5)
        mh.start_host(5)
        mh.wait_host(5)
        mh.rebalance()
        mh.push_rings()
        start = time.monotonic()
        wait_for(lambda: not mh.misplaced("object"), args.timeout, interval=1.0,
                 what="the new ring's placement")
        elapsed = time.monotonic() - start
        objects, nbytes = data_on(mh, 5)
        return {"mode": mode, "seconds": elapsed, "objects_moved": objects,
                "bytes_moved": nbytes}
    finally:
        mh.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=200_000)
    p.add_argument("--size", type=int, default=4096, help="bytes per object")
    p.add_argument("--part-power", type=int, default=12)
    p.add_argument("--devices", type=int, default=2, help="devices per host")
    p.add_argument("--interval", type=float, default=1.0, help="replicator pass interval (s)")
    p.add_argument("--replicator-concurrency", type=int, default=4)
    p.add_argument("--modes", default="incremental,listing")
    p.add_argument("--rounds", type=int, default=1, help="rounds of all modes, interleaved")
    p.add_argument("--fill-procs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--dir", default=None, help="where the hosts' data goes (default: /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the data directories")
    args = p.parse_args(argv)
    print(f"config: objects={args.objects} size={args.size} replicas=3 "
          f"part_power={args.part_power} hosts=4+1 devices/host={args.devices} "
          f"replicator interval={args.interval}s concurrency={args.replicator_concurrency} "
          f"cpus={os.cpu_count()}", flush=True)
    results = []
    for r in range(args.rounds):
        for mode in args.modes.split(","):
            res = run(mode, args)
            results.append(res)
            gib = res["bytes_moved"] / 2**30
            mobj = res["objects_moved"] / 1e6
            print(f"round {r + 1} {mode:11s}: {res['seconds']:.1f}s to settle, moved "
                  f"{res['objects_moved']} objects, {res['bytes_moved'] / 2**20:.1f} MiB "
                  f"({res['seconds'] / gib if gib else 0:.0f} s/GiB, "
                  f"{res['seconds'] / mobj if mobj else 0:.0f} s per million objects)",
                  flush=True)
    by = {m: [r["seconds"] for r in results if r["mode"] == m] for m in args.modes.split(",")}
    if "incremental" in by and "listing" in by:
        ratio = sum(by["listing"]) / sum(by["incremental"])
        print(f"listing / incremental time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
