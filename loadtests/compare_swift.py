"""swiftlite beside OpenStack Swift on this machine: the RESULTS.md side-by-side table.

Starts each swiftlite shape with `swiftlite up` (fresh root, free ports, no daemons, like the
Swift anchor which runs only its main servers), runs loadtests/bench.py interleaved A/B
against an already running Swift (`../shared/anchors/swift/start.sh`), and prints one
markdown row per (shape, size, concurrency, phase) with both figures and the ratio.

    python loadtests/compare_swift.py --swift http://127.0.0.1:16080/auth/v1.0 \
        [--sizes 64k,1m] [--concurrency 8,32] [--count-64k 600] [--count-1m 200] [--repeat N]
        [--warmup 1500]

Before the measured runs of a shape, --warmup objects of 64 KiB are PUT into each system
(A/B, not counted; 0 turns it off). The first 64 KiB PUT repeat was the slow one in every
run without it (361-437 PUT/s against 527-683 for the third): a fresh cluster's first writes
create its partition and suffix directories, which the long-running Swift anchor made long
ago, and a run soon after a mass delete (a test run, the previous compare's clean-up) meets
ext4's slow inode allocation for minutes, which costs the system making more files more.

Shapes: "defaults" (`swiftlite up` as the README starts it: 1 node, 4 devices, proxy and
object workers = CPUs), "workers 1" (every server one process), and "Swift's shape" (4 nodes
of 1 device, 1 worker each: the anchor's own layout of 4 object/container/account servers).

S3 against Swift's s3api: `--apis swift,s3` runs every row through both protocols, swiftlite's
Swift API against Swift's and swiftlite's S3 against Swift's own `s3api` middleware (path
style, SigV4 header auth, `test:tester` / `testing`), one bench.py A/B run per API in turn,
the APIs' order swapped every repeat; the table gains an API column. Swift's anchor has no
s3api in its pipeline: `--enable-s3api` (or `python loadtests/swift_s3api.py` beforehand)
rewrites the anchor's proxy-server.conf with `s3api` before `tempauth`, Swift's defaults
otherwise, restarts its proxy and checks a boto3 PUT/GET through it. The warm-up is split
between the APIs. On a crowded machine the anchor answers 401 for minutes (its memcached pool
of 2 error-limits memcached, tempauth then finds no tokens): run
`python loadtests/swift_s3api.py --memcache-max-connections 32` first (it only helps Swift).

    python loadtests/compare_swift.py --swift http://127.0.0.1:16080/auth/v1.0 \
        --shapes "workers 1" --sizes 64k --concurrency 32 --apis swift,s3 --enable-s3api \
        --count-64k 1500 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from up import start_cluster  # noqa: F401 - also cpu_per_op's

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {
    "defaults": [],
    "workers 1": ["--workers", "1"],
    "Swift's shape": ["--nodes", "4", "--devices", "1", "--workers", "1"],
}


def bench(a_url: str, b_url: str, size: str, count: int, conc: int, out: str,
          phases: str = "put,get", api: str = "swift", policy: str | None = None,
          vs_policy: str | None = None) -> dict:
    """One bench.py A/B run (A swiftlite, B Swift as test:tester), its JSON report; `policy`
    and `vs_policy` are the X-Storage-Policy of A's and B's containers (None: default)."""
    cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--url", a_url, "--vs", b_url,
           "--vs-user", "test:tester", "--vs-key", "testing", "--size", size,
           "--count", str(count), "-c", str(conc), "--phases", phases, "--rounds", "2",
           "--api", api, "--vs-api", api, "--json", out]
    cmd += ["--policy", policy] if policy else []
    cmd += ["--vs-policy", vs_policy] if vs_policy else []
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout, flush=True)
    if r.returncode != 0 and not os.path.exists(out):
        # say why (a Swift whose auth answers 503, say), not just "no file"
        raise SystemExit(f"bench.py failed ({r.returncode}):\n{r.stderr.strip()}")
    # A report with a few failed requests (exit status 1) is kept: the table's errors column
    # shows them, and one 503 under a crowded machine should not throw away a 15-minute run.
    with open(out) as f:
        return json.load(f)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--swift", required=True, help="auth URL of the running OpenStack Swift")
    p.add_argument("--sizes", default="64k,1m")
    p.add_argument("--concurrency", default="8,32")
    p.add_argument("--count-64k", type=int, default=600)
    p.add_argument("--count-1m", type=int, default=200)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--repeat", type=int, default=1, help="runs of each row (one row each)")
    p.add_argument("--json", help="write every run's report here")
    p.add_argument("--warmup", type=int, default=1500,
                   help="64 KiB objects PUT into both systems before a shape's runs, not "
                        "counted (0: none)")
    p.add_argument("--apis", default="swift",
                   help="comma list of swift,s3: each row through each API (s3: swiftlite's "
                        "S3 against Swift's s3api, at the auth URL's host)")
    p.add_argument("--enable-s3api", action="store_true",
                   help="first put s3api into the anchor's proxy (loadtests/swift_s3api.py, "
                        "ANCHOR_DIR) and check it with boto3")
    a = p.parse_args()
    apis = [x.strip() for x in a.apis.split(",") if x.strip()]
    if not apis or any(x not in ("swift", "s3") for x in apis):
        raise SystemExit(f"--apis: swift and/or s3, not {a.apis!r}")
    if a.enable_s3api:
        import swift_s3api
        swift_s3api.enable()
    rows = []
    runs = []
    work = tempfile.mkdtemp(prefix="swiftlite-compare-")
    try:
        for shape in a.shapes.split(","):
            root = os.path.join(work, shape.replace(" ", "_").replace("'", ""))
            proc, info = start_cluster(root, SHAPES[shape])
            url = info["proxy"]["auth_url"]
            try:
                if a.warmup:
                    n = max(1, a.warmup // len(apis))
                    for api in apis:
                        print(f"# warm-up, not counted: {n} PUTs of 64 KiB into each ({api})",
                              flush=True)
                        bench(url, a.swift, "64k", n, 32,
                              os.path.join(work, f"warmup-{api}-{len(runs)}.json"), "put", api)
                for size in a.sizes.split(","):
                    count = a.count_1m if size.lower().startswith("1m") else a.count_64k
                    for conc in (int(c) for c in a.concurrency.split(",")):
                        for rep_no in range(a.repeat):
                            # The APIs take turns going first, like bench.py's A/B rounds.
                            for api in apis if rep_no % 2 == 0 else apis[::-1]:
                                out = os.path.join(work, f"r{len(runs)}.json")
                                rep = bench(url, a.swift, size, count, conc, out, api=api)
                                runs.append({"shape": shape, "api": api, "size": size,
                                             "concurrency": conc, "report": rep})
                                for phase in ("put", "get"):
                                    x = rep["results"]["A"][phase]
                                    y = rep["results"]["B"][phase]
                                    rows.append((shape, api, size, conc, phase.upper(), x, y))
            finally:
                proc.terminate()
                proc.wait(timeout=30)
                # The data stays until every shape has run: on ext4 a mass delete makes the
                # next inode allocations slow for minutes (recently freed inodes are skipped
                # one by one), which would tax the next shape and not Swift.
    finally:
        shutil.rmtree(work, ignore_errors=True)
    show_api = apis != ["swift"]  # today's table unchanged for the Swift API alone
    print("| swiftlite shape |" + (" API |" if show_api else "") + " size | c | op | "
          "swiftlite ops/s | Swift ops/s | ratio | swiftlite p50/p99 ms | Swift p50/p99 ms | "
          "errors |")
    print("|---|" + ("---|" if show_api else "") + "---|---:|---|---:|---:|---:|---:|---:|---:|")
    for shape, api, size, conc, op, x, y in rows:
        ratio = x["ops_s"] / y["ops_s"] if y["ops_s"] else float("nan")
        col = f" {'S3 / s3api' if api == 's3' else 'Swift'} |" if show_api else ""
        print(f"| {shape} |{col} {size} | {conc} | {op} | {x['ops_s']:.1f} | {y['ops_s']:.1f} | "
              f"{ratio:.2f}x | {x['p50_ms']:.0f}/{x['p99_ms']:.0f} | "
              f"{y['p50_ms']:.0f}/{y['p99_ms']:.0f} | {x['errors']}/{y['errors']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
