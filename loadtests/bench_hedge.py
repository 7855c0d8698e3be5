"""What hedged reads cost when every node is healthy: GET/s of 64 KiB objects through two
proxies of one cluster, one with `concurrent_gets = true` (the default) and one with it off,
rounds interleaved (A B A B ...) so machine drift hits both alike.

A fresh `swiftlite up --workers 1 --no-local-reads` (one node, four devices, three replicas)
is started;
the second proxy runs the same config with concurrent_gets = false on another port.

    .venv/bin/python loadtests/bench_hedge.py [--rounds 6] [--seconds 3] [--conc 32]
"""

from __future__ import annotations

import argparse
import asyncio
import configparser
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp  # noqa: E402

from loadtests.bench_get_paths import SIZE, bench_args, interleaved, print_medians  # noqa: E402
from loadtests.up import start_cluster, stop_cluster  # noqa: E402
from tests.helpers import free_port, healthy, wait_for  # noqa: E402

NAMES = 64


async def bench(proxies: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    async with aiohttp.ClientSession() as s:
        base = proxies["hedged"]
        async with s.get(f"{base}/auth/v1.0", headers={"X-Auth-User": "test:tester",
                                                       "X-Auth-Key": "testing"}) as r:
            storage, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
        h = {"X-Auth-Token": token}
        path = storage.split("/v1/", 1)[1]
        await (await s.put(f"{storage}/hedge", headers=h)).release()
        for i in range(NAMES):
            await (await s.put(f"{storage}/hedge/o{i}", data=os.urandom(SIZE),
                               headers=h)).release()
        targets = {kind: ([f"{url}/v1/{path}/hedge/o{i}" for i in range(NAMES)], h)
                   for kind, url in proxies.items()}
        return await interleaved(s, targets, args)


def main() -> int:
    args = bench_args(__doc__)
    root = tempfile.mkdtemp(prefix="bench-hedge-")
    # Reads through the object servers: a proxy's local reads skip hedging.
    proc, cluster = start_cluster(root, ["--workers", "1", "--nodes", "1", "--devices", "4",
                                         "--no-local-reads"])
    other = None
    try:
        parser = configparser.ConfigParser(interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
        parser.read(os.path.join(root, "etc", "proxy.conf"))
        port = free_port()
        parser["proxy-server"]["bind_port"] = str(port)
        parser["proxy-server"]["concurrent_gets"] = "false"
        conf = os.path.join(root, "etc", "proxy-unhedged.conf")
        with open(conf, "w") as f:
            parser.write(f)
        with open(os.path.join(root, "logs", "proxy-unhedged.log"), "wb") as log:
            other = subprocess.Popen([sys.executable, "-m", "swiftlite.cli", "server", "proxy",
                                      "-c", conf], stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: healthy(port), 30, what="the second proxy")
        proxies = {"hedged": cluster["proxy"]["url"], "unhedged": f"http://127.0.0.1:{port}"}
        rates = asyncio.run(bench(proxies, args))
    finally:
        if other is not None:
            other.terminate()
            other.wait(10)
        stop_cluster(proc)
    print(f"config: swiftlite up --workers 1 --nodes 1 --devices 4 (3 replicas), "
          f"{SIZE // 1024} KiB GETs, {NAMES} names, concurrency {args.conc}, "
          f"{args.rounds} x {args.seconds}s rounds per proxy, interleaved, cpus={os.cpu_count()}")
    med = print_medians(rates)
    print(f"hedged / unhedged: {med['hedged'] / med['unhedged']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
