"""Server CPU per request, by role: where a PUT's or GET's CPU goes.

Starts a fresh `swiftlite up` (free ports, no daemons), runs loadtests/bench.py against it,
and reads each server's CPU time (user and system, summed over its worker processes) from
/proc before and after every phase. Prints milliseconds of CPU per request for the proxy,
object, container and account servers, and for the benchmark client itself.

    python loadtests/cpu_per_op.py [--size 64k] [--count 2000] [-c 32] [-- UP_ARGS...]

e.g. `-- --workers 1` to measure the single-process shape. Linux only (reads /proc).

`--anchor DIR` measures the running OpenStack Swift anchor instead (`../shared/anchors/swift/`,
its servers' pids from DIR/run/*.pid, auth at `--anchor-url`): with `--apis swift,s3` and
s3api in its proxy (loadtests/swift_s3api.py), what Swift's s3api costs per request.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_swift import start_cluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _tree(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu(pids: list[int]) -> tuple[float, float]:
    """(user, system) seconds, summed over the processes (live ones; children reaped are
    counted through cutime/cstime of their parent)."""
    user = sys_ = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11]) / TICK
        sys_ += int(fields[12]) / TICK
    return user, sys_


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="64k")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("-c", "--concurrency", type=int, default=32)
    p.add_argument("--phases", default="put,get")
    p.add_argument("--apis", default="swift", help="comma list of swift,s3 (bench.py --api)")
    p.add_argument("--anchor", help="measure the running Swift anchor of this ANCHOR_DIR")
    p.add_argument("--anchor-url", default="http://127.0.0.1:16080/auth/v1.0")
    p.add_argument("up_args", nargs="*", help="extra `swiftlite up` arguments (after --)")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="swiftlite-cpu-")
    proc = None
    try:
        kids = _children()
        roles: dict[str, list[int]] = {}
        if a.anchor:
            run = os.path.join(a.anchor, "run")
            for role in ("proxy", "account", "container", "object"):
                for name in sorted(os.listdir(run)):
                    if name == f"{role}.pid" or name.startswith(f"{role}-"):
                        with open(os.path.join(run, name)) as f:
                            roles.setdefault(role, []).extend(_tree(int(f.read()), kids))
            auth_url = a.anchor_url
            print(f"# Swift anchor {a.anchor}; size={a.size} count={a.count} "
                  f"c={a.concurrency} cpus={os.cpu_count()}")
        else:
            proc, info = start_cluster(os.path.join(work, "c"), a.up_args)
            kids = _children()
            roles["proxy"] = _tree(info["proxy"]["pid"], kids)
            for node in info["nodes"]:
                for role, srv in node["servers"].items():
                    roles.setdefault(role, []).extend(_tree(srv["pid"], kids))
            auth_url = info["proxy"]["auth_url"]
            print(f"# swiftlite up {' '.join(a.up_args) or '(defaults)'}; size={a.size} "
                  f"count={a.count} c={a.concurrency} cpus={os.cpu_count()}")
        print(f"{'phase':6} {'ops/s':>8} " + " ".join(f"{r + ' u/s ms':>17}" for r in roles)
              + f" {'client ms':>10} {'total ms':>9}")
        runs = [(ph, api) for ph in a.phases.split(",") for api in a.apis.split(",")]
        for phase, api in runs:
            container = f"cpu-{api}-{os.getpid()}"  # a fresh one on a long-lived anchor
            before = {r: cpu(pids) for r, pids in roles.items()}
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = os.path.join(work, f"{phase}-{api}.json")
            cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--url", auth_url,
                   "--size", a.size, "--count", str(a.count),
                   "-c", str(a.concurrency), "--phases", phase, "--container", container,
                   "--api", api, "--json", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout, r.stderr)
                return 1
            after = {r_: cpu(pids) for r_, pids in roles.items()}
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            # the client's CPU includes its start-up and auth: a small overcount
            client = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
            with open(out) as f:
                rep = json.load(f)
            res = rep["results"]["A"][phase]
            ops = res["ops"]
            cells = []
            total = 0.0
            for role in roles:
                du = (after[role][0] - before[role][0]) * 1000 / ops
                ds = (after[role][1] - before[role][1]) * 1000 / ops
                total += du + ds
                cells.append(f"{du:8.2f}/{ds:<8.2f}")
            client_ms = f"{client * 1000 / ops:10.2f}"
            label = phase if api == "swift" else f"{phase}/{api}"
            print(f"{label:12} {res['ops_s']:8.1f} " + " ".join(f"{c:>17}" for c in cells)
                  + f" {client_ms} {total:9.2f}", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
