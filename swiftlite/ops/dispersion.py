"""`swiftlite dispersion populate|report`: canaries spread over the rings, and how many of
their replicas are where the ring puts them.

populate (through the proxy, authenticated) creates canary containers `dispersion_<i>` and
canary objects `dispersion_objects/dispersion_<i>`, each in a partition no other canary of its
kind holds, until `--coverage` percent of the ring's partitions have one (at least a handful).
The names are the first ones of the fixed sequence dispersion_0, dispersion_1, ... that land in
a new partition, so they depend only on the cluster's hash affixes and part power, never on
where the ring places partitions: populate and report agree on them after any rebalance, and
a second populate (or one with a larger coverage) only adds what is missing. How many of each
kind exist is kept as account metadata (X-Account-Meta-Dispersion-Containers and -Objects):
the account's servers are not the containers' ones, so a report still runs when every
container replica is down.

report asks every primary node of every canary directly (a signed backend HEAD, concurrently,
with short timeouts) and prints the share of copies found, of canaries with every replica,
how many miss 1, 2, ... copies, which copies are missing and which nodes errored or could not
be reached. Exit status: 0 at 100%, 1 below, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp

from swiftlite.common.clients.client import node_path
from swiftlite.common.config import Section, load_config
from swiftlite.ring import Ring

OBJECTS_CONTAINER = "dispersion_objects"
NAME_PREFIX = "dispersion_"
META = {"container": "X-Account-Meta-Dispersion-Containers",
        "object": "X-Account-Meta-Dispersion-Objects"}
KINDS = ("container", "object")
MIN_CANARIES = 10  # a 1% sample of a small ring is two or three partitions: too few to judge
DEAD_AFTER = 3  # failures in a row of one server before its other copies are not asked


class SetupError(Exception):
    """The tool cannot run (no config, no credentials, no canaries): exit status 2."""


class CountsUnavailable(SetupError):
    """The account did not answer with the canary counts (its servers are down)."""


@dataclass
class Setup:
    conf: Section
    auth_url: str
    user: str
    key: str

    @property
    def swift_dir(self) -> str:
        return str(self.conf.get("swift_dir") or "/etc/swiftlite")

    def ring(self, kind: str) -> Ring:
        # The ring is read once: a report is a snapshot, and the names never depend on it.
        return Ring.load(os.path.join(self.swift_dir, f"{kind}.ring.gz"), reload_interval=1e9)


def _auth_url_from_conf(conf: Section) -> str:
    ip = conf.get_str("bind_ip", "127.0.0.1")
    if ip in ("0.0.0.0", "::", ""):
        ip = "127.0.0.1"
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{conf.get_int('bind_port', 8080)}/auth/v1.0"


def load_setup(args: argparse.Namespace) -> Setup:
    """The proxy's config (hash affixes, rings, backend secret), its auth URL, credentials."""
    if args.root:
        root = os.path.abspath(args.root)
        conf_path = os.path.join(root, "etc", "proxy.conf")
    elif args.config:
        root, conf_path = None, args.config
    else:
        raise SetupError("give the proxy's config (-c PROXY_CONF) or an all-in-one --root")
    try:
        conf = load_config(conf_path, "proxy-server")  # also sets the [hash] affixes
    except (OSError, KeyError) as exc:
        raise SetupError(str(exc)) from None
    auth_url = args.auth_url
    if not auth_url and root:
        try:  # `swiftlite up` says where its proxy listens
            with open(os.path.join(root, "cluster.json")) as f:
                auth_url = json.load(f)["proxy"]["auth_url"]
        except (OSError, ValueError, KeyError):
            pass
    user, key = args.user, args.key
    if root and not (user and key):
        user, key = _root_admin(conf)
    if not (user and key):
        raise SetupError("give --user and --key (an account's admin; a dedicated account "
                         "keeps the canaries apart from real data)")
    return Setup(conf, auth_url or _auth_url_from_conf(conf), user, key)


def _root_admin(conf: Section) -> tuple[str, str]:
    """An all-in-one root's first .admin user, as its proxy config names them."""
    from swiftlite.proxy.auth import TempAuth

    for name, user in TempAuth(conf).users.items():
        if ".admin" in user.groups:
            return name, user.key
    raise SetupError("the root's proxy config has no .admin user: give --user and --key")


# ---- canary names ---------------------------------------------------------------------------

def target_count(partitions: int, coverage: float) -> int:
    return min(partitions, max(MIN_CANARIES, math.ceil(partitions * coverage / 100.0)))


def canary_names(ring: Ring, account: str, kind: str, count: int) -> list[tuple[str, int]]:
    """The first `count` names of dispersion_0, dispersion_1, ... each landing in a partition
    no earlier one took, with their partitions."""
    count = min(count, ring.partition_count)
    taken: set[int] = set()
    out: list[tuple[str, int]] = []
    # Covering every partition takes about n*ln(n) draws; the bound only stops a runaway.
    limit = count * (8 + int(math.log(count + 1) * 2)) + 10000
    i = 0
    while len(out) < count and i < limit:
        name = f"{NAME_PREFIX}{i}"
        i += 1
        part = (ring.get_part(account, name) if kind == "container"
                else ring.get_part(account, OBJECTS_CONTAINER, name))
        if part not in taken:
            taken.add(part)
            out.append((name, part))
    return out


# ---- the proxy side: populate, and the recorded counts --------------------------------------

def _session() -> aiohttp.ClientSession:
    timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=60)
    return aiohttp.ClientSession(timeout=timeout, auto_decompress=False)


async def recorded_counts(session: aiohttp.ClientSession, auth: Any) -> dict[str, int] | None:
    """How many canaries of each kind populate made; None if it never ran."""
    async with session.head(auth.storage_url, headers={"X-Auth-Token": auth.token}) as resp:
        if resp.status // 100 != 2:
            raise CountsUnavailable(f"HEAD {auth.account}: {resp.status} {resp.reason}")
        if not any(h in resp.headers for h in META.values()):
            return None
        counts = {}
        for kind, header in META.items():
            try:
                counts[kind] = max(0, int(resp.headers.get(header, "0")))
            except ValueError:
                counts[kind] = 0
        return counts


async def _put(session: aiohttp.ClientSession, url: Any, token: str, body: bytes | None,
               attempts: int = 3) -> str | None:
    """PUT with retries on 5xx and network errors; None on success, else why it failed."""
    why = ""
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(0.2 * attempt)  # back off before trying again
        try:
            async with session.put(url, data=body, headers={"X-Auth-Token": token}) as resp:
                await resp.read()
                if resp.status // 100 == 2:
                    return None
                why = f"{resp.status} {resp.reason}"
                if resp.status < 500:
                    return why
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            why = repr(exc)
    return why


async def populate(setup: Setup, coverage: float, concurrency: int, out: TextIO) -> int:
    from swiftlite.migrate.progress import Progress
    from swiftlite.migrate.swift_api import SwiftError, authenticate, ensure_container

    t0 = time.monotonic()
    rings = {kind: setup.ring(kind) for kind in KINDS}
    async with _session() as session:
        try:
            auth = await authenticate(session, setup.auth_url, setup.user, setup.key)
            await ensure_container(session, auth, OBJECTS_CONTAINER)
            recorded = await recorded_counts(session, auth)
            have = dict(recorded or dict.fromkeys(KINDS, 0))
        except (SwiftError, aiohttp.ClientError, OSError) as exc:
            raise SetupError(str(exc)) from None
        todo: dict[str, list[tuple[str, int]]] = {}
        for kind, ring in rings.items():
            want = max(target_count(ring.partition_count, coverage), have[kind])
            todo[kind] = canary_names(ring, auth.account, kind, want)[have[kind]:]
        # Each object's body is its own name: small, and a copy found anywhere says whose.
        progress = Progress(sum(map(len, todo.values())),
                            sum(len(name.encode()) for name, _ in todo["object"]))
        sem = asyncio.Semaphore(max(1, concurrency))
        failed: list[str] = []

        async def one(kind: str, name: str) -> bool:
            body = b""
            async with sem:
                if kind == "container":
                    why = await _put(session, auth.url(name), auth.token, None)
                    what = name
                else:
                    body = name.encode()
                    why = await _put(session, auth.url(OBJECTS_CONTAINER, name), auth.token,
                                     body)
                    what = f"{OBJECTS_CONTAINER}/{name}"
            if why:
                progress.fail()
                failed.append(f"{what}: {why}")
            else:
                progress.add(len(body))
            progress.tick()
            return why is None

        created = {}
        for kind in KINDS:
            done = await asyncio.gather(*(one(kind, name) for name, _ in todo[kind]))
            # Only an unbroken run counts: the next populate retries from the first failure.
            made = done.index(False) if False in done else len(done)
            created[kind] = made
            have[kind] += made
        if progress.total_files:
            progress.finish()
        if have != recorded:
            async with session.post(auth.storage_url, headers={
                    "X-Auth-Token": auth.token, **{META[k]: str(have[k]) for k in KINDS}}) \
                    as resp:
                await resp.read()
                if resp.status // 100 != 2:
                    failed.append(f"POST {auth.account}: {resp.status} {resp.reason}")
    for line in failed:
        print(f"FAILED {line}", file=out)
    el = time.monotonic() - t0
    for kind in KINDS:
        parts = rings[kind].partition_count
        print(f"{kind}s: created {created[kind]}, {have[kind]} canaries in all, covering "
              f"{100.0 * have[kind] / parts:.2f}% of {parts} partitions", file=out)
    print(f"populated in {el:.1f}s for account {auth.account}", file=out)
    return 1 if failed else 0


# ---- the storage side: report ---------------------------------------------------------------

def node_name(node: dict[str, Any]) -> str:
    return f"{node['ip']}:{node['port']}/{node['device']}"


@dataclass
class KindReport:
    kind: str
    partitions: int
    replicas: int
    canaries: int = 0
    copies_expected: int = 0
    copies_found: int = 0
    complete: int = 0
    missing: dict[int, int] = field(default_factory=dict)  # copies missing -> canaries
    missing_copies: list[dict[str, Any]] = field(default_factory=list)
    node_errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def pct_found(self) -> float:
        return 100.0 * self.copies_found / self.copies_expected if self.copies_expected \
            else 100.0

    @property
    def pct_complete(self) -> float:
        return 100.0 * self.complete / self.canaries if self.canaries else 100.0

    def to_json(self) -> dict[str, Any]:
        return {"canaries": self.canaries, "partitions": self.partitions,
                "coverage_pct": round(100.0 * self.canaries / self.partitions, 4),
                "replicas": self.replicas, "copies_expected": self.copies_expected,
                "copies_found": self.copies_found, "pct_found": round(self.pct_found, 4),
                "complete": self.complete, "pct_complete": round(self.pct_complete, 4),
                "missing": {str(k): v for k, v in sorted(self.missing.items())},
                "missing_copies": self.missing_copies, "node_errors": self.node_errors,
                "seconds": round(self.seconds, 3)}


class Prober:
    """Signed HEADs to storage servers, bounded in number; a server that failed to connect or
    answer DEAD_AFTER times in a row is not asked again, so a dead or hung node costs a few
    timeouts, not one per canary."""

    def __init__(self, conf: Section, timeout: float, concurrency: int) -> None:
        from swiftlite.common import signing
        from swiftlite.common.clients.fastclient import Pool

        self.pool = Pool(timeout, timeout, signer=signing.from_conf(conf))
        self.sem = asyncio.Semaphore(max(1, concurrency))
        self.failures: dict[tuple[str, int], int] = {}
        self.dead: dict[tuple[str, int], str] = {}

    async def head(self, node: dict[str, Any], path: str) -> tuple[int | None, str]:
        """(status, "") when the server answered, else (None, why not)."""
        from swiftlite.common.clients.fastclient import ConnectError
        from swiftlite.proxy.backend.replicas import NETWORK_ERRORS

        server = (node["ip"], node["port"])
        async with self.sem:
            if server in self.dead:
                return None, f"not asked: {self.dead[server]}"
            try:
                resp = await self.pool.request(node["ip"], node["port"], "HEAD", path, {})
            except NETWORK_ERRORS as exc:
                why = str(exc) or type(exc).__name__
                why = ("unreachable: " if isinstance(exc, ConnectError) else "no answer: ") + why
                n = self.failures[server] = self.failures.get(server, 0) + 1
                if n >= DEAD_AFTER:
                    self.dead[server] = why
                return None, why
            self.failures[server] = 0  # it answers: slow, not dead
            resp.release()
            return resp.status, ""

    async def close(self) -> None:
        await self.pool.close()


async def check_kind(prober: Prober, ring: Ring, account: str, kind: str,
                     names: list[tuple[str, int]]) -> KindReport:
    t0 = time.monotonic()
    rep = KindReport(kind, ring.partition_count, ring.replica_count, canaries=len(names))

    async def one(name: str, part: int) -> None:
        nodes = ring.get_part_nodes(part)
        names_ = (account, name) if kind == "container" else (account, OBJECTS_CONTAINER, name)
        answers = await asyncio.gather(*(prober.head(n, node_path(n, part, *names_))
                                         for n in nodes))
        found = 0
        for node, (status, why) in zip(nodes, answers, strict=True):
            if status is not None and status // 100 == 2:
                found += 1
                continue
            reason = str(status) if status is not None else why
            rep.missing_copies.append({"name": name, "partition": part,
                                       "node": node_name(node), "reason": reason})
            if status != 404:  # a 404 is an answer: the node works, the copy is gone
                err = rep.node_errors.setdefault(node_name(node), {"count": 0})
                err["count"] += 1
                err["reason"] = reason
        # A ring with fewer devices than replicas still owes `replicas` copies.
        lost = ring.replica_count - found
        rep.copies_expected += ring.replica_count
        rep.copies_found += found
        if lost:
            rep.missing[lost] = rep.missing.get(lost, 0) + 1
        else:
            rep.complete += 1

    await asyncio.gather(*(one(name, part) for name, part in names))
    rep.missing_copies.sort(key=lambda m: (m["partition"], m["node"]))
    rep.seconds = time.monotonic() - t0
    return rep


async def report(setup: Setup, timeout: float, concurrency: int,
                 coverage: float) -> dict[str, KindReport]:
    """Every canary's primaries asked; `coverage` says how many canaries there are only when
    the account cannot say (populate's default is the report's)."""
    from swiftlite.migrate.swift_api import SwiftError, authenticate

    counts: dict[str, int] | None
    try:
        async with _session() as session:
            auth = await authenticate(session, setup.auth_url, setup.user, setup.key)
            try:
                counts = await recorded_counts(session, auth)
            except CountsUnavailable as exc:
                print(f"warning: {exc}: assuming canaries for {coverage}% coverage",
                      file=sys.stderr)
                counts = {k: target_count(setup.ring(k).partition_count, coverage)
                          for k in KINDS}
    except (SwiftError, aiohttp.ClientError, OSError) as exc:
        raise SetupError(str(exc)) from None
    if not counts or not any(counts.values()):
        raise SetupError(f"no canaries in account {auth.account}: run "
                         "`swiftlite dispersion populate` first")
    prober = Prober(setup.conf, timeout, concurrency)
    try:
        out = {}
        for kind in KINDS:
            ring = setup.ring(kind)
            names = canary_names(ring, auth.account, kind, counts[kind])
            out[kind] = await check_kind(prober, ring, auth.account, kind, names)
        return out
    finally:
        await prober.close()


def print_report(reps: dict[str, KindReport], out: TextIO, max_lines: int = 20) -> None:
    for kind, r in reps.items():
        print(f"{kind}s: queried {r.canaries} canaries ({100.0 * r.canaries / r.partitions:.2f}%"
              f" of {r.partitions} partitions, {r.replicas} replicas) in {r.seconds:.2f}s",
              file=out)
        print(f"  {r.pct_found:.2f}% of {kind} copies found ({r.copies_found} of "
              f"{r.copies_expected})", file=out)
        print(f"  {r.pct_complete:.2f}% of {kind}s have every replica ({r.complete} of "
              f"{r.canaries})", file=out)
        for lost, n in sorted(r.missing.items()):
            what = "all copies" if lost >= r.replicas else \
                f"{lost} cop{'y' if lost == 1 else 'ies'}"
            print(f"  !!! {n} {kind}{'s' if n != 1 else ''} missing {what}", file=out)
        # Copies a node said it lacks one by one; those of nodes that failed, per node.
        gone = [m for m in r.missing_copies if m["reason"] == "404"]
        for m in gone[:max_lines]:
            print(f"  missing: {m['name']} (partition {m['partition']}) on {m['node']}",
                  file=out)
        if len(gone) > max_lines:
            print(f"  ... and {len(gone) - max_lines} more (--json lists all)", file=out)
        for node, err in sorted(r.node_errors.items()):
            print(f"  node error: {node}: {err['count']} cop{'y' if err['count'] == 1 else 'ies'}"
                  f" unconfirmed; last: {err['reason']}", file=out)


# ---- entry point ----------------------------------------------------------------------------

def _run_async(coro_fn: Callable[[], Awaitable[int]]) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    return uvloop.run(coro_fn())  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    from swiftlite.common.signing import SecretError

    try:
        setup = load_setup(args)
        if args.action == "populate":
            return _run_async(lambda: populate(setup, args.coverage, args.concurrency,
                                               sys.stdout))

        async def do_report() -> int:
            reps = await report(setup, args.timeout, args.concurrency, args.coverage)
            if args.json:
                json.dump({k: r.to_json() for k, r in reps.items()}, sys.stdout, indent=2)
                print()
            else:
                print_report(reps, sys.stdout)
            return 0 if all(r.copies_found == r.copies_expected for r in reps.values()) else 1

        return _run_async(do_report)
    except (SetupError, SecretError, aiohttp.ClientError, OSError) as exc:
        print(f"swiftlite dispersion: {exc}", file=sys.stderr)
        return 2
