"""Image variants through a real proxy: first-time 320 px WebP variants per second of
12-megapixel JPEGs at c=16, against the same pipeline without the store (Pillow in a process
pool of the same size: a local imgproxy-equivalent), and cached variant GETs against plain
GETs of an object of the variant's size.

usage: python loadtests/bench_variants.py [--images 12] [--per-image 4] [--conc 16]
           [--seconds 5] [--rounds 3] [--image-workers 2] [--root /tmp/bench-variants]

Starts `swiftlite up --no-daemons --workers 1` under --root (deleted first), uploads
--images generated 4000 x 3000 JPEGs, then:
1. bare: --conc requests at a time of `render()` (swiftlite/image/render.py) in a
   ProcessPoolExecutor of --image-workers processes over the same bytes: the library's rate
   with no HTTP, no storage, no cache;
2. first-time: --conc clients GET --images x --per-image variants never asked for before
   (`resize:fit:320:320/format:webp/quality:<q>`, one q per pass over the images): each is
   read, decoded, encoded, stored and served;
3. cached against plain: --rounds interleaved rounds of --seconds each of --conc clients
   GETting one stored variant, then one plain object of the same size.

The proxy runs its default `image_workers = 2`; --image-workers sizes the bare pool only.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import shutil
import statistics
import sys
import time

import aiohttp
from bench_images import make_images
from up import start_cluster, stop_cluster

from swiftlite.image.grammar import parse
from swiftlite.image.limits import Limits
from swiftlite.image.render import render

VARIANT = "resize:fit:320:320/format:webp/quality:{q}"


async def auth(session: aiohttp.ClientSession, auth_url: str) -> tuple[str, str]:
    async with session.get(auth_url, headers={"X-Auth-User": "test:tester",
                                              "X-Auth-Key": "testing"}) as r:
        assert r.status == 200, r.status
        return r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]


async def run_all(jobs: list, conc: int, one) -> float:
    """Seconds to run every job, `conc` at a time."""
    queue = list(jobs)
    started = time.perf_counter()

    async def worker() -> None:
        while queue:
            await one(queue.pop())
    await asyncio.gather(*(worker() for _ in range(conc)))
    return time.perf_counter() - started


async def timed_gets(session, url: str, headers: dict, conc: int, seconds: float) -> float:
    """GETs per second of `url` by `conc` clients for `seconds`."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            async with session.get(url, headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status
            done += 1
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return done / (time.perf_counter() - started)


async def bench(args, info: dict, paths: list[str]) -> None:
    blobs = [open(p, "rb").read() for p in paths]
    # 1. the bare pipeline.
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(args.image_workers) as pool:
        variants = [parse(VARIANT.format(q=70 + k)) for k in range(args.per_image)]
        await loop.run_in_executor(pool, render, blobs[0], variants[0], Limits())  # warm
        jobs = [(b, v) for v in variants for b in blobs]

        async def bare(job) -> None:
            await loop.run_in_executor(pool, render, job[0], job[1], Limits())
        took = await run_all(jobs, args.conc, bare)
    bare_rate = len(jobs) / took
    print(f"bare Pillow pipeline ({args.image_workers} processes): {len(jobs)} variants in "
          f"{took:.1f} s = {bare_rate:.1f}/s")

    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        url, token = await auth(session, info["proxy"]["auth_url"])
        h = {"X-Auth-Token": token}
        async with session.put(f"{url}/bench", headers=h) as r:
            assert r.status in (201, 202)
        for i, data in enumerate(blobs):
            async with session.put(f"{url}/bench/img{i}.jpg", data=data,
                                   headers={**h, "Content-Type": "image/jpeg"}) as r:
                assert r.status == 201, r.status
        # Warm: the proxy's pool starts its workers on first use.
        async with session.get(f"{url}/bench/img0.jpg", params={"image": "resize:width:8"},
                               headers=h) as r:
            assert r.status == 200, r.status
        # 2. first-time variants.
        jobs = [(i, 70 + k) for k in range(args.per_image) for i in range(len(blobs))]

        async def first(job) -> None:
            i, q = job
            async with session.get(f"{url}/bench/img{i}.jpg",
                                   params={"image": VARIANT.format(q=q)}, headers=h) as r:
                await r.read()
                assert r.status == 200, (r.status, await r.text())
        took = await run_all(jobs, args.conc, first)
        rate = len(jobs) / took
        print(f"first-time variants through the proxy, c={args.conc}: {len(jobs)} in "
              f"{took:.1f} s = {rate:.1f}/s ({rate / bare_rate:.2f}x the bare pipeline)")
        # 3. cached variant against a plain object of its size.
        cached_url = f"{url}/bench/img0.jpg?image=" + VARIANT.format(q=70).replace("/", "%2F")
        async with session.get(cached_url, headers=h) as r:
            body = await r.read()
        async with session.put(f"{url}/bench/plain.webp", data=body,
                               headers={**h, "Content-Type": "image/webp"}) as r:
            assert r.status == 201
        cached, plain = [], []
        for _ in range(args.rounds):
            cached.append(await timed_gets(session, cached_url, h, args.conc, args.seconds))
            plain.append(await timed_gets(session, f"{url}/bench/plain.webp", h, args.conc,
                                          args.seconds))
        c, p = statistics.median(cached), statistics.median(plain)
        print(f"GET of a {len(body)}-byte variant, c={args.conc}: cached variant "
              f"{c:.0f}/s, plain object {p:.0f}/s: {c / p:.2f}x "
              f"(rounds: {' '.join(f'{x:.0f}' for x in cached)} / "
              f"{' '.join(f'{x:.0f}' for x in plain)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=12)
    ap.add_argument("--per-image", type=int, default=4)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--image-workers", type=int, default=2)
    ap.add_argument("--root", default="/tmp/bench-variants")
    args = ap.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    paths = make_images(args.root, args.images)
    print(f"# {args.images} JPEGs 4000x3000, variants {VARIANT}, c={args.conc}, "
          f"image_workers={args.image_workers}, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}")
    root = os.path.join(args.root, "cluster")
    proc, info = start_cluster(root, ["--workers", "1"])
    try:
        asyncio.run(bench(args, info, paths))
    finally:
        stop_cluster(proc)


if __name__ == "__main__":
    main()
