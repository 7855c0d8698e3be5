"""Seconds from SIGTERM to exit of `swiftlite up` right after a load, with the object auditor
in the middle of a pass (the slow stop of issue 18), and which processes went last.

usage: python loadtests/bench_stop.py [--root /tmp/bench-stop] [--seconds 20] [--conc 16]

Starts a fresh `swiftlite up --port 0` (daemons on, default workers) under --root (deleted
first), PUTs 64 KiB objects for --seconds, waits until the auditor's second pass (30 s after
start-up) is under way, sends SIGTERM to `swiftlite up` and times its exit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import time

import aiohttp
from up import start_cluster, stop_cluster

SIZE = 64 * 1024


async def load(auth_url: str, seconds: float, conc: int) -> int:
    async with aiohttp.ClientSession() as s:
        async with s.get(auth_url, headers={"X-Auth-User": "test:tester",
                                            "X-Auth-Key": "testing"}) as r:
            h = {"X-Auth-Token": r.headers["X-Auth-Token"]}
            url = r.headers["X-Storage-Url"]
        await (await s.put(f"{url}/stop-bench", headers=h)).release()
        body = os.urandom(SIZE)
        end = time.monotonic() + seconds
        done = 0

        async def worker(k: int) -> None:
            nonlocal done
            i = 0
            while time.monotonic() < end:
                async with s.put(f"{url}/stop-bench/w{k}-{i}", data=body, headers=h) as r:
                    await r.read()
                i += 1
                done += 1

        await asyncio.gather(*(worker(k) for k in range(conc)))
        return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/bench-stop")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--conc", type=int, default=16)
    args = ap.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    started = time.monotonic()
    up, info = start_cluster(args.root, [], daemons=True)
    try:
        n = asyncio.run(load(info["proxy"]["auth_url"], args.seconds, args.conc))
        # The auditor's second pass starts 30 s after its first: be well inside it.
        time.sleep(max(0.0, 37 - (time.monotonic() - started)))
        pids = {"proxy": info["proxy"]["pid"]}
        for node in info["nodes"]:
            for name, entry in {**node["servers"], **node["daemons"]}.items():
                pids[f"{node['name']}-{name}"] = entry["pid"]
        t0 = time.monotonic()
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=120)
        took = time.monotonic() - t0
        # `up` reaps its children as they exit; its own exit is when the last one went.
        print(f"config: swiftlite up --port 0 (default workers, daemons on), {args.conc} "
              f"clients PUT {SIZE // 1024} KiB objects for {args.seconds:.0f} s ({n} PUTs), "
              "SIGTERM 37 s after start-up (object auditor mid-pass)")
        print(f"SIGTERM to exit of swiftlite up: {took:.2f} s (exit status {up.returncode})")
        left = [k for k, pid in pids.items() if os.path.exists(f"/proc/{pid}")]
        if left:
            print(f"still running after up exited: {', '.join(left)}")
    finally:
        stop_cluster(up)


if __name__ == "__main__":
    main()
