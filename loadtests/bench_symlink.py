"""GET ops/s of 64 KiB objects read through a symlink against plain GETs, interleaved rounds.

usage: python loadtests/bench_symlink.py AUTH_URL [--rounds 6] [--seconds 3] [--conc 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

import aiohttp


async def run(args) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(args.auth, headers={"X-Auth-User": "test:tester",
                                             "X-Auth-Key": "testing"}) as r:
            url, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
        h = {"X-Auth-Token": token}
        cont = f"{url}/bench-sym-{uuid.uuid4().hex[:6]}"
        await (await s.put(cont, headers=h)).release()
        n = 32
        for i in range(n):
            await (await s.put(f"{cont}/o{i}", data=os.urandom(65536), headers=h)).release()
            await (await s.put(f"{cont}/l{i}", data=b"", headers={
                **h, "X-Symlink-Target": f"{cont.rsplit('/', 1)[1]}/o{i}"})).release()

        async def measure(kind: str) -> float:
            done = 0
            end = time.monotonic() + args.seconds

            async def worker(w: int) -> None:
                nonlocal done
                i = w
                while time.monotonic() < end:
                    async with s.get(f"{cont}/{kind}{i % n}", headers=h) as r:
                        assert r.status == 200 and len(await r.read()) == 65536
                    done += 1
                    i += args.conc
            start = time.monotonic()
            await asyncio.gather(*(worker(w) for w in range(args.conc)))
            return done / (time.monotonic() - start)

        plain, link = [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            plain.append(await measure("o"))
            link.append(await measure("l"))
        p, lk = sum(plain) / len(plain), sum(link) / len(link)
        print(f"config: 64 KiB objects, {n} names, concurrency {args.conc}, "
              f"{args.rounds} x {args.seconds}s rounds each, interleaved")
        print(f"plain GET   {p:8.1f} ops/s  rounds {[round(x) for x in plain]}")
        print(f"symlink GET {lk:8.1f} ops/s  rounds {[round(x) for x in link]}")
        print(f"ratio symlink/plain: {lk / p:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("auth")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conc", type=int, default=16)
    asyncio.run(run(ap.parse_args()))
