"""Container sharding benchmark: object updates per second into one container, and the time
to list 10,000 names from its middle, as it grows, sharded against unsharded.

    .venv/bin/python loadtests/bench_sharding.py [--sizes 1000000,5000000,10000000]
        [--rows-per-shard 500000] [--updates 20000] [--concurrency 32] [--root DIR]

For each size N the container is made twice, straight through the broker (bulk inserts in
big transactions, much faster than HTTP PUTs): unsharded, one DB of N rows; and sharded, a
root in the sharded state with ceil(N / rows_per_shard) ACTIVE ranges, each a shard DB of
its rows (what the sharder leaves behind with shard_container_threshold = 2 x
rows_per_shard). Then over HTTP, against one real container server (one worker,
db_synchronous=FULL, group commit, the device update log unless `--update-log off`):

- updates: `--updates` object PUT updates of new names, `--concurrency` at a time, in two
  patterns: uniform (random keys spread over the namespace) and append (time-ordered keys
  past the last name); sharded, each goes to the shard whose range holds the name (as an
  object server does once it has learned the ranges from a redirect); listed first, so the
  listing sees the N rows it was built with;
- listing: 10,000 names from a marker in the middle, json, median of 5; sharded, the
  proxy's walk over the root's segments (swiftlite.proxy.shard_listing) fetching each
  shard's rows as the proxy does, then rendering them.

Each update run prints its rate and the CPU time per update of the server and of this
process (the two share the machine's cores: on 2 cores the server runs near one core).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from urllib.parse import quote, urlencode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtests.container_server import ContainerServer as Server  # noqa: E402
from swiftlite.common.clients.client import make_session  # noqa: E402
from swiftlite.common.timestamp import Timestamp  # noqa: E402
from swiftlite.container.broker import ContainerBroker  # noqa: E402
from swiftlite.container.shard_ranges import (  # noqa: E402
    ShardRange,
    State,
    find,
    live,
    ranges_from_points,
)
from swiftlite.db.listing import ListingParams, render_body  # noqa: E402
from swiftlite.db.paths import db_file  # noqa: E402
from swiftlite.proxy.shard_listing import LOWER, RECORD_TYPE, UPPER, walk_segments  # noqa: E402

ACCOUNT = "AUTH_bench"
ETAG = "d41d8cd98f00b204e9800998ecf8427e"
SPACING = 10  # stored names are every 10th number: new names fall between them


def name_of(i: int) -> str:
    return f"img/{i:012d}.jpg"


def make_db(root: str, account: str, container: str, first: int, count: int) -> str:
    """A container DB holding names first..first+count-1 (x SPACING), bulk inserted."""
    path = db_file(os.path.join(root, "node"), "sda", "container", 0, account, container)
    broker = ContainerBroker(path, account=account, container=container)
    broker.put_db(Timestamp.now().internal, {})
    broker.close()
    when = Timestamp.now().internal
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    step = 200_000
    for start in range(first, first + count, step):
        n = min(step, first + count - start)
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO object (name, created_at, size, content_type, etag, deleted)"
            " VALUES (?, ?, 65536, 'image/jpeg', ?, 0)",
            ((name_of(i * SPACING), when, ETAG) for i in range(start, start + n)))
        conn.execute("COMMIT")
    conn.execute("UPDATE stat SET object_count = ?, bytes_used = ?", (count, count * 65536))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def make_sharded(root: str, container: str, size: int, per_shard: int) -> list[ShardRange]:
    points = [name_of((i - 1) * SPACING) for i in range(per_shard, size, per_shard)]
    ts = Timestamp.now().internal
    ranges = ranges_from_points(ACCOUNT, container, points, ts)
    for i, r in enumerate(ranges):
        first = i * per_shard
        n = min(per_shard, size - first)
        make_db(root, r.account, r.container, first, n)
        r.state, r.object_count, r.bytes_used = State.ACTIVE, n, n * 65536
        r.meta_timestamp = ts
    path = make_db(root, ACCOUNT, container, 0, 0)
    broker = ContainerBroker(path)
    broker.merge_ranges([*ranges, ShardRange(name=f"{ACCOUNT}/{container}", timestamp=ts,
                                             state=State.SHARDED, state_timestamp=ts)])
    broker.close()
    return live(ranges)


def new_names(size: int, total: int, pattern: str, seed: int) -> list[str]:
    """uniform: new names between the stored ones all over the namespace (random keys);
    append: new names past the last one (time-ordered keys: every update hits the last
    shard)."""
    rnd = random.Random(seed)
    if pattern == "append":
        return [name_of(size * SPACING + seed * total + i) for i in range(total)]
    return [name_of(rnd.randrange(size) * SPACING + 1 + rnd.randrange(SPACING - 1))
            for _ in range(total)]


async def updates(server: Server, container: str, size: int, ranges: list[ShardRange],
                  total: int, concurrency: int, pattern: str, seed: int = 2) -> float:
    # Warm up (connections, the server's broker cache) untimed, then measure. Each run's
    # seed gives it names of its own (append: past every earlier run's).
    await _updates(server, container, ranges, new_names(size, 500, pattern, 1), concurrency)
    return await _updates(server, container, ranges, new_names(size, total, pattern, seed),
                          concurrency)


async def _updates(server: Server, container: str, ranges: list[ShardRange],
                   names: list[str], concurrency: int) -> float:
    total = len(names)
    # Each name's URL (sharded: its shard's, as an object server's route cache gives it) is
    # worked out before the clock starts: the benchmark shares the machine's CPUs with the
    # server, and its own routing would count against the sharded side only.
    urls = []
    for name in names:
        acct, cont = ACCOUNT, container
        if ranges:
            r = find(ranges, name)
            assert r is not None
            acct, cont = r.account, r.container
        urls.append(server.url(acct, cont, name))
    todo = iter(urls)
    async with make_session(1.0, 30.0) as http:
        async def worker() -> None:
            for url in todo:
                h = {"X-Timestamp": Timestamp.now().internal, "X-Size": "65536",
                     "X-Content-Type": "image/jpeg", "X-Etag": ETAG}
                async with http.put(url, headers=h) as resp:
                    assert resp.status == 201, resp.status

        c0 = cpu_seconds(server)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        el = time.perf_counter() - t0
        c1 = cpu_seconds(server)
        if total > 500:  # not the warm-up
            print(f"    run: {total / el:,.0f} updates/s; CPU per update: server "
                  f"{(c1[0] - c0[0]) / total * 1e6:.0f} us, this benchmark "
                  f"{(c1[1] - c0[1]) / total * 1e6:.0f} us", flush=True)
        return total / el


def cpu_seconds(server: Server) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by the server and by this process."""
    with open(f"/proc/{server.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return ((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            sum(os.times()[:2]))


async def listing(server: Server, container: str, size: int, sharded: bool) -> float:
    marker = name_of(size // 2 * SPACING)
    query = {"format": "json", "marker": marker, "limit": "10000"}
    times = []
    async with make_session(1.0, 60.0) as http:
        for _ in range(5):
            t0 = time.perf_counter()
            if not sharded:
                async with http.get(server.url(ACCOUNT, container), params=query) as resp:
                    rows = json.loads(await resp.read())
            else:
                async with http.get(server.url(ACCOUNT, container),
                                    headers={RECORD_TYPE: "auto"}) as resp:
                    segments = json.loads(await resp.read())["segments"]
                p = ListingParams(limit=10000, marker=marker, end_marker=None, prefix=None,
                                  delimiter=None, reverse=False, out_format="json")

                async def fetch(seg, m, em, limit):
                    import msgpack

                    acct, cont = seg["name"].split("/", 1)
                    q = {"format": "json", "limit": str(limit)}
                    if m is not None:
                        q["marker"] = m
                    h = {RECORD_TYPE: "raw", LOWER: quote(seg["lower"], safe=""),
                         UPPER: quote(seg["upper"], safe="")}
                    async with http.get(server.url(acct, cont) + "?" + urlencode(q),
                                        headers=h) as r:
                        return [tuple(x) for x in msgpack.unpackb(await r.read(), raw=False)]

                got = await walk_segments(segments, p, fetch)
                body, _ = render_body(got, "json", "container", container)
                rows = json.loads(body)
            times.append(time.perf_counter() - t0)
            assert len(rows) == min(10000, size - size // 2 - 1), len(rows)
            assert rows[0]["name"] > marker
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,5000000,10000000",
                    help="rows per container, comma-separated (k/m suffixes allowed)")
    ap.add_argument("--rows-per-shard", type=int, default=500_000)
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--root", default=None, help="scratch dir (default: a temp dir)")
    ap.add_argument("--commit-concurrency", default="0",
                    help="the container server's db_commit_concurrency (0: unbounded); "
                         "comma-separated values are measured side by side, interleaved")
    ap.add_argument("--io-threads", type=int, default=8,
                    help="the container server's io_threads (its default: 8)")
    ap.add_argument("--synchronous", default="FULL", choices=("FULL", "NORMAL"),
                    help="the container server's db_synchronous")
    ap.add_argument("--update-log", default="on",
                    help="the container server's db_update_log: on, off, or on,off to "
                         "measure both side by side, interleaved")
    ap.add_argument("--apply-delay", default="0.05",
                    help="the container server's db_update_log_apply_delay (0: every round "
                         "applies its rows); comma-separated values side by side")
    ap.add_argument("--repeats", type=int, default=1,
                    help="update runs per value of --commit-concurrency (medians shown)")
    args = ap.parse_args()
    logs = [v.strip() for v in args.update_log.split(",") if v.strip()]
    delays = [v.strip() for v in args.apply_delay.split(",") if v.strip()]
    # Measured side by side: (db_commit_concurrency, db_update_log, apply delay) triples.
    gates = [(int(g), lg, d) for g in args.commit_concurrency.split(",") if g.strip()
             for lg in logs for d in delays]
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    root = args.root or tempfile.mkdtemp(prefix="bench_sharding-")
    os.makedirs(os.path.join(root, "node", "sda"), exist_ok=True)
    print(f"config: sizes={sizes} rows_per_shard={args.rows_per_shard:,} "
          f"updates={args.updates:,} concurrency={args.concurrency} "
          f"db_synchronous={args.synchronous} "
          f"(WAL) group_commit db_commit_concurrency={args.commit_concurrency} "
          f"db_update_log={args.update_log} apply_delay={args.apply_delay} "
          f"repeats={args.repeats} "
          f"io_threads={args.io_threads} workers=1 cpus={os.cpu_count()} root={root}",
          flush=True)
    results = []
    try:
        for size in sizes:
            for sharded in (False, True):
                label = "sharded" if sharded else "unsharded"
                container = f"{label}-{size}"
                t0 = time.perf_counter()
                if sharded:
                    ranges = make_sharded(root, container, size, args.rows_per_shard)
                else:
                    make_db(root, ACCOUNT, container, 0, size)
                    ranges = []
                built = time.perf_counter() - t0
                # The build wrote GBs without fsync: flush them now, or their writeback
                # competes with the updates' fsyncs and the figures measure the page cache.
                os.sync()
                lst = 0.0
                runs: dict[tuple, dict[str, list[float]]] = {
                    g: {"uniform": [], "append": []} for g in gates}
                seed = 2
                for rep in range(args.repeats):
                    for g in gates[rep % len(gates):] + gates[:rep % len(gates)]:
                        srv = Server(root, f"io_threads = {args.io_threads}\n"
                                     f"db_commit_concurrency = {g[0]}\n"
                                     f"db_update_log = {g[1] == 'on'}\n"
                                     f"db_update_log_apply_delay = {g[2]}\n"
                                     f"db_synchronous = {args.synchronous}")
                        try:
                            if not lst:  # before any update: the N rows it was built with
                                lst = asyncio.run(listing(srv, container, size, sharded))
                            for pat in ("uniform", "append"):
                                seed += 1
                                runs[g][pat].append(asyncio.run(updates(
                                    srv, container, size, ranges, args.updates,
                                    args.concurrency, pat, seed)))
                        finally:
                            srv.stop()
                for g in gates:
                    rates = {pat: statistics.median(v) for pat, v in runs[g].items()}
                    tag = label
                    if len(args.commit_concurrency.split(",")) > 1:
                        tag += f" g={g[0]}"
                    if len(logs) > 1:
                        tag += f" log={g[1]}"
                    if len(delays) > 1:
                        tag += f" hold={g[2]}"
                    results.append((size, tag, rates, lst))
                    every = "" if args.repeats == 1 else "  runs: " + " ".join(
                        f"{pat} " + "/".join(f"{r:,.0f}" for r in v)
                        for pat, v in runs[g].items())
                    print(f"{size:>11,} rows {tag:<27} ({len(ranges) or 1:>3} DBs, built in "
                          f"{built:5.1f}s): updates/s uniform {rates['uniform']:>6,.0f} "
                          f"append {rates['append']:>6,.0f}   list 10,000 from the middle "
                          f"{lst * 1000:7.1f} ms{every}", flush=True)
            shutil.rmtree(os.path.join(root, "node", "sda", "containers"), ignore_errors=True)
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    base = {label: (rates, lst) for size, label, rates, lst in results if size == sizes[0]}
    print(f"relative to {sizes[0]:,} rows:")
    for size, label, rates, lst in results:
        b_rates, b_lst = base[label]
        print(f"  {size:>11,} {label:<21} update rate uniform "
              f"{rates['uniform'] / b_rates['uniform']:5.0%} append "
              f"{rates['append'] / b_rates['append']:5.0%}   listing time {lst / b_lst:5.2f}x")


def parse_size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(s[-1], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


if __name__ == "__main__":
    main()
