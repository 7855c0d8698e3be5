#!/usr/bin/env python3
"""Swift v1 / S3 benchmark: PUT, GET, HEAD, DELETE phases against one endpoint or two, A/B.

    python loadtests/bench.py --url http://127.0.0.1:8080/auth/v1.0 --user test:tester \\
        --key testing --size 64k --count 500 --concurrency 32 [--phases put,get]
        [--api swift|s3] [--vs http://127.0.0.1:16080/auth/v1.0 --vs-user test:tester
        --vs-key testing --vs-api swift|s3]

`--api s3` speaks S3 to the URL's host (path style, SigV4 header auth; access key and secret
are --user and --key; the payload `UNSIGNED-PAYLOAD`, or its SHA-256 with --s3-sha256), with
a signer of its own: the signing key is made once per day, so a request costs one SHA-256 and
one HMAC (botocore costs far more per request than the server does).

Prints the configuration, then per endpoint and phase: ops, errors, ops/s, MB/s and latency
percentiles; with --vs, each phase runs in rounds that alternate A and B (ABBA...) so machine
noise hits both equally, followed by the A/B ratios. Auth happens once per endpoint; each
endpoint gets a keep-alive pool sized to the concurrency. Every phase is bounded by --count
and --phase-time, so a run always ends by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import math
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

PHASES = ("put", "get", "head", "delete")
KIB = 1024
MIB = 1024 * 1024

# The image workload: most objects near 64 KiB, a tail to 1 MiB (mean ~125 KiB).
IMAGE_BUCKETS: tuple[tuple[int, int, float], ...] = (
    (16 * KIB, 48 * KIB, 0.25),
    (48 * KIB, 96 * KIB, 0.45),
    (96 * KIB, 256 * KIB, 0.20),
    (256 * KIB, 512 * KIB, 0.07),
    (512 * KIB, 1 * MIB, 0.03),
)


def image_size(rng: random.Random) -> int:
    """One object size from the image mix (bytes, 16 KiB..1 MiB)."""
    x = rng.random()
    for lo, hi, weight in IMAGE_BUCKETS:
        if x < weight:
            return rng.randint(lo, hi)
        x -= weight
    lo, hi, _ = IMAGE_BUCKETS[-1]
    return rng.randint(lo, hi)


def parse_size(text: str) -> int:
    s = text.strip().lower().removesuffix("ib").removesuffix("b")
    mult = {"k": KIB, "m": MIB, "g": 1024 * MIB}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def percentile(sorted_vals: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (0 for an empty one)."""
    if not sorted_vals:
        return 0.0
    k = max(0, min(len(sorted_vals) - 1, math.ceil(p / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


@dataclass
class PhaseStats:
    ops: int = 0
    errors: int = 0
    bytes: int = 0
    secs: float = 0.0
    latencies: list[float] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    time_limited: bool = False

    def error(self, reason: str) -> None:
        self.errors += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        secs = max(self.secs, 1e-9)
        return {"ops": self.ops, "errors": self.errors, "bytes": self.bytes,
                "secs": round(self.secs, 3),
                "ops_s": self.ops / secs, "mb_s": self.bytes / secs / MIB,
                "p50_ms": percentile(lat, 50) * 1000, "p95_ms": percentile(lat, 95) * 1000,
                "p99_ms": percentile(lat, 99) * 1000, "reasons": dict(self.reasons),
                "time_limited": self.time_limited}


class SigV4:
    """AWS Signature Version 4 header auth for path-style S3 requests with no query string."""

    def __init__(self, access_key: str, secret: str, region: str = "us-east-1",
                 sign_payload: bool = False) -> None:
        self.access_key = access_key
        self.secret = secret
        self.region = region
        self.sign_payload = sign_payload
        self._day = ""
        self._key = b""
        self._scope = ""

    def _signing_key(self, day: str) -> bytes:
        if day != self._day:
            key = ("AWS4" + self.secret).encode()
            for part in (day, self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._day, self._key = day, key
            self._scope = f"{day}/{self.region}/s3/aws4_request"
        return self._key

    def headers(self, method: str, host: str, path: str, body: bytes | None = None,
                now: float | None = None) -> dict[str, str]:
        """The headers that sign `method host path` (path already URI-encoded as S3 wants)."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        key = self._signing_key(stamp[:8])
        payload = hashlib.sha256(body or b"").hexdigest() if self.sign_payload \
            else "UNSIGNED-PAYLOAD"
        creq = (f"{method}\n{path}\n\nhost:{host}\nx-amz-content-sha256:{payload}\n"
                f"x-amz-date:{stamp}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}")
        sts = (f"AWS4-HMAC-SHA256\n{stamp}\n{self._scope}\n"
               f"{hashlib.sha256(creq.encode()).hexdigest()}")
        sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        return {"Authorization": f"AWS4-HMAC-SHA256 Credential={self.access_key}/"
                                 f"{self._scope}, SignedHeaders=host;x-amz-content-sha256;"
                                 f"x-amz-date, Signature={sig}",
                "X-Amz-Date": stamp, "X-Amz-Content-SHA256": payload}


@dataclass
class Endpoint:
    label: str
    auth_url: str
    user: str
    key: str
    container: str
    api: str = "swift"
    sign_payload: bool = False
    policy: str | None = None  # X-Storage-Policy of the container it creates (Swift API)
    session: aiohttp.ClientSession | None = None
    signer: SigV4 | None = None
    host: str = ""
    storage_url: str = ""
    token: str = ""
    stored: set[int] = field(default_factory=set)
    stats: dict[str, PhaseStats] = field(default_factory=dict)

    def url(self, name: str | None = None) -> URL:
        raw = f"{self.storage_url.rstrip('/')}/{quote(self.container, safe='')}"
        if name is not None:
            raw += "/" + quote(name)
        return URL(raw, encoded=True)


@dataclass
class Config:
    url: str
    user: str
    key: str
    size: str = "64k"
    count: int = 500
    concurrency: int = 32
    phases: tuple[str, ...] = PHASES
    vs: str | None = None
    vs_user: str | None = None
    vs_key: str | None = None
    api: str = "swift"
    vs_api: str | None = None
    s3_sha256: bool = False
    rounds: int = 0  # 0: 1 alone, 4 with --vs
    phase_time: float = 120.0
    container: str | None = None
    timeout: float = 60.0
    seed: int = 1
    policy: str | None = None
    vs_policy: str | None = None


async def auth(ep: Endpoint) -> None:
    assert ep.session is not None
    if ep.api == "s3":  # S3 lives at the root of the auth URL's host; no token to get
        parts = urlsplit(ep.auth_url)
        ep.storage_url = f"{parts.scheme}://{parts.netloc}"
        ep.host = parts.netloc
        ep.signer = SigV4(ep.user, ep.key, sign_payload=ep.sign_payload)
        return
    headers = {"X-Auth-User": ep.user, "X-Auth-Key": ep.key}
    async with ep.session.get(ep.auth_url, headers=headers) as resp:
        await resp.read()
        if resp.status // 100 != 2:
            raise SystemExit(f"auth {ep.label} at {ep.auth_url}: {resp.status} {resp.reason}")
        ep.storage_url = resp.headers["X-Storage-Url"]
        ep.token = resp.headers["X-Auth-Token"]


async def request(ep: Endpoint, method: str, url: URL, **kw) -> tuple[int, int]:
    """(status, body bytes read)."""
    assert ep.session is not None
    if ep.signer is not None:
        headers = {**ep.signer.headers(method, ep.host, url.raw_path, kw.get("data")),
                   **kw.pop("headers", {})}
    else:
        headers = {"X-Auth-Token": ep.token, **kw.pop("headers", {})}
    async with ep.session.request(method, url, headers=headers, **kw) as resp:
        n = 0
        async for chunk in resp.content.iter_chunked(256 * KIB):
            n += len(chunk)
        return resp.status, n


class Workload:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        rng = random.Random(cfg.seed)
        if cfg.size.strip().lower() == "image":
            self.sizes = [image_size(rng) for _ in range(cfg.count)]
        else:
            self.sizes = [parse_size(cfg.size)] * cfg.count
        self.payload = os.urandom(max(self.sizes, default=0))

    @staticmethod
    def name(i: int) -> str:
        return f"obj-{i:08d}"

    def body(self, i: int) -> bytes:
        n = self.sizes[i]
        return self.payload if n == len(self.payload) else self.payload[:n]


async def one_op(ep: Endpoint, wl: Workload, phase: str, i: int, st: PhaseStats) -> None:
    url = ep.url(wl.name(i))
    t0 = time.perf_counter()
    try:
        if phase == "put":
            status, _ = await request(ep, "PUT", url, data=wl.body(i),
                                      headers={"Content-Type": "application/octet-stream"})
            moved = wl.sizes[i]
        elif phase == "get":
            status, moved = await request(ep, "GET", url)
            if status == 200 and moved != wl.sizes[i]:
                st.error(f"short body {moved}/{wl.sizes[i]}")
                return
        else:
            status, _ = await request(ep, phase.upper(), url)
            moved = 0
    except (aiohttp.ClientError, TimeoutError) as exc:
        st.error(type(exc).__name__)
        return
    if status // 100 != 2:
        st.error(str(status))
        return
    st.latencies.append(time.perf_counter() - t0)
    st.ops += 1
    st.bytes += moved
    if phase == "put":
        ep.stored.add(i)
    elif phase == "delete":
        ep.stored.discard(i)


async def run_chunk(ep: Endpoint, wl: Workload, phase: str, indices: list[int],
                    concurrency: int, budget: float) -> None:
    """Run `indices` with `concurrency` workers; stop taking work once the budget is spent."""
    st = ep.stats.setdefault(phase, PhaseStats())
    remaining = budget - st.secs
    if remaining <= 0:
        st.time_limited = True
        return
    it = iter(indices)
    t0 = time.perf_counter()
    deadline = t0 + remaining

    async def worker() -> None:
        for i in it:
            if time.perf_counter() > deadline:
                st.time_limited = True
                return
            await one_op(ep, wl, phase, i, st)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    st.secs += time.perf_counter() - t0


async def setup_endpoint(ep: Endpoint, cfg: Config) -> None:
    connector = aiohttp.TCPConnector(limit=cfg.concurrency, limit_per_host=cfg.concurrency,
                                     keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout)
    ep.session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                       auto_decompress=False, skip_auto_headers=("User-Agent",))
    await auth(ep)
    headers = {"X-Storage-Policy": ep.policy} if ep.policy else {}
    status, _ = await request(ep, "PUT", ep.url(), headers=headers)
    if status // 100 != 2 and not (ep.api == "s3" and status == 409):  # S3: already ours
        raise SystemExit(f"{ep.label}: cannot create container {ep.container}: {status}")


async def teardown_endpoint(ep: Endpoint, cfg: Config) -> None:
    if ep.session is None:
        return
    try:
        if "delete" in cfg.phases and not ep.stored:
            await request(ep, "DELETE", ep.url())
    except (aiohttp.ClientError, TimeoutError):
        pass
    await ep.session.close()


async def run_bench(cfg: Config) -> dict:
    """Run the configured phases; returns {"config": ..., "results": {label: {phase: ...}}}."""
    container = cfg.container or f"bench-{uuid.uuid4().hex[:10]}"
    eps = [Endpoint("A", cfg.url, cfg.user, cfg.key, container, cfg.api, cfg.s3_sha256,
                    cfg.policy)]
    if cfg.vs:
        eps.append(Endpoint("B", cfg.vs, cfg.vs_user or cfg.user, cfg.vs_key or cfg.key,
                            container + "-vs", cfg.vs_api or cfg.api,
                            cfg.s3_sha256, cfg.vs_policy))  # B may be the same cluster as A
    rounds = cfg.rounds or (4 if cfg.vs else 1)
    wl = Workload(cfg)
    try:
        for ep in eps:
            await setup_endpoint(ep, cfg)
            if "put" not in cfg.phases:
                ep.stored = set(range(cfg.count))  # reuse objects of an earlier --container run
        for phase in cfg.phases:
            for r in range(rounds):
                lo, hi = r * cfg.count // rounds, (r + 1) * cfg.count // rounds
                order = eps if r % 2 == 0 else list(reversed(eps))
                for ep in order:
                    idx = list(range(lo, hi))
                    if phase != "put":
                        idx = [i for i in idx if i in ep.stored]
                    await run_chunk(ep, wl, phase, idx, cfg.concurrency, cfg.phase_time)
    finally:
        for ep in eps:
            await teardown_endpoint(ep, cfg)
    return {
        "config": {"url": cfg.url, "user": cfg.user, "vs": cfg.vs, "size": cfg.size,
                   "api": cfg.api, "vs_api": (cfg.vs_api or cfg.api) if cfg.vs else None,
                   "count": cfg.count, "concurrency": cfg.concurrency,
                   "phases": list(cfg.phases), "rounds": rounds, "container": container,
                   "phase_time": cfg.phase_time, "policy": cfg.policy,
                   "vs_policy": cfg.vs_policy if cfg.vs else None},
        "results": {ep.label: {p: st.summary() for p, st in ep.stats.items()} for ep in eps},
    }


def format_report(report: dict) -> str:
    c = report["config"]
    lines = [
        "config: " + " ".join(f"{k}={c[k]}" for k in ("url", "user", "size", "count",
                                                          "concurrency", "rounds",
                                                          "phase_time", "container")),
        f"config: phases={','.join(c['phases'])} api={c.get('api', 'swift')}" +
        (f" vs={c['vs']} vs_api={c.get('vs_api') or c.get('api', 'swift')}"
         if c["vs"] else "") +
        (f" policy={c.get('policy') or 'default'}" +
         (f" vs_policy={c.get('vs_policy') or 'default'}" if c["vs"] else "")
         if c.get("policy") or c.get("vs_policy") else ""),
        f"{'phase':<7}{'ep':<4}{'ops':>7}{'errors':>8}{'secs':>9}{'ops/s':>10}{'MB/s':>9}"
        f"{'p50ms':>9}{'p95ms':>9}{'p99ms':>9}",
    ]
    res = report["results"]
    for phase in c["phases"]:
        for label, phases in res.items():
            s = phases.get(phase)
            if s is None:
                continue
            lines.append(
                f"{phase.upper():<7}{label:<4}{s['ops']:>7}{s['errors']:>8}{s['secs']:>9.2f}"
                f"{s['ops_s']:>10.1f}{s['mb_s']:>9.2f}{s['p50_ms']:>9.1f}{s['p95_ms']:>9.1f}"
                f"{s['p99_ms']:>9.1f}" + ("  (time limit)" if s["time_limited"] else ""))
            if s["reasons"]:
                lines.append(f"  errors {label} {phase}: " + ", ".join(
                    f"{k} x{v}" for k, v in sorted(s["reasons"].items())))
    if "B" in res:
        for phase in c["phases"]:
            a, b = res["A"].get(phase), res["B"].get(phase)
            if not a or not b:
                continue

            def ratio(x: float, y: float) -> str:
                return f"{x / y:.2f}" if y else "-"

            lines.append(f"ratio A/B {phase.upper():<7}ops/s={ratio(a['ops_s'], b['ops_s'])} "
                         f"p50={ratio(a['p50_ms'], b['p50_ms'])} "
                         f"p99={ratio(a['p99_ms'], b['p99_ms'])}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="auth URL of endpoint A (…/auth/v1.0)")
    p.add_argument("--user", default="test:tester")
    p.add_argument("--key", default="testing")
    p.add_argument("--size", default="64k", help="object size (64k, 1m) or 'image' for the mix")
    p.add_argument("--count", type=int, default=500, help="objects per phase")
    p.add_argument("--concurrency", "-c", type=int, default=32)
    p.add_argument("--phases", default=",".join(PHASES), help="comma list of put,get,head,delete")
    p.add_argument("--vs", help="auth URL of endpoint B, run interleaved with A")
    p.add_argument("--vs-user")
    p.add_argument("--vs-key")
    p.add_argument("--api", choices=("swift", "s3"), default="swift",
                   help="protocol of endpoint A: Swift tokens, or S3 (SigV4) at the URL's host")
    p.add_argument("--vs-api", choices=("swift", "s3"), help="protocol of B (default: --api)")
    p.add_argument("--s3-sha256", action="store_true",
                   help="S3: sign each body's SHA-256 instead of UNSIGNED-PAYLOAD")
    p.add_argument("--rounds", type=int, default=0,
                   help="rounds per phase, alternating A/B (default 1, or 4 with --vs)")
    p.add_argument("--phase-time", type=float, default=120.0,
                   help="seconds a phase may take per endpoint before it stops early")
    p.add_argument("--container", help="container to use (default: a new bench-* one)")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout (s)")
    p.add_argument("--policy", help="storage policy of A's container (Swift API; e.g. ec)")
    p.add_argument("--vs-policy", help="storage policy of B's container (A/B of two policies "
                   "on one cluster: --vs the same URL)")
    p.add_argument("--json", help="also write the report as JSON to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    phases = tuple(p.strip().lower() for p in a.phases.split(",") if p.strip())
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        print(f"unknown phases {bad}; choose from {','.join(PHASES)}", file=sys.stderr)
        return 2
    cfg = Config(a.url, a.user, a.key, a.size, a.count, a.concurrency, phases, a.vs,
                 a.vs_user, a.vs_key, a.api, a.vs_api, a.s3_sha256, a.rounds, a.phase_time,
                 a.container, a.timeout, policy=a.policy, vs_policy=a.vs_policy)
    try:
        import uvloop
    except ImportError:
        report = asyncio.run(run_bench(cfg))
    else:
        report = uvloop.run(run_bench(cfg))
    print(format_report(report), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if all(s["errors"] == 0 for r in report["results"].values()
                    for s in r.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
