"""GET/s of a Zipf-distributed image read mix through a proxy with the hot-object cache on,
against the same mix through a proxy with it off, on one cluster, rounds interleaved.

usage: python loadtests/bench_cache.py [--objects 100000] [--size 16384] [--zipf 1.1]
           [--cache-size 64M] [--cache-ttl 5] [--rounds 3] [--seconds 5] [--conc 32] [--workers 1]
           [--warmup 30] [--root /tmp/bench-cache]

Starts `swiftlite up --no-daemons` under --root (deleted first), fills one container with
--objects images of --size bytes through its proxy, starts a second proxy on the same rings
with `object_cache_size` set, then runs --rounds rounds of --seconds per proxy (off, on,
off, on, ...): each of --conc clients GETs names drawn from a Zipf(s) law over the images
(rank 1 the most popular; ranks are shuffled over names). Each proxy first gets --warmup
seconds of the mix; the first round of each is also a warm-up, reported but left out of the
medians.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import configparser
import itertools
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time

import aiohttp
from up import start_cluster, stop_cluster

from swiftlite.common.config import Section


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zipf_cdf(n: int, s: float) -> list[float]:
    weights = [1.0 / (k ** s) for k in range(1, n + 1)]
    total = sum(weights)
    return list(itertools.accumulate(w / total for w in weights))


async def fill(url: str, token: str, n: int, size: int, conc: int) -> None:
    h = {"X-Auth-Token": token}
    body = os.urandom(size)
    names = iter(range(n))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:
        await (await s.put(f"{url}/zipf", headers=h)).release()

        async def worker() -> None:
            for i in names:
                async with s.put(f"{url}/zipf/img{i:07d}.jpg", data=body, headers=h) as r:
                    await r.read()
                    if r.status != 201:
                        raise SystemExit(f"PUT img{i}: {r.status}")

        await asyncio.gather(*(worker() for _ in range(conc)))


async def measure(url: str, token: str, order: list[int], cdf: list[float], seconds: float,
                  conc: int) -> float:
    h = {"X-Auth-Token": token}
    done = 0
    end = time.monotonic() + seconds
    rnd = random.Random()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:
        async def worker() -> None:
            nonlocal done
            while time.monotonic() < end:
                i = order[min(bisect.bisect_left(cdf, rnd.random()), len(order) - 1)]
                async with s.get(f"{url}/zipf/img{i:07d}.jpg", headers=h) as r:
                    await r.read()
                    if r.status != 200:
                        raise SystemExit(f"GET img{i}: {r.status}")
                done += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return done / (time.monotonic() - t0)


def auth(auth_url: str) -> tuple[str, str]:
    import urllib.request
    req = urllib.request.Request(auth_url, headers={"X-Auth-User": "test:tester",
                                                    "X-Auth-Key": "testing"})
    with urllib.request.urlopen(req) as r:
        return r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=16 * 1024)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--cache-size", default="64M")
    ap.add_argument("--cache-ttl", type=float, default=5.0,
                    help="object_cache_ttl: how long a write through another proxy host "
                         "may go unseen, and so how long an entry may be served")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--conc", type=int, default=32)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=30.0,
                    help="seconds of the same mix through each proxy before the rounds")
    ap.add_argument("--root", default="/tmp/bench-cache")
    args = ap.parse_args()
    cache_bytes = Section({"v": args.cache_size}).get_size("v", 0)
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    py = [sys.executable, "-m", "swiftlite.cli"]
    up, info = start_cluster(args.root, ["--workers", str(args.workers)])
    cached = None
    try:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(os.path.join(info["etc_dir"], "proxy.conf"))
        parser["proxy-server"]["object_cache_size"] = str(cache_bytes)
        parser["proxy-server"]["object_cache_ttl"] = str(args.cache_ttl)
        conf = os.path.join(info["etc_dir"], "proxy-cached.conf")
        with open(conf, "w") as f:
            parser.write(f)
        port = free_port()
        cached = subprocess.Popen(py + ["server", "proxy", "-c", conf, "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        url, token = auth(info["proxy"]["auth_url"])
        t0 = time.monotonic()
        asyncio.run(fill(url, token, args.objects, args.size, 64))
        fill_s = time.monotonic() - t0
        cached_url = url.replace(f":{info['proxy']['port']}/", f":{port}/")
        deadline = time.monotonic() + 30
        while True:
            try:
                auth(f"http://127.0.0.1:{port}/auth/v1.0")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        cdf = zipf_cdf(args.objects, args.zipf)
        order = list(range(args.objects))
        random.Random(7).shuffle(order)
        for u in (url, cached_url):  # the cache's steady state, and the page cache's
            asyncio.run(measure(u, token, order, cdf, args.warmup, args.conc))
        rates: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.rounds + 1):
            for name, u in (("off", url), ("on", cached_url)):
                rates[name].append(asyncio.run(measure(u, token, order, cdf, args.seconds,
                                                        args.conc)))
        print(f"config: {args.objects} objects of {args.size} B, Zipf({args.zipf}) reads, "
              f"{args.conc} clients, {args.rounds} x {args.seconds:.0f} s rounds per proxy "
              f"(+1 warm-up round, after {args.warmup:.0f} s of warm-up each), "
              f"interleaved; proxy workers {args.workers}; cache "
              f"{args.cache_size} ({cache_bytes} B), ttl {args.cache_ttl:g} s, max object "
              f"1 MiB; fill took "
              f"{fill_s:.0f} s ({args.objects / fill_s:.0f} PUT/s)")
        med = {k: statistics.median(v[1:]) for k, v in rates.items()}
        for k, v in rates.items():
            print(f"cache {k:3}  {med[k]:8.1f} GET/s  rounds "
                  f"[{', '.join(f'{x:.0f}' for x in v)}] (first: warm-up)")
        print(f"ratio on/off: {med['on'] / med['off']:.2f}")
    finally:
        if cached is not None:
            stop_cluster(cached)
        stop_cluster(up)
        shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
