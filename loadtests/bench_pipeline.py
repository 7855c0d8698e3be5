"""Proxy pipeline cost: microseconds per request the middleware adds in front of the core.

Builds the proxy's pipeline (the default one, or `--pipeline`) around a stub core that answers
at once, in-process with a stub of the proxy's info lookups (an existing container, no
quotas), and times owner GETs, HEADs and 64 KiB-announcing PUTs through it, then the same
owner GET and HEAD through the S3 API (SigV4 header auth, as bench.py --api s3 signs; rows
"S3 GET", "S3 HEAD"). Nothing touches the network or a disk, so the figure is the pipeline's
own CPU per request; compare two trees by running this file from each
(`PYTHONPATH=<tree>`), interleaved.

    python loadtests/bench_pipeline.py [--count 20000] [--rounds 5] [--pipeline "..."]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import secrets
import statistics
import time
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from swiftlite.common.config import Section
from swiftlite.proxy import pipeline, stack
from swiftlite.proxy.caches.info import AccountInfo, ContainerInfo

try:
    from loadtests.bench import SigV4
except ImportError:  # run as a script from loadtests/
    from bench import SigV4  # type: ignore[no-redef]


class StubProxy:
    """What the pipeline's features ask of the proxy, answered from memory."""

    def __init__(self) -> None:
        self.auth: Any = None
        self.link_cache: Any = None  # no link cache: every GET reads its object once
        self.middleware: list[Any] = []
        # As the proxy's info cache does, one object per container while it is unchanged.
        self.container = ContainerInfo(200)
        self.account = AccountInfo(200)

    async def container_info(self, request: web.Request, account: str,
                             container: str) -> ContainerInfo:
        return self.container

    async def container_facts(self, request: web.Request, account: str,
                              container: str) -> ContainerInfo:
        return self.container

    async def account_info(self, request: web.Request, account: str) -> AccountInfo:
        return self.account

    def capabilities(self) -> dict[str, Any]:
        return {"swift": {"policies": [{"name": "Policy-0", "default": True}]}}


async def core(request: web.Request) -> web.StreamResponse:
    if request.path.startswith("/v1/AUTH_.s3/"):
        return web.Response(status=404)  # the S3 bucket registry: no entry, the caller's own
    headers = {"Content-Type": "application/octet-stream", "Etag": "0" * 32,
               "X-Timestamp": "1700000000.00000", "X-Object-Meta-Color": "blue"}
    if request.method == "PUT":
        return web.Response(status=201, headers=headers)
    return web.Response(status=200, body=b"x", headers=headers)


def build(pipe: str | None) -> tuple[Any, str]:
    conf = Section({"auth_secret": secrets.token_hex(32),
                    "user_test_tester": "testing .admin"})
    if pipe:
        conf["pipeline"] = pipe
    proxy = StubProxy()
    handler, built = stack.build(proxy, conf, core)  # type: ignore[arg-type]
    auth = next(m for m in built if m.name == "tempauth").auth
    proxy.auth = auth  # the S3 layer's credentials are tempauth's users
    proxy.middleware = built
    token, _life = auth.issue_token(auth.authenticate("test:tester", "testing"))
    return handler, token


async def calls(handler: Any, token: str, method: str, count: int = 200) -> float:
    """Python function calls per request: a figure no neighbour's load can disturb."""
    requests = _requests(token, method, count)
    prof = cProfile.Profile()
    prof.enable()
    for req in requests:
        await handler(req)
    prof.disable()
    return pstats.Stats(prof).total_calls / count  # type: ignore[attr-defined]


class _Transport:
    """What a request asks of its transport, answered as a server's would, cheaply: with
    make_mocked_request's Mock transport, every sub-request's clone paid ~40 µs of Mock
    bookkeeping that a server never does (it made the S3 pipeline look 3x dearer)."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def is_closing(self) -> bool:
        return False


class _Protocol:
    ssl_context = None
    peername = ("127.0.0.1", 40000)
    sockname = ("127.0.0.1", 8080)

    def __init__(self) -> None:
        self.transport = _Transport()


def _mocked(method: str, path: str, headers: dict[str, str]) -> web.Request:
    protocol = _Protocol()
    return make_mocked_request(method, path, headers=headers, protocol=protocol,
                               transport=protocol.transport)


def _requests(token: str, method: str, count: int) -> list[web.Request]:
    if method.startswith("S3 "):
        return _s3_requests(method[3:], count)
    headers = {"X-Auth-Token": token, "Host": "localhost", "User-Agent": "bench"}
    if method == "PUT":
        headers.update({"Content-Length": "65536", "Content-Type": "image/jpeg",
                        "Etag": "0" * 32})
    return [_mocked(method, f"/v1/AUTH_test/c/img-{i}.jpg", headers) for i in range(count)]


def _s3_requests(method: str, count: int) -> list[web.Request]:
    signer = SigV4("test:tester", "testing")
    out = []
    for i in range(count):
        path = f"/c/img-{i}.jpg"
        headers = signer.headers(method, "localhost", path)
        headers.update({"Host": "localhost", "User-Agent": "bench"})
        out.append(_mocked(method, path, headers))
    return out


async def run(handler: Any, token: str, method: str, count: int) -> float:
    requests = _requests(token, method, count)
    # The mocked requests are heavy objects: keep the collector from walking them mid-run.
    gc.collect()
    gc.freeze()
    try:
        start = time.perf_counter()
        for req in requests:
            await handler(req)
        return (time.perf_counter() - start) / count * 1e6
    finally:
        gc.unfreeze()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pipeline", help="pipeline to build (default: the proxy's default)")
    ap.add_argument("--calls-only", action="store_true",
                    help="only count Python calls per request (quick, load-independent)")
    args = ap.parse_args()
    handler, token = build(args.pipeline)
    print(f"config: count={args.count} rounds={args.rounds} "
          f"pipeline={args.pipeline or pipeline.DEFAULT_PIPELINE!r}")
    print(f"{'method':<7} {'pipeline+core us':>16} {'core alone us':>14} {'pipeline us':>11} "
          f"{'pipeline calls':>14}")
    for method in ("GET", "HEAD", "PUT", "S3 GET", "S3 HEAD"):
        if args.calls_only:
            n = asyncio.run(calls(handler, token, method)) - asyncio.run(calls(core, token, method))
            print(f"{method:<7} {'-':>16} {'-':>14} {'-':>11} {n:>14.1f}")
            continue
        full, base = [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            full.append(asyncio.run(run(handler, token, method, args.count)))
            base.append(asyncio.run(run(core, token, method, args.count)))
        f, b = statistics.median(full), statistics.median(base)
        n = asyncio.run(calls(handler, token, method)) - asyncio.run(calls(core, token, method))
        print(f"{method:<7} {f:>16.1f} {b:>14.1f} {f - b:>11.1f} {n:>14.1f}")


if __name__ == "__main__":
    main()
