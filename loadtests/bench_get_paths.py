"""GET ops/s of 64 KiB objects by four paths in one run: an authenticated GET, a tempurl link,
a symlink, and (if the cluster has object versioning) a versioned object. Rounds are
interleaved (A B C D A B C D ...), so machine drift hits every path alike; each path's ratio
to the authenticated GET is printed with the configuration.

usage: python loadtests/bench_get_paths.py AUTH_URL [--rounds 6] [--seconds 3] [--conc 16]
                                          [--user test:tester] [--key testing]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import os
import statistics
import time
import uuid
from urllib.parse import urlsplit

import aiohttp

KEY = "bench-tempurl-key"
NAMES = 32
SIZE = 64 * 1024


async def setup(s: aiohttp.ClientSession, url: str, h: dict[str, str]) -> dict[str, list[str]]:
    """The URLs each path reads, and the headers it sends (tempurl: none)."""
    await (await s.post(url, headers={**h, "X-Account-Meta-Temp-URL-Key": KEY})).release()
    cname = f"bench-paths-{uuid.uuid4().hex[:6]}"
    vname = cname + "-versioned"
    await (await s.put(f"{url}/{cname}", headers=h)).release()
    async with s.put(f"{url}/{vname}", headers={**h, "X-Versions-Enabled": "true"}) as r:
        versioned = r.status // 100 == 2
    expires = int(time.time()) + 3600
    paths: dict[str, list[str]] = {"authenticated": [], "tempurl": [], "symlink": []}
    if versioned:
        paths["versioned"] = []
    for i in range(NAMES):
        body = os.urandom(SIZE)
        await (await s.put(f"{url}/{cname}/o{i}", data=body, headers=h)).release()
        await (await s.put(f"{url}/{cname}/l{i}", data=b"", headers={
            **h, "X-Symlink-Target": f"{cname}/o{i}"})).release()
        path = f"{urlsplit(url).path}/{cname}/o{i}"
        sig = hmac.new(KEY.encode(), f"GET\n{expires}\n{path}".encode(),
                       hashlib.sha256).hexdigest()
        paths["authenticated"].append(f"{url}/{cname}/o{i}")
        paths["symlink"].append(f"{url}/{cname}/l{i}")
        paths["tempurl"].append(f"{url}/{cname}/o{i}?temp_url_sig={sig}"
                                f"&temp_url_expires={expires}")
        if versioned:
            for _ in range(2):  # a current version over an older one
                await (await s.put(f"{url}/{vname}/o{i}", data=body, headers=h)).release()
            paths["versioned"].append(f"{url}/{vname}/o{i}")
    return paths


async def measure(s: aiohttp.ClientSession, urls: list[str], headers: dict[str, str],
                  seconds: float, conc: int) -> float:
    done = 0
    end = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        i = w
        while time.monotonic() < end:
            async with s.get(urls[i % len(urls)], headers=headers) as r:
                if r.status != 200 or len(await r.read()) != SIZE:
                    raise RuntimeError(f"GET {urls[i % len(urls)]}: {r.status}")
            done += 1
            i += conc
    start = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(conc)))
    return done / (time.monotonic() - start)


def bench_args(doc: str) -> argparse.Namespace:
    """--rounds, --seconds, --conc: the options every interleaved GET benchmark takes."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conc", type=int, default=32)
    return ap.parse_args()


async def interleaved(s: aiohttp.ClientSession,
                      targets: dict[str, tuple[list[str], dict[str, str]]],
                      args: argparse.Namespace) -> dict[str, list[float]]:
    """GET/s of each target (its URLs, its headers), rounds interleaved A B A B ..."""
    rates: dict[str, list[float]] = {k: [] for k in targets}
    for _ in range(args.rounds):
        for kind, (urls, h) in targets.items():
            rates[kind].append(await measure(s, urls, h, args.seconds, args.conc))
    return rates


def print_medians(rates: dict[str, list[float]], label: str = "") -> dict[str, float]:
    """Each kind's median GET/s and its rounds, printed; the medians returned."""
    med = {k: statistics.median(v) for k, v in rates.items()}
    for kind, got in rates.items():
        print(f"{label}{kind:10} {med[kind]:8.1f} GET/s  rounds {[round(x) for x in got]}")
    return med


async def run(args: argparse.Namespace) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(args.auth, headers={"X-Auth-User": args.user,
                                             "X-Auth-Key": args.key}) as r:
            url, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
        h = {"X-Auth-Token": token}
        paths = await setup(s, url, h)
        rates: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(args.rounds):
            for kind, urls in paths.items():
                rates[kind].append(await measure(s, urls, {} if kind == "tempurl" else h,
                                                 args.seconds, args.conc))
        print(f"config: {args.auth}, {SIZE // 1024} KiB objects, {NAMES} names, concurrency "
              f"{args.conc}, {args.rounds} x {args.seconds}s rounds per path, interleaved; "
              "sha256 tempurl links")
        base = statistics.median(rates["authenticated"])
        for kind, got in rates.items():
            med = statistics.median(got)
            print(f"{kind:14} {med:8.1f} ops/s  ratio {med / base:.3f}  "
                  f"rounds {[round(x) for x in got]}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("auth")
    ap.add_argument("--user", default="test:tester")
    ap.add_argument("--key", default="testing")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conc", type=int, default=16)
    asyncio.run(run(ap.parse_args()))
