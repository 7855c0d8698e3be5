"""Erasure-coding codec throughput (swiftlite/common/ec): encode and decode MB/s.

For each ec_type that works here and each body size, at k+m (default 4+2) and the segment
size given, measures in this one process (no I/O: archives in memory):
- encode: Encoder fed 64 KiB chunks, body and archive MD5s included (what a PUT will pay);
- decode: the whole body from the k data archives (the usual GET; fragments are CRC-checked
  and copied), and degraded, from the archives with data fragments 0..m-1 missing (m parity
  fragments used: arithmetic);
each the best of --repeat runs. MB/s are body bytes (10^6) per second of this process's CPU
time (`--clock wall` for elapsed time): on a shared machine CPU time is the steadier figure,
and the codec is single-threaded CPU work anyway.

    .venv/bin/python loadtests/bench_ec.py
    .venv/bin/python loadtests/bench_ec.py --sizes 1,8 --k 4 --m 2 --segment-size 1048576
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from swiftlite.common.ec import (  # noqa: E402
    DEFAULT_SEGMENT_SIZE,
    ECScheme,
    Encoder,
    available_ec_types,
    decode_body,
)

CHUNK = 64 << 10


def encode(scheme: ECScheme, body: bytes) -> list[bytes]:
    enc = Encoder(scheme)
    parts: list[list[bytes]] = [[] for _ in range(scheme.n)]
    for i in range(0, len(body), CHUNK):
        for part, piece in zip(parts, enc.feed(body[i:i + CHUNK]), strict=True):
            part.append(piece)
    for part, piece in zip(parts, enc.finish(), strict=True):
        part.append(piece)
    return [b"".join(p) for p in parts]


def best(fn: Callable[[], object], repeat: int, clock: Callable[[], float]) -> float:
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return max(min(times), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,8", help="body sizes in MiB, comma-separated")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--m", type=int, default=2)
    ap.add_argument("--segment-size", type=int, default=DEFAULT_SEGMENT_SIZE)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--ec-types", default="", help="comma-separated (default: all that work)")
    args = ap.parse_args()

    from importlib.metadata import version

    from pyeclib.ec_iface import _liberasurecode_version
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    types = args.ec_types.split(",") if args.ec_types else available_ec_types(args.k, args.m)
    sizes = [int(float(s) * (1 << 20)) for s in args.sizes.split(",")]
    print(f"# {args.k}+{args.m}, segment {args.segment_size} bytes, best of {args.repeat}, "
          f"{args.clock} time; pyeclib {version('pyeclib')}, liberasurecode "
          f"{_liberasurecode_version()}; {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'ec_type':<24} {'body MiB':>8} {'encode MB/s':>12} {'decode MB/s':>12} "
          f"{'degraded MB/s':>14} {'disk/body':>10}")
    for ec_type in types:
        scheme = ECScheme(args.k, args.m, ec_type, args.segment_size)
        for size in sizes:
            body = os.urandom(size)
            archives = encode(scheme, body)
            data = {i: archives[i] for i in range(scheme.k)}
            degraded = {i: archives[i] for i in range(scheme.m, scheme.n)}
            assert decode_body(scheme, size, data) == body
            assert decode_body(scheme, size, degraded) == body
            t_enc = best(lambda: encode(scheme, body), args.repeat, clock)  # noqa: B023
            t_dec = best(lambda: decode_body(scheme, size, data), args.repeat, clock)  # noqa: B023
            t_deg = best(lambda: decode_body(scheme, size, degraded), args.repeat, clock)  # noqa: B023
            ratio = sum(map(len, archives)) / size
            print(f"{ec_type:<24} {size / (1 << 20):>8g} {size / t_enc / 1e6:>12.0f} "
                  f"{size / t_dec / 1e6:>12.0f} {size / t_deg / 1e6:>14.0f} {ratio:>10.5f}")


if __name__ == "__main__":
    main()
