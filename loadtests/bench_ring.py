"""Ring benchmark: builder rebalance times and ring lookups per second.

    .venv/bin/python loadtests/bench_ring.py [--part-power 18] [--zones 5] [--devices 100]
                                             [--lookups 200000] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ringbuilder.builder import RingBuilder  # noqa: E402
from swiftlite.ring import Ring, write_ring  # noqa: E402


def timed(what: str, fn):  # noqa: ANN001, ANN201
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  {what:<44} {dt:8.2f} s wall {cpu:8.2f} s cpu")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part-power", type=int, default=18)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--zones", type=int, default=5)
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--per-host", type=int, default=5, help="devices per host")
    ap.add_argument("--lookups", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    per_zone = args.devices // args.zones
    b = RingBuilder(args.part_power, args.replicas, 1)
    for z in range(1, args.zones + 1):
        for i in range(per_zone):
            b.add_dev({"region": 1, "zone": z, "ip": f"10.0.{z}.{i // args.per_host}",
                       "port": 6200, "device": f"sd{i}", "weight": 100.0})
    n = sum(1 for d in b.devs if d)
    print(f"ring: part power {args.part_power} ({b.parts} partitions), {args.replicas} replicas,"
          f" {n} devices in {args.zones} zones ({args.per_host} per host), "
          f"{b.parts * args.replicas} assignments; python {sys.version.split()[0]}")
    print("builder:")
    moved, bal = timed("initial rebalance", lambda: b.rebalance(seed=args.seed))
    print(f"    moved {moved}, balance {bal:.3f}%, dispersion "
          f"{b.dispersion_report()['percent']:.2f}%")
    b.pretend_min_part_hours_passed()
    b.add_dev({"region": 1, "zone": 1, "ip": "10.0.1.250", "port": 6200, "device": "new",
               "weight": 100.0})
    moved, bal = timed("add 1 device + rebalance", lambda: b.rebalance(seed=args.seed))
    print(f"    moved {moved}, balance {bal:.3f}%")
    b.pretend_min_part_hours_passed()
    b.remove_dev(0)
    moved, bal = timed("remove 1 device + rebalance", lambda: b.rebalance(seed=args.seed))
    print(f"    moved {moved}, balance {bal:.3f}%")
    timed("validate", b.validate)

    with tempfile.TemporaryDirectory() as tmp:
        bpath, rpath = os.path.join(tmp, "object.builder"), os.path.join(tmp, "object.ring.gz")
        timed("save builder", lambda: b.save(bpath))
        timed("load builder", lambda: RingBuilder.load(bpath))
        timed("write ring", lambda: write_ring(rpath, b.get_ring_data()))
        ring = timed("load ring", lambda: Ring.load(rpath))
        print(f"    builder {os.path.getsize(bpath) / 1e6:.2f} MB, "
              f"ring {os.path.getsize(rpath) / 1e6:.2f} MB")

    rng = random.Random(args.seed)
    names = [(f"AUTH_{rng.randrange(1000)}", f"photos{rng.randrange(100)}",
              f"{rng.getrandbits(64):016x}.jpg") for _ in range(args.lookups)]
    parts = [rng.randrange(b.parts) for _ in range(args.lookups)]
    print("ring lookups:")
    for label, fn in [
        ("get_nodes(a, c, o)", lambda: [ring.get_nodes(a, c, o) for a, c, o in names]),
        ("get_part(a, c, o)", lambda: [ring.get_part(a, c, o) for a, c, o in names]),
        ("get_part_nodes(part)", lambda: [ring.get_part_nodes(p) for p in parts]),
    ]:
        t0 = time.process_time()
        fn()
        dt = time.process_time() - t0
        print(f"  {label:<44} {args.lookups / dt:>10,.0f} /s  ({dt / args.lookups * 1e6:.2f} us"
              " cpu each)")
    sample = parts[:2000]
    t0 = time.process_time()
    for p in sample:
        next(ring.get_more_nodes(p))
    dt = time.process_time() - t0
    print(f"  {'first handoff, uncached partition':<44} {len(sample) / dt:>10,.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
