"""GET/s of a Zipf-distributed image read mix through a proxy with the hot-object cache on,
against the same mix through a proxy with it off, on one cluster, rounds interleaved.

usage: python loadtests/bench_cache.py [--objects 100000] [--size 16384] [--zipf 1.1]
           [--cache-size 64M] [--cache-ttl SECONDS] [--no-memcached] [--rounds 3] [--seconds 5]
           [--conc 32] [--workers 1] [--warmup 30] [--no-local-reads] [--root /tmp/bench-cache]
           [--locust SECONDS]

Starts `swiftlite up --no-daemons` under --root (deleted first), fills one container with
--objects images of --size bytes through its proxy, starts a second proxy on the same rings
with `object_cache_size` set, then runs --rounds rounds of --seconds per proxy (off, on,
off, on, ...): each of --conc clients GETs names drawn from a Zipf(s) law over the images
(rank 1 the most popular; ranks are shuffled over names). Each proxy first gets --warmup
seconds of the mix; the first round of each is also a warm-up, reported but left out of the
medians; the cached proxy's hit ratio over the measured rounds (its
`swiftlite_proxy_object_cache_lookups_total`) is printed after them. With memcached
installed (and no --no-memcached), both proxies share one memcached (memcache_servers), as
proxies of a multi-host cluster do: writes are shared through it
(swiftlite/proxy/caches/write_log.py), so entries live object_cache_ttl's default of 300 s.

`--locust SECONDS` runs the locust image workload (loadtests/locustfile.py: each of --conc
users uploads image-sized objects and reads its own at 9 GETs per PUT) instead of the Zipf
mix, for SECONDS per round through each proxy, rounds interleaved; it needs locust
(`pip install -e '.[load]'`) and fills nothing first.
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
from csv import DictReader as csv_rows

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


def lookups(port: int) -> dict[str, float]:
    """The cached proxy's object-cache lookups so far, by result (hit, miss, unsynced)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "swiftlite_proxy_object_cache_lookups_total":
                out[sample.labels["result"]] = sample.value
    return out


def auth(auth_url: str) -> tuple[str, str]:
    import urllib.request
    req = urllib.request.Request(auth_url, headers={"X-Auth-User": "test:tester",
                                                    "X-Auth-Key": "testing"})
    with urllib.request.urlopen(req) as r:
        return r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]


def wait_auth(auth_url: str, timeout: float = 30) -> None:
    """Until the proxy at `auth_url` answers an auth request."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            auth(auth_url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def locust_once(port: int, seconds: float, users: int, csv: str) -> tuple[float, float]:
    """One headless locust run of the image workload; (GET/s, PUT/s) from its stats."""
    locust = shutil.which("locust") or os.path.join(os.path.dirname(sys.executable), "locust")
    if not os.path.exists(locust):
        raise SystemExit("locust is not installed: pip install -e '.[load]'")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([locust, "-f", os.path.join(here, "locustfile.py"), "--headless",
                    "-u", str(users), "-r", str(users), "-t", f"{seconds:g}s",
                    "--host", f"http://127.0.0.1:{port}", "--csv", csv, "--only-summary"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rates = {"GET": 0.0, "PUT": 0.0}
    with open(csv + "_stats.csv") as f:
        for row in csv_rows(f):
            if row["Name"] in ("GET image", "PUT image"):
                rates[row["Type"]] = float(row["Requests/s"])
                if int(row["Failure Count"]):
                    raise SystemExit(f"locust: {row['Failure Count']} failed {row['Name']}")
    return rates["GET"], rates["PUT"]


def locust_rounds(args: argparse.Namespace, ports: dict[str, int], cache_bytes: int) -> None:
    rates: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for r in range(args.rounds + 1):
        for name, port in ports.items():
            rates[name].append(locust_once(port, args.locust, args.conc,
                                           os.path.join(args.root, f"locust-{name}-{r}")))
    print(f"config: locust image workload (loadtests/locustfile.py: 9 GETs of a user's own "
          f"uploads per PUT), {args.conc} users, {args.rounds} x {args.locust:g} s rounds "
          f"per proxy (+1 warm-up round), interleaved; proxy workers {args.workers}; cache "
          f"{args.cache_size} ({cache_bytes} B), local reads "
          f"{'off' if args.no_local_reads else 'on'}")
    med = {k: (statistics.median(g for g, _ in v[1:]), statistics.median(p for _, p in v[1:]))
           for k, v in rates.items()}
    for k, v in rates.items():
        print(f"cache {k:3}  {med[k][0]:8.1f} GET/s {med[k][1]:7.1f} PUT/s  GET rounds "
              f"[{', '.join(f'{g:.0f}' for g, _ in v)}] (first: warm-up)")
    print(f"ratio on/off: GET {med['on'][0] / med['off'][0]:.2f}, "
          f"PUT {med['on'][1] / med['off'][1]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=16 * 1024)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--cache-size", default="64M")
    ap.add_argument("--cache-ttl", type=float, default=None,
                    help="object_cache_ttl (default: the server's: 300 s with memcached, "
                         "5 s without)")
    ap.add_argument("--no-memcached", action="store_true",
                    help="no memcached: another host's writes are seen only at the TTL")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--conc", type=int, default=32)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=30.0,
                    help="seconds of the same mix through each proxy before the rounds")
    ap.add_argument("--no-local-reads", action="store_true",
                    help="both proxies read through the object servers (as a proxy host "
                         "apart from the storage nodes does), not the devices themselves")
    ap.add_argument("--root", default="/tmp/bench-cache")
    ap.add_argument("--locust", type=float, default=0,
                    help="seconds per round of the locust image workload instead of the "
                         "Zipf mix (0: the Zipf mix)")
    args = ap.parse_args()
    cache_bytes = Section({"v": args.cache_size}).get_size("v", 0)
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    py = [sys.executable, "-m", "swiftlite.cli"]
    up, info = start_cluster(args.root, ["--workers", str(args.workers),
                                         *(["--no-local-reads"] if args.no_local_reads else [])])
    cached = memcached = plain = None
    try:
        mc_binary = None if args.no_memcached else shutil.which("memcached")
        base = {}
        if mc_binary:
            mport = free_port()
            memcached = subprocess.Popen(
                [mc_binary, "-l", "127.0.0.1", "-p", str(mport), "-U", "0", "-m", "64",
                 *(["-u", "nobody"] if os.geteuid() == 0 else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            base["memcache_servers"] = f"127.0.0.1:{mport}"

        def proxy(name: str, options: dict[str, str]) -> tuple[subprocess.Popen, int]:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(os.path.join(info["etc_dir"], "proxy.conf"))
            for k, v in {**base, **options}.items():
                parser["proxy-server"][k] = v
            conf = os.path.join(info["etc_dir"], f"proxy-{name}.conf")
            with open(conf, "w") as f:
                parser.write(f)
            p = free_port()
            return subprocess.Popen(py + ["server", "proxy", "-c", conf, "--port", str(p)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                    start_new_session=True), p

        on = {"object_cache_size": str(cache_bytes)}
        if args.cache_ttl is not None:
            on["object_cache_ttl"] = str(args.cache_ttl)
        cached, port = proxy("cached", on)
        plain, plain_port = proxy("plain", {})  # the same config (memcached) but the cache
        if args.locust:
            for p in (port, plain_port):
                wait_auth(f"http://127.0.0.1:{p}/auth/v1.0")
            locust_rounds(args, {"off": plain_port, "on": port}, cache_bytes)
            return
        url, token = auth(info["proxy"]["auth_url"])
        t0 = time.monotonic()
        asyncio.run(fill(url, token, args.objects, args.size, 64))
        fill_s = time.monotonic() - t0
        cached_url = url.replace(f":{info['proxy']['port']}/", f":{port}/")
        url = url.replace(f":{info['proxy']['port']}/", f":{plain_port}/")
        for p in (port, plain_port):
            wait_auth(f"http://127.0.0.1:{p}/auth/v1.0")
        cdf = zipf_cdf(args.objects, args.zipf)
        order = list(range(args.objects))
        random.Random(7).shuffle(order)
        for u in (url, cached_url):  # the cache's steady state, and the page cache's
            asyncio.run(measure(u, token, order, cdf, args.warmup, args.conc))
        rates: dict[str, list[float]] = {"off": [], "on": []}
        looked: list[dict[str, float]] = []
        for r in range(args.rounds + 1):
            for name, u in (("off", url), ("on", cached_url)):
                if name == "on" and r == 1:
                    looked.append(lookups(port))
                rates[name].append(asyncio.run(measure(u, token, order, cdf, args.seconds,
                                                        args.conc)))
        looked.append(lookups(port))
        print(f"config: {args.objects} objects of {args.size} B, Zipf({args.zipf}) reads, "
              f"{args.conc} clients, {args.rounds} x {args.seconds:.0f} s rounds per proxy "
              f"(+1 warm-up round, after {args.warmup:.0f} s of warm-up each), "
              f"interleaved; proxy workers {args.workers}; cache "
              f"{args.cache_size} ({cache_bytes} B), ttl "
              f"{'server default' if args.cache_ttl is None else f'{args.cache_ttl:g} s'}, "
              f"memcached {'on (write log)' if memcached else 'off'}, max object 1 MiB, "
              f"local reads {'off' if args.no_local_reads else 'on'}; "
              f"fill took "
              f"{fill_s:.0f} s ({args.objects / fill_s:.0f} PUT/s)")
        med = {k: statistics.median(v[1:]) for k, v in rates.items()}
        for k, v in rates.items():
            print(f"cache {k:3}  {med[k]:8.1f} GET/s  rounds "
                  f"[{', '.join(f'{x:.0f}' for x in v)}] (first: warm-up)")
        print(f"ratio on/off: {med['on'] / med['off']:.2f}")
        seen = {k: looked[1].get(k, 0) - looked[0].get(k, 0) for k in looked[1]}
        if sum(seen.values()):
            print("cache lookups in the measured rounds: " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(seen.items())) +
                f"; hit ratio {seen.get('hit', 0) / sum(seen.values()):.3f}")
    finally:
        for p in (cached, plain):
            if p is not None:
                stop_cluster(p)
        if memcached is not None:
            memcached.terminate()
            memcached.wait(10)
        stop_cluster(up)
        shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
