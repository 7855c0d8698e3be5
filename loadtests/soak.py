"""Nemesis soak: the fault harness of tests/fault/test_nemesis.py, for longer and bigger.

    .venv/bin/python loadtests/soak.py --seconds 600 [--faults kill9,sigstop] [--seed 100]
        [--concurrency 16] [--names 50] [--ops 1000] [--root DIR] [--json FILE]
    .venv/bin/python loadtests/soak.py --table FILE     # the table of a saved run
                                                        # (or of SWIFTLITE_NEMESIS_LOG)

One 3-node cluster (2 devices each, 3 replicas); the faults take turns, each run with the
next seed, until --seconds have passed (a run under way finishes). Each run: the image
workload with the fault injected for the middle part of --ops operations, then the daemons
converge the replicas, then every object and listing is checked through the proxy (see
tests/fault/nemesis). Prints each run as it ends, then per fault: runs, operations,
acknowledged and failed writes, requests answered 5xx, objects lost, resurrections, other
problems, runs whose replicas did not converge, and the time to converge. Exit status 1 if
any run lost an acknowledged write, resurrected one, showed another problem to clients or
did not converge.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fault.nemesis import (  # noqa: E402
    FAULTS,
    NemesisCluster,
    RunReport,
    Sizes,
    load_reports,
    run_fault,
    summarize,
)
from tests.fault.nemesis.cluster import PROXY_SETTINGS  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=600.0, help="how long to keep starting runs")
    p.add_argument("--faults", default=",".join(FAULTS),
                   help=f"comma-separated, taking turns (default all: {','.join(FAULTS)})")
    p.add_argument("--seed", type=int, default=1000, help="seed of the first run (then +1)")
    p.add_argument("--concurrency", type=int, default=16, help="client requests in flight")
    p.add_argument("--containers", type=int, default=4)
    p.add_argument("--names", type=int, default=50, help="object names per container")
    p.add_argument("--ops", type=int, default=1000,
                   help="operations per run: 20%% before the fault, 60%% during, 20%% after")
    p.add_argument("--converge-deadline", type=float, default=300.0)
    p.add_argument("--root", help="cluster directory (default: a temporary one, removed)")
    p.add_argument("--json", help="append each run's report to this file (JSON lines)")
    p.add_argument("--table", metavar="FILE", help="only print the table of saved reports")
    args = p.parse_args(argv)
    unknown = set(args.faults.split(",")) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    return args


def failed(r: RunReport) -> bool:
    return bool(r.violations() or r.divergence())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table:
        reports = load_reports(args.table)
        print(summarize(reports))
        return 1 if any(failed(r) for r in reports) else 0
    sizes = Sizes(containers=args.containers, names_per_container=args.names,
                  concurrency=args.concurrency, ops_before=args.ops // 5,
                  ops_during=args.ops * 3 // 5, ops_after=args.ops // 5,
                  converge_deadline=args.converge_deadline, phase_timeout=300.0)
    faults = args.faults.split(",")
    root = args.root or tempfile.mkdtemp(prefix="swiftlite-soak-")
    proxy = " ".join(f"{k}={v}" for k, v in PROXY_SETTINGS.items())
    print(f"configuration: faults={','.join(faults)} seconds={args.seconds:g} "
          f"first seed={args.seed}; cluster: 3 nodes x 2 devices, 3 replicas, part power 5, "
          f"proxy {proxy}; root={root}", flush=True)
    print("sizes: " + " ".join(f"{k}={v}" for k, v in dataclasses.asdict(sizes).items()),
          flush=True)
    start = time.monotonic()
    nc = NemesisCluster.start(os.path.join(root, "cluster"))
    reports: list[RunReport] = []
    try:
        for fault, seed in zip(itertools.cycle(faults), itertools.count(args.seed)):
            if time.monotonic() - start >= args.seconds:
                break
            r = run_fault(nc, fault, seed, sizes, log_path=args.json)
            reports.append(r)
            print(r.line(), flush=True)
            for problem in (r.violations() + r.divergence())[:10]:
                print(f"    {problem}", flush=True)
    finally:
        nc.stop()
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{len(reports)} runs in {time.monotonic() - start:.0f}s")
    print(summarize(reports))
    return 1 if any(failed(r) for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
