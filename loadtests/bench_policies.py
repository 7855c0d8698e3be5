"""Erasure-coded against replicated objects on one cluster: PUT and GET rates and disk bytes
per object byte, by object size (issue 39's small-object trade-off and its "EC 8 MiB GET at
least 0.7x the replicated policy's").

Starts `swiftlite up --no-daemons --ec K+M` (devices enough for K+M), then for each size runs
bench.py A/B interleaved on that one cluster: A a container of policy `ec`, B one of the
default replicated policy (3 replicas). After each size's PUTs it adds up the bytes the two
policies' data directories hold (`objects-N` against `objects`: file sizes, and blocks
allocated, which is what a disk pays for small files), divided by the bytes written.

    .venv/bin/python loadtests/bench_policies.py
    .venv/bin/python loadtests/bench_policies.py --sizes 4k,64k,1m,8m --ec 4+2 -c 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench import parse_size  # noqa: E402
from up import start_cluster, stop_cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def disk_bytes(root: str, only: tuple[str, ...] | None = None) -> dict[str, tuple[int, int]]:
    """{data dir name: (file bytes, allocated bytes)} over every device under `root`; with
    `only` (data dir names, e.g. ("objects-1",)) the other data dirs are not walked at all."""
    out: dict[str, list[int]] = {}
    for dirpath, dirs, files in os.walk(root):
        if only is not None:
            dirs[:] = [d for d in dirs
                       if d in only or not (d == "objects" or d.startswith("objects-"))]
        rel = os.path.relpath(dirpath, root).split(os.sep)
        kind = next((p for p in rel if p == "objects" or p.startswith("objects-")), None)
        if kind is None:
            continue
        acc = out.setdefault(kind, [0, 0])
        for name in files:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            acc[0] += st.st_size
            acc[1] += st.st_blocks * 512
    return {k: (v[0], v[1]) for k, v in out.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4k,64k,1m,8m")
    p.add_argument("--ec", default="4+2", help="K+M of the erasure-coded policy")
    p.add_argument("--ec-segment-size", type=int, default=None)
    p.add_argument("-c", "--concurrency", type=int, default=16)
    p.add_argument("--bytes", default="64m", help="bytes written per size and policy "
                   "(the object count follows, 20 to 2000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args()
    k, m = (int(x) for x in a.ec.split("+"))
    root = tempfile.mkdtemp(prefix="bench-policies-")
    up = ["--workers", str(a.workers), "--devices", str(max(4, k + m)), "--ec", a.ec]
    if a.ec_segment_size:
        up += ["--ec-segment-size", str(a.ec_segment_size)]
    print(f"config: sizes={a.sizes} ec={a.ec} segment={a.ec_segment_size or 'default'} "
          f"c={a.concurrency} bytes/size={a.bytes} rounds={a.rounds} up={' '.join(up)}",
          flush=True)
    proc, info = start_cluster(os.path.join(root, "c"), up)
    try:
        url = info["proxy"]["auth_url"]
        rows = []
        before = disk_bytes(os.path.join(root, "c"))
        for size in a.sizes.split(","):
            count = max(20, min(2000, parse_size(a.bytes) // parse_size(size)))
            out = os.path.join(root, f"{size}.json")
            subprocess.run([sys.executable, os.path.join(HERE, "bench.py"), "--url", url,
                            "--policy", "ec", "--vs", url, "--size", size, "--count",
                            str(count), "-c", str(a.concurrency), "--phases", "put,get",
                            "--rounds", str(a.rounds), "--json", out],
                           check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                res = json.load(f)["results"]
            after = disk_bytes(os.path.join(root, "c"))
            written = count * parse_size(size)

            ec_dir = next((d for d in after if d.startswith("objects-")), "objects-1")
            grown = [(after.get(d, (0, 0))[i] - before.get(d, (0, 0))[i]) / written
                     for d in (ec_dir, "objects") for i in (0, 1)]
            rows.append((size, count, res["A"]["put"]["ops_s"], res["B"]["put"]["ops_s"],
                         res["A"]["get"]["ops_s"], res["B"]["get"]["ops_s"], *grown))
            before = after
        print(f"{'size':>5} {'count':>6} {'PUT ec/rep ops/s':>18} {'ratio':>6} "
              f"{'GET ec/rep ops/s':>18} {'ratio':>6} {'ec bytes/B':>11} {'ec alloc/B':>11} "
              f"{'rep bytes/B':>12} {'rep alloc/B':>12}")
        for size, count, pe, pr, ge, gr, eb, ea, rb, ra in rows:
            print(f"{size:>5} {count:>6} {pe:>8.1f} /{pr:>8.1f} {pe / pr:>6.2f} "
                  f"{ge:>8.1f} /{gr:>8.1f} {ge / gr:>6.2f} {eb:>11.3f} {ea:>11.3f} "
                  f"{rb:>12.3f} {ra:>12.3f}")
        print(f"(k+m)/k = {(k + m) / k:.3f}; replicas = 3")
    finally:
        stop_cluster(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
