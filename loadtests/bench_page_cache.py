"""What writing an object body costs the kernel on this machine: a 1 MiB write into a new
file (new page-cache pages) against one over pages already cached, against filling fresh
anonymous memory, and an MD5 of the body for scale. Kernel and user CPU per write from
getrusage, one thread.

    .venv/bin/python loadtests/bench_page_cache.py [--dir /tmp] [--size 1m] [--count 2000]

On the project's test VM a new file's 1 MiB cost ~1.8-2.2 ms of kernel CPU (sustained)
against ~0.02 ms over cached pages: the copy into newly allocated pages is most of a large
PUT's CPU there (loadtests/RESULTS.md, issue 17).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtests.bench_commit import fs_type  # noqa: E402
from swiftlite.common.config import parse_size  # noqa: E402


def measure(label: str, count: int, size: int, fn: Callable[[int], None]) -> None:
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for i in range(count):
        fn(i)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    mib = size / (1 << 20)
    print(f"{label:<34} {count / (t1 - t0):8.0f}/s   kernel "
          f"{1000 * (r1.ru_stime - r0.ru_stime) / count / mib:6.2f} ms/MiB   user "
          f"{1000 * (r1.ru_utime - r0.ru_utime) / count / mib:6.2f} ms/MiB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the files go")
    ap.add_argument("--size", default="1m")
    ap.add_argument("--count", type=int, default=2000,
                    help="writes per case (new pages cost more once many are written)")
    args = ap.parse_args()
    size = parse_size(args.size)
    work = tempfile.mkdtemp(prefix="bench_page_cache-", dir=args.dir)
    print(f"config: size={size} count={args.count} dir={work} fs={fs_type(work)} "
          f"cpus={os.cpu_count()} kernel={os.uname().release}", flush=True)
    body = os.urandom(size)
    same = os.open(os.path.join(work, "same"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.pwrite(same, body, 0)  # its pages are cached from here on

    def new_file(i: int) -> None:
        fd = os.open(os.path.join(work, f"n{i}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)

    try:
        measure("write into a new file", args.count, size, new_file)
        measure("write over cached pages", args.count, size,
                lambda i: os.pwrite(same, body, 0))
        measure("fill fresh anonymous memory", args.count, size,
                lambda i: bytearray(size).__setitem__(slice(None), body))
        measure("md5 of the body", args.count, size, lambda i: hashlib.md5(body).digest())
    finally:
        os.close(same)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
