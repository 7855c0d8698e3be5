"""Large objects and bulk uploads, optionally A/B against a second endpoint (e.g. Swift).

usage: bench_large.py --url AUTH_URL [--vs AUTH_URL] [--size 1g] [--segment-size 64m]
                      [--repeats 3] [--archive-count 1000] [--archive-size 64k]
                      [--phases slo,archive]

- slo: `swift upload --use-slo -S <segment-size>` of one <size> file, then `swift download` of
  it (to /dev/null, after swiftclient's own MD5 checks), timed with the stock CLI: MB/s.
- archive: one `PUT ?extract-archive=tar` of <archive-count> random <archive-size> files, then
  the same files PUT one by one (sequentially, and `--concurrency` at a time): objects/s.

Each repeat runs the endpoints in alternating order (A,B then B,A), so noise from other
processes hits both alike; medians over the repeats are printed with the configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid

import aiohttp

SWIFT = os.path.join(os.path.dirname(sys.executable), "swift")


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


class Endpoint:
    def __init__(self, label: str, auth_url: str, user: str, key: str) -> None:
        self.label, self.auth_url, self.user, self.key = label, auth_url, user, key
        self.token = self.storage = ""

    async def auth(self, session: aiohttp.ClientSession) -> None:
        async with session.get(self.auth_url, headers={"X-Auth-User": self.user,
                                                       "X-Auth-Key": self.key}) as r:
            r.raise_for_status()
            self.token = r.headers["X-Auth-Token"]
            self.storage = r.headers["X-Storage-Url"]

    def swift(self, *args: str, cwd: str | None = None) -> float:
        """Seconds the stock `swift` CLI took for `args`."""
        cmd = [SWIFT, "-A", self.auth_url, "-U", self.user, "-K", self.key, *args]
        start = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
        took = time.perf_counter() - start
        if r.returncode != 0:
            raise RuntimeError(f"{self.label}: swift {' '.join(args)}: {r.stderr.strip()}")
        return took


def run_slo(eps: list[Endpoint], size: int, segment: int, repeats: int) -> dict:
    results: dict[str, dict[str, list[float]]] = {e.label: {"upload": [], "download": []}
                                                  for e in eps}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.bin")
        with open(path, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                f.write(block)
            f.write(os.urandom(size & ((1 << 20) - 1)))
        for rep in range(repeats):
            for ep in eps if rep % 2 == 0 else list(reversed(eps)):
                cont = f"bench-slo-{uuid.uuid4().hex[:8]}"
                up = ep.swift("upload", "--use-slo", "-S", str(segment), cont, "big.bin",
                              cwd=tmp)
                down = ep.swift("download", cont, "big.bin", "-o", "/dev/null")
                ep.swift("delete", cont)
                results[ep.label]["upload"].append(size / up / 1e6)
                results[ep.label]["download"].append(size / down / 1e6)
                print(f"  {ep.label} repeat {rep + 1}: upload {size / up / 1e6:.1f} MB/s, "
                      f"download {size / down / 1e6:.1f} MB/s", flush=True)
    return results


def make_archive(count: int, size: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    files = [(f"img/{i:05d}.jpg", os.urandom(size)) for i in range(count)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), files


async def run_archive(eps: list[Endpoint], count: int, size: int, repeats: int,
                      concurrency: int) -> dict:
    archive, files = make_archive(count, size)
    results: dict[str, dict[str, list[float]]] = {
        e.label: {"extract-archive": [], "one by one": [], f"{concurrency} at a time": []}
        for e in eps}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for ep in eps:
            await ep.auth(session)
        for rep in range(repeats):
            for ep in eps if rep % 2 == 0 else list(reversed(eps)):
                h = {"X-Auth-Token": ep.token}
                cont = f"bench-tar-{uuid.uuid4().hex[:8]}"
                start = time.perf_counter()
                async with session.put(f"{ep.storage}/{cont}?extract-archive=tar", data=archive,
                                       headers={**h, "Accept": "application/json"}) as r:
                    report = await r.json(content_type=None)
                took = time.perf_counter() - start
                if report.get("Number Files Created") != count:
                    raise RuntimeError(f"{ep.label}: extract-archive: {report}")
                results[ep.label]["extract-archive"].append(count / took)
                for label, width in (("one by one", 1), (f"{concurrency} at a time",
                                                        concurrency)):
                    cont2 = f"bench-put-{uuid.uuid4().hex[:8]}"
                    async with session.put(f"{ep.storage}/{cont2}", headers=h) as r:
                        r.raise_for_status()
                    todo = iter(files)
                    start = time.perf_counter()
                    await asyncio.gather(*(put_all(session, ep, cont2, todo)
                                           for _ in range(width)))
                    results[ep.label][label].append(count / (time.perf_counter() - start))
                print(f"  {ep.label} repeat {rep + 1}: " + ", ".join(
                    f"{k} {v[-1]:.0f}/s" for k, v in results[ep.label].items()), flush=True)
    return results


async def put_all(session: aiohttp.ClientSession, ep: Endpoint, cont: str, todo) -> None:
    """PUT the (name, data) pairs of the shared iterator `todo`, one after another."""
    for name, data in todo:
        async with session.put(f"{ep.storage}/{cont}/{name}", data=data,
                               headers={"X-Auth-Token": ep.token}) as r:
            if r.status != 201:
                raise RuntimeError(f"{ep.label}: PUT {name}: {r.status}")


def report(title: str, unit: str, results: dict, eps: list[Endpoint]) -> None:
    print(f"\n{title} (median of repeats, {unit})")
    kinds = list(next(iter(results.values())))
    print(f"{'':22}" + "".join(f"{e.label:>14}" for e in eps)
          + ("   A/B" if len(eps) == 2 else ""))
    for kind in kinds:
        meds = [statistics.median(results[e.label][kind]) for e in eps]
        ratio = f"   {meds[0] / meds[1]:.2f}x" if len(meds) == 2 and meds[1] else ""
        print(f"{kind:22}" + "".join(f"{m:>14.1f}" for m in meds) + ratio)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--user", default="test:tester")
    p.add_argument("--key", default="testing")
    p.add_argument("--label", default="A")
    p.add_argument("--vs")
    p.add_argument("--vs-user", default="test:tester")
    p.add_argument("--vs-key", default="testing")
    p.add_argument("--vs-label", default="B")
    p.add_argument("--size", default="1g")
    p.add_argument("--segment-size", default="64m")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--archive-count", type=int, default=1000)
    p.add_argument("--archive-size", default="64k")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--phases", default="slo,archive")
    args = p.parse_args(argv)
    eps = [Endpoint(args.label, args.url, args.user, args.key)]
    if args.vs:
        eps.append(Endpoint(args.vs_label, args.vs, args.vs_user, args.vs_key))
    phases = args.phases.split(",")
    print("config: " + " ".join(f"{k}={v}" for k, v in vars(args).items()
                                if k not in ("key", "vs_key")), flush=True)
    if "slo" in phases:
        res = run_slo(eps, parse_size(args.size), parse_size(args.segment_size), args.repeats)
        report(f"SLO of {args.size} in {args.segment_size} segments, stock swift CLI", "MB/s",
               res, eps)
    if "archive" in phases:
        res = asyncio.run(run_archive(eps, args.archive_count, parse_size(args.archive_size),
                                      args.repeats, args.concurrency))
        report(f"{args.archive_count} files of {args.archive_size}", "objects/s", res, eps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
