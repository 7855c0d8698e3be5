"""The migration orders compared: path vs partition vs interleaved, each on a fresh cluster.

Makes a tree of N small image-like files (deterministic sizes 1-4 KiB by default, spread over
nested directories as an image store's would be), then for each order starts a fresh
`swiftlite up` (free ports, no daemons), runs `swiftlite-migrate --ring` into it, and prints
the migrate tool's own summary plus one markdown row per order.

    python loadtests/compare_migration.py --files 100000 [--orders path,partition,interleaved]
        [--concurrency 32] [--min-size 1024] [--max-size 4096] [--up-args "--part-power 10"]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from compare_swift import start_cluster  # a sibling script: loadtests/ is on sys.path

SUMMARY = re.compile(r"uploaded (\d+) objects, (\d+) bytes .* in ([\d.]+)s: ([\d.]+) objects/s")


def make_tree(root: str, n: int, lo: int, hi: int, seed: int = 7) -> int:
    rnd = random.Random(seed)
    total = 0
    blob = os.urandom(hi)
    for i in range(n):
        d = os.path.join(root, f"{i % 97:02d}", f"{(i // 97) % 101:03d}")
        if i < 97 * 101:
            os.makedirs(d, exist_ok=True)
        size = rnd.randint(lo, hi)
        with open(os.path.join(d, f"img-{i:07d}.jpg"), "wb") as f:
            f.write(i.to_bytes(8, "big") + blob[: size - 8])  # distinct bodies, distinct ETags
        total += size
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--orders", default="path,partition,interleaved")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--min-size", type=int, default=1024)
    p.add_argument("--max-size", type=int, default=4096)
    p.add_argument("--up-args", default="", help="extra `swiftlite up` arguments")
    p.add_argument("--workdir", default=None, help="where the tree and clusters go")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="swiftlite-migcmp-", dir=a.workdir)
    rows = []
    try:
        tree = os.path.join(work, "tree")
        t0 = time.monotonic()
        size = make_tree(tree, a.files, a.min_size, a.max_size)
        print(f"config: files={a.files} bytes={size} sizes={a.min_size}-{a.max_size} "
              f"concurrency={a.concurrency} up_args={a.up_args!r} (tree built in "
              f"{time.monotonic() - t0:.0f}s)", flush=True)
        for order in a.orders.split(","):
            root = os.path.join(work, f"cluster-{order}")
            proc, info = start_cluster(root, shlex.split(a.up_args))
            try:
                cmd = [os.path.join(os.path.dirname(sys.executable), "swiftlite-migrate"), tree,
                       "--url", info["proxy"]["auth_url"], "--user", "test:tester",
                       "--key", "testing", "--container", "images",
                       "--ring", os.path.join(info["etc_dir"], "object.ring.gz"),
                       "--order", order, "--concurrency", str(a.concurrency),
                       "--state", os.path.join(work, f"state-{order}")]
                print("$ " + " ".join(cmd), flush=True)
                r = subprocess.run(cmd, capture_output=True, text=True)
                summary = [ln for ln in r.stdout.splitlines() if ln.startswith("summary:")]
                print("\n".join(summary) or r.stdout[-2000:] + r.stderr[-2000:], flush=True)
                m = SUMMARY.search(summary[-1]) if summary else None
                if m:
                    rows.append((order, int(m.group(1)), float(m.group(3)),
                                 float(m.group(4)), r.returncode))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| order | objects | seconds | objects/s | vs path | exit |")
    print("|---|---:|---:|---:|---:|---:|")
    base = next((r[3] for r in rows if r[0] == "path"), None)
    for order, n, secs, rate, rc in rows:
        rel = f"{rate / base:.2f}x" if base else "-"
        print(f"| {order} | {n} | {secs:.0f} | {rate:.1f} | {rel} | {rc} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
