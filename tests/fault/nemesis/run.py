"""One nemesis run: workload, fault, convergence, checks; and the per-fault summary table."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from swiftlite.obj.engine import fileformat
from tests.fault.nemesis.cluster import NemesisCluster
from tests.fault.nemesis.faults import FAULTS, Fault
from tests.fault.nemesis.workload import ABSENT, DEFAULT_MIX, Workload, allowed_states, last_acked


class ReplicasDiverged(AssertionError):
    """Clients saw every acknowledged write, but the replicas did not converge (or a replica
    was not repaired as it should be) by the deadline."""


@dataclass
class Sizes:
    """How much a run does; the CI test keeps these small, the soak raises them."""
    containers: int = 3
    names_per_container: int = 20
    concurrency: int = 6
    ops_before: int = 40
    ops_during: int = 120
    ops_after: int = 30
    after_seconds: float = 3.0  # past the proxy's error_suppression_interval: healed nodes
    #                             serve clients again before the daemons run
    converge_deadline: float = 60.0  # daemon rounds stop here (or when two change nothing)
    phase_timeout: float = 120.0  # a workload phase slower than this is a hang


@dataclass
class Run:
    """What a run's parts share: the cluster, the fault's randomness, what was found."""
    nc: NemesisCluster
    fault: str
    seed: int
    sizes: Sizes
    rng: random.Random
    containers: list[str]
    account: str = ""
    evidence: list[str] = field(default_factory=list)  # what the fault did
    fault_problems: list[str] = field(default_factory=list)  # it did not take effect
    diverged: list[str] = field(default_factory=list)  # replica-level problems

    def prefixes(self) -> tuple[str, ...]:
        return tuple(f"/{self.account}/{c}/" for c in self.containers)


@dataclass
class RunReport:
    fault: str
    seed: int
    sizes: dict[str, Any]
    seconds: float = 0.0
    ops: dict[str, int] = field(default_factory=dict)  # "PUT 201" -> count
    acked_writes: int = 0
    failed_writes: int = 0  # answered otherwise (or not at all): may or may not have landed
    stale_reads: int = 0
    lost: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)
    unquorate: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)  # final reads that got no answer
    hang: list[str] = field(default_factory=list)
    daemon_failures: list[str] = field(default_factory=list)
    fault_problems: list[str] = field(default_factory=list)
    listing_problems: list[str] = field(default_factory=list)
    converged: bool = False
    converge_seconds: float = 0.0
    rounds: int = 0
    diverged: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        """What a client could see go wrong (and a fault that never happened)."""
        out = [f"lost: {x}" for x in self.lost] + \
            [f"resurrected: {x}" for x in self.resurrected]
        for name in ("garbage", "unquorate", "unavailable", "hang", "daemon_failures",
                     "fault_problems"):
            out += [f"{name}: {x}" for x in getattr(self, name)]
        if self.converged:
            out += [f"listing: {x}" for x in self.listing_problems]
        return out

    def divergence(self) -> list[str]:
        out = list(self.diverged)
        if not self.converged:
            out += [f"listing: {x}" for x in self.listing_problems]
        return out

    def check(self) -> None:
        """AssertionError for anything a client could see; ReplicasDiverged when only the
        replicas failed to converge."""
        head = f"{self.fault} seed {self.seed}: "
        if v := self.violations():
            raise AssertionError(head + f"{len(v)} problems:\n  " + "\n  ".join(v[:40]))
        if d := self.divergence():
            raise ReplicasDiverged(head + f"not converged after {self.rounds} daemon rounds "
                                   f"({self.converge_seconds:.1f}s):\n  " + "\n  ".join(d[:40]))

    def client_errors(self) -> int:
        """Requests answered 5xx or not at all (counted, not failed: under a fault a busy
        node can time out, and a quorum may then be out of reach)."""
        return sum(n for k, n in self.ops.items() if k.split()[1][0] in "05")

    def line(self) -> str:
        return (f"{self.fault:<15} seed={self.seed:<4} ops={sum(self.ops.values()):<5} "
                f"acked={self.acked_writes:<4} failed={self.failed_writes:<3} "
                f"5xx={self.client_errors():<3} stale_reads={self.stale_reads:<3} "
                f"lost={len(self.lost)} resurrected={len(self.resurrected)} "
                f"other={len(self.violations()) - len(self.lost) - len(self.resurrected)} "
                f"converged={'yes' if self.converged else 'NO'} in "
                f"{self.converge_seconds:.1f}s/{self.rounds} rounds "
                f"run={self.seconds:.1f}s | {'; '.join(self.evidence)}")


# -- the run ---------------------------------------------------------------------------------

def run_fault(nc: NemesisCluster, fault: str, seed: int, sizes: Sizes | None = None,
              log_path: str | None = None) -> RunReport:
    """Run the workload on `nc` with `fault` injected, converge, check; never raises for what
    it finds (see RunReport.check). `log_path` gets the report as one JSON line."""
    sizes = sizes or Sizes()
    nc.ensure_healthy()
    tag = uuid.uuid4().hex[:6]
    run = Run(nc, fault, seed, sizes, random.Random(f"{fault}:{seed}"),
              [f"nemesis-{fault}-{seed}-{tag}-{i}" for i in range(sizes.containers)])
    report = RunReport(fault, seed, asdict(sizes))
    start = time.monotonic()
    f = FAULTS[fault](run)
    state = {"injected": False, "healed": False}
    try:
        wl = asyncio.run(_workload(run, f, report, state))
        t0 = time.monotonic()
        report.daemon_failures += f.before_converge()
        problems = _converge(run, wl, report)
        report.converge_seconds = time.monotonic() - t0
        report.converged = not problems
        report.diverged += problems
        f.verify()
        asyncio.run(_final_reads(run, wl, report))
    finally:
        try:
            if state["injected"] and not state["healed"]:
                f.heal()
        finally:
            f.cleanup()
    report.diverged += run.diverged
    report.fault_problems = run.fault_problems
    report.evidence = run.evidence
    report.seconds = time.monotonic() - start
    if log_path:
        with open(log_path, "a") as out:
            out.write(json.dumps(asdict(report)) + "\n")
    return report


async def _workload(run: Run, f: Fault, report: RunReport, state: dict[str, bool]) -> Workload:
    sizes = run.sizes
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        wl = Workload(run.nc, http, random.Random(f"workload:{run.fault}:{run.seed}"),
                      run.containers, sizes.names_per_container)
        await wl.login()
        run.account = wl.account
        wl.start(sizes.concurrency)

        async def phase(name: str, ops: int, min_seconds: float = 0.0) -> bool:
            if await wl.wait_ops(ops, min_seconds, sizes.phase_timeout):
                return True
            report.hang.append(f"phase {name}: under {ops} operations in "
                               f"{sizes.phase_timeout:.0f}s")
            return False

        try:
            if await phase("before", sizes.ops_before):
                await asyncio.to_thread(f.inject)
                state["injected"] = True
                wl.mix = f.during_mix or DEFAULT_MIX
                during = sizes.ops_during if f.during_ops is None else f.during_ops
                ok = await phase("during", during, f.min_seconds)
                wl.mix = DEFAULT_MIX
                await asyncio.to_thread(f.heal)
                state["healed"] = True
                if ok:
                    await phase("after", sizes.ops_after, sizes.after_seconds)
        finally:
            await wl.stop()
    report.ops = dict(wl.stats.ops)
    report.acked_writes = sum(w.acked for ws in wl.writes.values() for w in ws)
    report.failed_writes = sum(not w.acked for ws in wl.writes.values() for w in ws)
    report.stale_reads = wl.stats.stale_reads
    report.garbage += wl.stats.garbage
    report.unquorate += wl.stats.unquorate
    return wl


# -- convergence -----------------------------------------------------------------------------

def _snapshot(run: Run, wl: Workload) -> tuple[Any, list[str]]:
    """Replica state of every object and container the run touched, and what disagrees:
    every object the same on its primaries and on no handoff; every container replica
    listing exactly the objects its primaries hold; no update pending."""
    nc, problems = run.nc, []
    present: dict[tuple[str, str], tuple[str, int]] = {}
    objects = []
    for key in wl.keys:
        w = nc.where(run.account, *key)
        states = tuple(nc.state(d, w) for d in w.primaries)
        left = tuple((d, s) for d in w.handoffs if (s := nc.state(d, w)))
        objects.append((states, left))
        if len(set(states)) > 1:
            problems.append(f"{key[0]}/{key[1]}: primaries hold {states}")
        if left:
            problems.append(f"{key[0]}/{key[1]}: left on handoffs: {left}")
        elif len(set(states)) == 1 and states[0].endswith(".data"):
            path = os.path.join(fileformat.hash_dir(w.primaries[0], w.part, w.hexhash), states[0])
            md, _ = fileformat.read_file_metadata(path)
            present[key] = (md["ETag"], int(md["Content-Length"]))
    listings = []
    for c in run.containers:
        expect = sorted((n, *v) for (cc, n), v in present.items() if cc == c)
        for rep in nc.container_replicas(run.account, c):
            status, rows, count = nc.replica_listing(rep["url"])
            got = sorted((r["name"], r["hash"], r["bytes"]) for r in rows)
            listings.append((status, tuple(got), count))
            if status not in (200, 204) or got != expect or count != len(expect):
                missing = sorted({r[0] for r in expect} - {r[0] for r in got})
                extra = sorted({r[0] for r in got} - {r[0] for r in expect})
                problems.append(f"{c} replica on {nc.nodes[rep['node']]['name']}: status "
                                f"{status}, {len(got)} rows (count {count}) for {len(expect)}"
                                f" objects; missing {missing[:5]} extra {extra[:5]}")
    pending = nc.pending_updates(run.prefixes())
    if pending:
        problems.append(f"{pending} container updates still pending")
    return (tuple(objects), tuple(listings), pending), problems


def _converge(run: Run, wl: Workload, report: RunReport) -> list[str]:
    """Daemon rounds until the replicas agree; stop early when two rounds in a row change
    nothing (more would not either), or at the deadline. The problems left, if any."""
    deadline = time.monotonic() + run.sizes.converge_deadline
    prev, still = None, 0
    while True:
        snap, problems = _snapshot(run, wl)
        if not problems:
            return []
        still = still + 1 if snap == prev else 0
        if still >= 2 or time.monotonic() > deadline:
            return problems
        prev = snap
        report.daemon_failures += run.nc.daemon_round()
        report.rounds += 1


# -- what clients see at the end -------------------------------------------------------------

async def _final_reads(run: Run, wl: Workload, report: RunReport) -> None:
    timeout = aiohttp.ClientTimeout(total=30)
    headers = {"X-Auth-Token": wl.token}
    seen: dict[tuple[str, str], tuple[str, int]] = {}
    async with aiohttp.ClientSession(timeout=timeout) as http:
        sem = asyncio.Semaphore(8)

        async def read(key: tuple[str, str]) -> None:
            async with sem, http.get(f"{wl.url}/{key[0]}/{key[1]}", headers=headers) as r:
                body = await r.read()
                etag = r.headers.get("ETag", "").strip('"')
            name = f"{key[0]}/{key[1]}"
            if r.status == 200:
                if hashlib.md5(body).hexdigest() != etag:
                    report.garbage.append(f"{name}: body does not match its ETag")
                seen[key] = (etag, len(body))
                got = etag
            elif r.status == 404:
                got = ABSENT
            else:
                report.unavailable.append(f"{name}: GET {r.status}")
                return
            writes = wl.writes[key]
            if got in allowed_states(writes):
                return
            acked = last_acked(writes)
            if got == ABSENT or (got in {w.etag for w in writes}
                                 and acked is not None and acked.op == "PUT"):
                report.lost.append(f"{name}: last acknowledged PUT {acked and acked.etag}, "
                                   f"read {got or '404'}")
            elif got in {w.etag for w in writes}:
                report.resurrected.append(f"{name}: deleted, read an older {got}")
            else:
                report.garbage.append(f"{name}: read {got}, never written")

        await asyncio.gather(*(read(k) for k in wl.keys))
        for c in run.containers:
            async with http.get(f"{wl.url}/{c}", params={"format": "json"},
                                headers=headers) as r:
                body = await r.read()
                status = r.status
            rows = json.loads(body) if status == 200 else []
            got = sorted((row["name"], row["hash"], row["bytes"]) for row in rows)
            expect = sorted((n, *v) for (cc, n), v in seen.items() if cc == c)
            if status not in (200, 204) or got != expect:
                report.listing_problems.append(
                    f"{c}: proxy listing (status {status}) has {len(got)} rows, objects "
                    f"readable: {len(expect)}; differing: "
                    f"{sorted(set(got) ^ set(expect))[:5]}")


# -- summary ---------------------------------------------------------------------------------

_COLUMNS: list[tuple[str, Any]] = [  # header, value of one run (summed over the runs)
    ("ops", lambda r: sum(r.ops.values())),
    ("acked", lambda r: r.acked_writes),
    ("failed", lambda r: r.failed_writes),
    ("5xx", RunReport.client_errors),
    ("lost", lambda r: len(r.lost)),
    ("resurrected", lambda r: len(r.resurrected)),
    ("other", lambda r: len(r.violations()) - len(r.lost) - len(r.resurrected)),
    ("diverged", lambda r: bool(r.divergence())),  # runs whose replicas did not converge
]


def summarize(reports: list[RunReport]) -> str:
    """One row per fault: runs, operations, acknowledged and failed writes, requests
    answered 5xx (or not at all), objects lost, resurrected, other violations, runs whose
    replicas did not converge, time to converge (mean / max of the runs that did)."""
    rows = [f"{'fault':<15}{'runs':>5}" + "".join(f"{h:>12}" for h, _ in _COLUMNS)
            + f"{'converge mean':>15}{'max':>7}"]
    for name in [f for f in FAULTS if any(r.fault == f for r in reports)]:
        rs = [r for r in reports if r.fault == name]
        conv = [r.converge_seconds for r in rs if r.converged]
        mean = f"{statistics.mean(conv):.1f}s" if conv else "-"
        most = f"{max(conv):.1f}s" if conv else "-"
        rows.append(f"{name:<15}{len(rs):>5}"
                    + "".join(f"{sum(int(v(r)) for r in rs):>12}" for _, v in _COLUMNS)
                    + f"{mean:>15}{most:>7}")
    return "\n".join(rows)


def load_reports(path: str) -> list[RunReport]:
    with open(path) as f:
        return [RunReport(**json.loads(line)) for line in f if line.strip()]
