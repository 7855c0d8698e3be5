"""Container DB benchmark: group commit vs one transaction per update, insert rate as a
container grows, and the time to list 10,000 names from the largest container.

    .venv/bin/python loadtests/bench_db.py [--rows 1000000] [--updates 4000] [--concurrency 32]

Updates go over HTTP to a real container server (one worker); bulk inserts go straight to
the broker in 1,000-row transactions (what a replicator or a full group commit does);
listings go over HTTP again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtests.container_server import ContainerServer as Server  # noqa: E402
from swiftlite.common.clients.client import make_session  # noqa: E402
from swiftlite.common.timestamp import Timestamp  # noqa: E402
from swiftlite.container.broker import ContainerBroker  # noqa: E402
from swiftlite.db.paths import db_file  # noqa: E402

ACCOUNT, CONTAINER = "AUTH_bench", "big"


async def updates_per_second(server: Server, container: str, total: int,
                             concurrency: int) -> tuple[float, dict[str, str]]:
    async with make_session(1.0, 60.0) as http:
        async with http.put(server.url(ACCOUNT, container),
                            headers={"X-Timestamp": Timestamp.now().internal}) as r:
            assert r.status == 201, r.status
        queue = iter(range(total))

        async def worker() -> None:
            for i in queue:
                h = {"X-Timestamp": Timestamp.now().internal, "X-Size": "65536",
                     "X-Content-Type": "image/jpeg", "X-Etag": "d41d8cd98f00b204e9800998ecf8427e"}
                async with http.put(server.url(ACCOUNT, container, f"img/{i:08d}.jpg"),
                                    headers=h) as r:
                    assert r.status == 201, r.status

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        async with http.head(server.url(ACCOUNT, container)) as r:
            assert r.headers["X-Container-Object-Count"] == str(total)
            return total / elapsed, dict(r.headers)


def rows(start: int, n: int, when: str) -> list[dict]:
    return [{"name": f"photos/{uuid.uuid4().hex[:8]}/{i:09d}.jpg", "created_at": when,
             "size": 65536, "content_type": "image/jpeg",
             "etag": "d41d8cd98f00b204e9800998ecf8427e", "deleted": 0}
            for i in range(start, start + n)]


def fill(broker: ContainerBroker, target: int, checkpoints: list[int], batch: int = 1000):
    """Insert up to `target` rows; at each checkpoint size, time the next 10,000 rows."""
    when = Timestamp.now().internal
    done = broker.get_info()["object_count"]
    rates: dict[int, float] = {}
    for cp in sorted(checkpoints):
        while done < cp:
            n = min(batch, cp - done)
            broker.merge_items(rows(done, n, when))
            done += n
        t0 = time.perf_counter()
        for _ in range(10):
            broker.merge_items(rows(done, 1000, when))
            done += 1000
        rates[cp] = 10000 / (time.perf_counter() - t0)
        print(f"  insert rate with {cp:>9,} rows present: {rates[cp]:>9,.0f} rows/s "
              f"(1,000-row transactions)", flush=True)
    return done, rates


async def list_time(server: Server, container: str) -> list[tuple[str, float, int]]:
    out = []
    async with make_session(1.0, 60.0) as http:
        for label, params in [("first 10,000 (json)", {"format": "json"}),
                              ("first 10,000 (plain)", {}),
                              ("10,000 from a middle marker (json)",
                               {"format": "json", "marker": "photos/8"}),
                              ("delimiter=/ prefix=photos/ (json)",
                               {"format": "json", "prefix": "photos/", "delimiter": "/"})]:
            best = None
            for _ in range(3):
                t0 = time.perf_counter()
                async with http.get(server.url(ACCOUNT, container), params=params) as r:
                    body = await r.read()
                el = time.perf_counter() - t0
                best = el if best is None or el < best else best
            count = len(json.loads(body)) if "format" in params else len(body.splitlines())
            out.append((label, best, count))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--root", default=None, help="scratch dir (default: a temp dir)")
    args = ap.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="bench_db-")
    os.makedirs(os.path.join(root, "node", "sda"), exist_ok=True)
    print(f"config: updates={args.updates} concurrency={args.concurrency} rows={args.rows:,} "
          f"db_synchronous=FULL (WAL) io_threads=8 workers=1 root={root} cpus={os.cpu_count()}")
    try:
        print("object updates into one container over HTTP:")
        for label, extra in [("group commit", "group_commit = true"),
                             ("one txn per update", "group_commit = false")]:
            srv = Server(root, extra)
            try:
                rate, hd = asyncio.run(updates_per_second(
                    srv, f"upd-{extra[-4:].strip()}", args.updates, args.concurrency))
            finally:
                srv.stop()
            print(f"  {label:<20} {rate:>8,.0f} updates/s  "
                  f"({hd['X-Backend-Update-Commits']} commits for "
                  f"{hd['X-Backend-Updates-Merged']} updates)", flush=True)
        print("bulk inserts into one container (broker, direct):")
        path = db_file(os.path.join(root, "node"), "sda", "container", 0, ACCOUNT, CONTAINER)
        broker = ContainerBroker(path, account=ACCOUNT, container=CONTAINER)
        broker.put_db(Timestamp.now().internal, {})
        cps = [cp for cp in (10_000, 100_000, 1_000_000) if cp <= args.rows]
        t0 = time.perf_counter()
        total, _ = fill(broker, args.rows, cps)
        print(f"  filled {total:,} rows in {time.perf_counter() - t0:.1f}s; DB size "
              f"{os.path.getsize(path) / 1e6:.0f} MB", flush=True)
        broker.close()
        srv = Server(root, "")
        try:
            print(f"listing from the {total:,}-row container over HTTP (best of 3):")
            for label, el, count in asyncio.run(list_time(srv, CONTAINER)):
                print(f"  {label:<38} {el * 1000:>7.1f} ms  ({count} entries)")
        finally:
            srv.stop()
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
