"""swiftlite's erasure coding beside OpenStack Swift 2.38.3's, same scheme, A/B in one run.

Issue 39's benchmark: 1 MiB and 8 MiB objects, c=16, three repeats, PUT and GET rates of
swiftlite (`swiftlite up --devices 6 --ec 4+2`, containers on its policy `ec`) against the
Swift anchor (containers on the `ec` policy loadtests/swift_ec.py gives it), and disk bytes
per object byte on each against (k+m)/k.

    ../shared/anchors/swift/start.sh
    .venv/bin/python loadtests/compare_swift_ec.py --swift http://127.0.0.1:16080/auth/v1.0 \\
        [--sizes 1m,8m] [-c 16] [--repeat 3] [--count-1m 192] [--count-8m 64] [--ec 4+2] \\
        [--ec-type liberasurecode_rs_vand] [--segment-size 1048576] [--shapes defaults] \\
        [--warmup 256] [--memcache-max-connections 32] [--json out.json] [--keep]
    ../shared/anchors/swift/stop.sh

First it runs swift_ec.enable() on the anchor (ANCHOR_DIR, default /tmp/anchor-swift) with
the same --ec, --ec-type and --segment-size it gives `swiftlite up` (their defaults are
swiftlite's own: liberasurecode_rs_vand, 1 MiB): it writes the anchor's storage-policy:1,
builds its 6-replica object-1 ring, restarts the anchor's servers only if something changed,
and checks an EC PUT/GET. Then per swiftlite shape it starts a fresh `swiftlite up --no-daemons`
(like the anchor, which runs only its main servers), PUTs --warmup objects of 64 KiB into an
ec container of each (not counted: a fresh cluster's first writes make its partition
directories), and runs, for each repeat and each size, one compare_swift.bench() (bench.py A/B,
A swiftlite, B Swift, two ABBA rounds per phase, PUT then GET of the same objects). Repeats
are the outer loop so drift on the machine spreads over every size.

Disk: around each bench run it adds up the `objects-1` directories (the ec policy's data dirs;
nothing else is walked) of swiftlite's root and of the anchor's `srv`, file sizes and blocks
allocated (what `du` counts), and divides the growth by the bytes the PUTs stored (bench.py's
bytes of successful PUTs). 1 MiB at a 1 MiB segment is one segment: each of the k+m archives
is 256 KiB plus the fragment header (80 bytes in liberasurecode) plus whatever the store adds.

At the end Swift's benchmark objects are deleted through its API (bench.py --phases delete),
so the anchor's disk does not fill up run after run; swiftlite's root is removed. --keep
leaves both.

Shapes: "defaults" (1 node, 6 devices, proxy and object workers = CPUs: `swiftlite up` as a
user starts it with enough devices for 4+2), "workers 1" (the same, one process per server),
"3 nodes" (`--nodes 3 --devices 2 --workers 1`, two fragments per node). The anchor is what
start.sh makes: one proxy worker and 4 object, container and account servers of one worker;
its 6 ec devices are d1..d4 plus d5, d6 on object servers 1 and 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import swift_ec  # noqa: E402
from bench import parse_size  # noqa: E402
from bench_policies import disk_bytes  # noqa: E402
from compare_swift import bench  # noqa: E402
from up import start_cluster, stop_cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHAPES = {
    "defaults": ["--devices", "6"],
    "workers 1": ["--devices", "6", "--workers", "1"],
    "3 nodes": ["--nodes", "3", "--devices", "2", "--workers", "1"],
}
EC_DIR = f"objects-{swift_ec.POLICY_INDEX}"  # swiftlite's up also gives ec index 1


def ec_bytes(root: str) -> tuple[int, int]:
    """(file bytes, allocated bytes) of every objects-1 directory under `root`."""
    return disk_bytes(root, only=(EC_DIR,)).get(EC_DIR, (0, 0))


def swiftlite_policy(info: dict) -> dict:
    """swiftlite's /info entry of its ec policy (what it actually serves)."""
    with urllib.request.urlopen(info["proxy"]["url"].rstrip("/") + "/info", timeout=10) as r:
        pols = json.load(r)["swift"]["policies"]
    return next(p for p in pols if p["name"] == swift_ec.POLICY_NAME)


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return r.stdout.strip()


def delete_objects(swift: str, container: str, count: int, conc: int, work: str) -> None:
    """bench.py --phases delete on Swift's `container` (the objects obj-00000000...)."""
    cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--url", swift, "--user",
           "test:tester", "--key", "testing", "--container", container, "--count", str(count),
           "-c", str(conc), "--phases", "delete", "--json", os.path.join(work, "del.json")]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--swift", required=True, help="auth URL of the running Swift anchor")
    p.add_argument("--anchor-dir", default=swift_ec.ANCHOR_DIR)
    p.add_argument("--sizes", default="1m,8m")
    p.add_argument("-c", "--concurrency", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--count-1m", type=int, default=192, help="objects per run of 1 MiB")
    p.add_argument("--count-8m", type=int, default=64, help="objects per run of 8 MiB")
    p.add_argument("--ec", default="4+2")
    p.add_argument("--ec-type", default=swift_ec.DEFAULT_EC_TYPE)
    p.add_argument("--segment-size", type=int, default=swift_ec.DEFAULT_SEGMENT_SIZE)
    p.add_argument("--shapes", default="defaults", help=f"comma list of {', '.join(SHAPES)}")
    p.add_argument("--warmup", type=int, default=256,
                   help="64 KiB objects PUT into an ec container of each first, not counted")
    p.add_argument("--memcache-max-connections", type=int, default=32,
                   help="the anchor proxy's memcache_max_connections (swift_ec.py; Swift's "
                        "default 2 error-limits memcached on a crowded machine, and tempauth "
                        "then answers 401 for a minute: it only helps Swift)")
    p.add_argument("--json", help="write every run's report and disk figures here")
    p.add_argument("--keep", action="store_true",
                   help="keep swiftlite's root and Swift's benchmark objects")
    a = p.parse_args()
    k, m = (int(x) for x in a.ec.split("+"))
    ideal = (k + m) / k
    srv = os.path.join(a.anchor_dir, "srv")
    swift_ec.enable(a.anchor_dir, a.ec, a.ec_type, a.segment_size,
                    memcache_max_connections=a.memcache_max_connections)
    ec_up = ["--ec", a.ec, "--ec-type", a.ec_type, "--ec-segment-size", str(a.segment_size)]
    swift_version = subprocess.run(
        [os.path.join(a.anchor_dir, "venv", "bin", "python"), "-c",
         "from importlib.metadata import version as v; print('swift', v('swift'), "
         "'pyeclib', v('pyeclib'))"], capture_output=True, text=True).stdout.strip()
    head = f"{_git('rev-parse', '--short', 'HEAD')} ({_git('branch', '--show-current')})"
    print(f"config: swiftlite {head}, {swift_version}; scheme {a.ec_type} {a.ec}, "
          f"segment {a.segment_size}; "
          f"sizes {a.sizes}, c={a.concurrency}, repeats {a.repeat}, counts 1m={a.count_1m} "
          f"8m={a.count_8m} (per system and run, 2 ABBA rounds), warm-up {a.warmup} x 64 KiB; "
          f"{os.cpu_count()} CPUs, {platform.platform()}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    runs: list[dict] = []
    swift_containers: list[tuple[str, int]] = []
    work = tempfile.mkdtemp(prefix="swiftlite-compare-ec-")
    try:
        for shape in a.shapes.split(","):
            root = os.path.join(work, shape.replace(" ", "_"))
            up_args = [*SHAPES[shape], *ec_up]
            proc, info = start_cluster(root, up_args)
            try:
                url = info["proxy"]["auth_url"]
                print(f"# shape {shape!r}: swiftlite up {' '.join(up_args)}; its ec policy: "
                      f"{swiftlite_policy(info)}", flush=True)
                if a.warmup:
                    print(f"# warm-up, not counted: {a.warmup} PUTs of 64 KiB into each",
                          flush=True)
                    rep = bench(url, a.swift, "64k", a.warmup, a.concurrency,
                                os.path.join(work, f"warmup-{len(runs)}.json"), "put",
                                policy="ec", vs_policy="ec")
                    swift_containers.append((rep["config"]["container"] + "-vs", a.warmup))
                for rep_no in range(a.repeat):
                    for size in a.sizes.split(","):
                        count = a.count_8m if parse_size(size) >= 8 << 20 else a.count_1m
                        before = (ec_bytes(root), ec_bytes(srv))
                        out = os.path.join(work, f"r{len(runs)}.json")
                        rep = bench(url, a.swift, size, count, a.concurrency, out,
                                    policy="ec", vs_policy="ec")
                        time.sleep(1)
                        after = (ec_bytes(root), ec_bytes(srv))
                        swift_containers.append((rep["config"]["container"] + "-vs", count))
                        disk = {}
                        for i, who in enumerate(("A", "B")):
                            stored = rep["results"][who]["put"]["bytes"]
                            disk[who] = [(after[i][j] - before[i][j]) / stored if stored else
                                         float("nan") for j in (0, 1)]
                        runs.append({"shape": shape, "size": size, "repeat": rep_no + 1,
                                     "count": count, "report": rep, "disk": disk})
            finally:
                stop_cluster(proc)
    finally:
        if not a.keep:
            for cont, count in swift_containers:
                delete_objects(a.swift, cont, count, a.concurrency, work)
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}; Swift containers {[c for c, _ in swift_containers]}")
    report(runs, a.concurrency, ideal)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=2)
    return 0


def report(runs: list[dict], conc: int, ideal: float) -> None:
    print("\n| shape | size | rep | op | swiftlite ops/s (MB/s) | Swift ops/s (MB/s) | ratio | "
          "swiftlite p50/p99 ms | Swift p50/p99 ms | errors |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    ratios: dict[tuple, list[float]] = {}
    for r in runs:
        for op in ("put", "get"):
            x, y = r["report"]["results"]["A"][op], r["report"]["results"]["B"][op]
            ratio = x["ops_s"] / y["ops_s"] if y["ops_s"] else float("nan")
            ratios.setdefault((r["shape"], r["size"], op), []).append(ratio)
            print(f"| {r['shape']} | {r['size']} | {r['repeat']} | {op.upper()} | "
                  f"{x['ops_s']:.1f} ({x['mb_s']:.0f}) | {y['ops_s']:.1f} ({y['mb_s']:.0f}) | "
                  f"{ratio:.2f}x | {x['p50_ms']:.0f}/{x['p99_ms']:.0f} | "
                  f"{y['p50_ms']:.0f}/{y['p99_ms']:.0f} | {x['errors']}/{y['errors']} |")
    print(f"\nratios over the repeats (c={conc}; the bar is 2.00x):\n")
    print("| shape | size | op | min | median | max | all >= 2x |")
    print("|---|---|---|---:|---:|---:|---|")
    for (shape, size, op), rs in ratios.items():
        s = sorted(rs)
        print(f"| {shape} | {size} | {op.upper()} | {s[0]:.2f}x | {s[len(s) // 2]:.2f}x | "
              f"{s[-1]:.2f}x | {'yes' if s[0] >= 2 else 'no'} |")
    print(f"\ndisk bytes per object byte in the ec data dirs ((k+m)/k = {ideal:.3f}; file "
          "bytes / allocated bytes, mean over the repeats):\n")
    print("| shape | size | swiftlite file | swiftlite alloc | Swift file | Swift alloc | "
          "swiftlite file vs (k+m)/k | swiftlite alloc vs (k+m)/k |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    seen: dict[tuple, list] = {}
    for r in runs:
        seen.setdefault((r["shape"], r["size"]), []).append(r["disk"])
    for (shape, size), ds in seen.items():
        mean = {w: [sum(d[w][j] for d in ds) / len(ds) for j in (0, 1)] for w in ("A", "B")}
        print(f"| {shape} | {size} | {mean['A'][0]:.4f} | {mean['A'][1]:.4f} | "
              f"{mean['B'][0]:.4f} | {mean['B'][1]:.4f} | {100 * (mean['A'][0] / ideal - 1):+.2f}%"
              f" | {100 * (mean['A'][1] / ideal - 1):+.2f}% |")


if __name__ == "__main__":
    sys.exit(main())
