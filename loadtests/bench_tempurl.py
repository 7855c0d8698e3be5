"""GET ops/s of 64 KiB objects through a tempurl link against authenticated GETs, in
interleaved rounds (ABAB...), so machine drift hits both alike.

usage: python loadtests/bench_tempurl.py AUTH_URL [--rounds 6] [--seconds 3] [--conc 16]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import os
import time
import uuid
from urllib.parse import urlsplit

import aiohttp

KEY = "bench-tempurl-key"


async def run(args) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(args.auth, headers={"X-Auth-User": "test:tester",
                                             "X-Auth-Key": "testing"}) as r:
            url, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
        h = {"X-Auth-Token": token}
        await (await s.post(url, headers={**h, "X-Account-Meta-Temp-URL-Key": KEY})).release()
        cname = f"bench-tu-{uuid.uuid4().hex[:6]}"
        cont = f"{url}/{cname}"
        await (await s.put(cont, headers=h)).release()
        n = 32
        expires = int(time.time()) + 3600
        links = []
        for i in range(n):
            await (await s.put(f"{cont}/o{i}", data=os.urandom(65536), headers=h)).release()
            path = f"{urlsplit(url).path}/{cname}/o{i}"
            sig = hmac.new(KEY.encode(), f"GET\n{expires}\n{path}".encode(),
                           hashlib.sha256).hexdigest()
            links.append(f"{cont}/o{i}?temp_url_sig={sig}&temp_url_expires={expires}")

        async def measure(tempurl: bool) -> float:
            done = 0
            end = time.monotonic() + args.seconds

            async def worker(w: int) -> None:
                nonlocal done
                i = w
                while time.monotonic() < end:
                    if tempurl:
                        req = s.get(links[i % n])
                    else:
                        req = s.get(f"{cont}/o{i % n}", headers=h)
                    async with req as r:
                        assert r.status == 200 and len(await r.read()) == 65536
                    done += 1
                    i += args.conc
            start = time.monotonic()
            await asyncio.gather(*(worker(w) for w in range(args.conc)))
            return done / (time.monotonic() - start)

        plain, link = [], []
        for _ in range(args.rounds):
            plain.append(await measure(False))
            link.append(await measure(True))
        p, lk = sum(plain) / len(plain), sum(link) / len(link)
        print(f"config: {args.auth}, 64 KiB objects, {n} names, concurrency {args.conc}, "
              f"{args.rounds} x {args.seconds}s rounds each, interleaved; sha256 links")
        print(f"authenticated GET {p:8.1f} ops/s  rounds {[round(x) for x in plain]}")
        print(f"tempurl GET       {lk:8.1f} ops/s  rounds {[round(x) for x in link]}")
        print(f"ratio tempurl/authenticated: {lk / p:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("auth")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conc", type=int, default=16)
    asyncio.run(run(ap.parse_args()))
