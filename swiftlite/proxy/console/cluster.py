"""The operator page's data: `cluster_report`, one JSON document of the cluster's health for
reseller admins (`GET /console/api/cluster`; the console middleware checks the caller, this
module does not). The browser polls it every few seconds and charts counter deltas.

Where each part comes from, all asked at once and bounded together by `timeout`:

- `rings`: the rings this proxy has loaded (one object ring per storage policy, then the
  container and account rings): replicas, partitions, devices, zones, balance (the worst
  device's distance, in %, from its weight's share of the partition replicas; a weight-0
  device still holding partitions counts as MAX_BALANCE) and the ring file's md5.
- `servers`: every (ip, port) the rings place devices on, asked `GET /recon` as `swiftlite
  status --cluster` asks (common/clients/recon_client.py): signed by the process-wide signer, which
  `serve` sets from the proxy's `backend_secret` before any worker starts (common/signing.py).
  Only the rings' servers are asked: md5s of object-N rings are not on /recon, so a host
  that missed a push of a policy ring other than 0's is not flagged.
  Devices are the host's (as /recon reports them) joined by name with the rings' devices on
  that server (weight, partition replicas per ring); a ring device the host does not have
  is listed unmounted. `problems` follow the status tool's rules (common/clients/recon_client.py),
  judged once per host and listed on each of its servers.
- `error_limited`: the error limiter of *this worker* of the proxy (proxy/backend/nodes.py). Each
  worker limits nodes on its own; another worker, or another proxy host, may differ.
- `metrics`: the proxy's own request counters (common/observe/metrics.py), summed across every
  worker of this proxy server through its multiprocess directory: the asking worker's
  counts are current, the other workers' at most a second old (their sampler flushes once
  a second). Not across proxy hosts: each host's proxy counts its own requests. Counts run
  since the proxy started. Without metrics (a proxy app not started by `serve`),
  `metrics.enabled` is false and the numbers are zeros and nulls.

A server that does not answer within `timeout`, refuses, or fails appears with ok=false and
why; nothing one server does makes the call raise or outlast `timeout` (blocking parts run
in the thread pool; what is not ready when time is up is reported missing).

The document (JSON-serialisable: no NaN or infinity anywhere)::

    {"generated": epoch, "timeout": s,
     "rings": [{"name": "object" | "object-N" | "container" | "account",
                "policy": name | None, "replicas", "part_power", "partitions", "devices",
                "zones", "balance": % | None, "md5": hex | None}],
     "servers": [{"host": "ip:port", "roles": [...], "ok", "error": str | None,
                  "devices": [{"name", "kind": "object" | "meta", "mounted", "total",
                               "used", "free", "partitions": {ring name: n}, "weight",
                               "async_pending", "quarantined", "error"}],
                  "daemons": [{"name", "configured", "alive", "running_for",
                               "last_pass_age", "last_duration", "failures", "progress",
                               "counters": {name: n}}],
                  "problems": [str]}],
     "error_limited": [{"node": "ip:port/device" | "ip:port", "errors", "limited",
                        "until": epoch | None}],
     "metrics": {"enabled", "requests": {method: n}, "errors": {"4xx", "5xx"},
                 "latency_ms": {"p50", "p99"}, "bytes_in", "bytes_out", "error"},
     "problems": [str]}

A device of a server that did not answer is known from the ring only: its mounted, sizes,
async_pending and quarantined are None (unknown), not false or 0. A latency quantile is
None before any request and when it falls past the histogram's last finite bound (30 s).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from swiftlite.common.clients.client import make_session
from swiftlite.common.clients.recon_client import (
    FULL_PERCENT,
    PENDING_LIMIT,
    ask_one,
    hosts,
    problems_of,
)
from swiftlite.common.observe import metrics, metrics_summary
from swiftlite.common.observe.recon import file_md5
from swiftlite.common.threadpool import run_blocking
from swiftlite.proxy.core_api import ProxyCore
from swiftlite.ring import Ring

ROLE_ORDER = ("object", "container", "account")
MAX_BALANCE = 999.99  # a weight-0 device holding partitions: off without bound
# Kept back from `timeout` for putting the answers together once the waiting stops.
ASSEMBLY_MARGIN = 0.05
NOT_ON_HOST = "not on the host"  # a ring device the host's devices root lacks

Server = tuple[str, int]


@dataclass
class _RingRef:
    name: str  # object, object-N, container, account: the file is <name>.ring.gz
    kind: str  # object, container or account: the role of the servers it names
    policy: str | None
    ring: Ring


async def cluster_report(proxy: ProxyCore, *, timeout: float = 2.0,
                         full_percent: float = FULL_PERCENT,
                         pending_limit: int = PENDING_LIMIT) -> dict[str, Any]:
    """The cluster as this proxy sees it (see the module doc); never raises for a server,
    returns within about `timeout` seconds."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + max(0.0, timeout - ASSEMBLY_MARGIN)
    generated = time.time()
    refs = _rings(proxy)
    placed = _placement(refs)
    targets = sorted(placed)
    async with make_session(conn_timeout=timeout, node_timeout=timeout) as session:
        asks = {t: asyncio.ensure_future(ask_one(session, *t)) for t in targets}
        facts = asyncio.ensure_future(run_blocking(_ring_facts, refs))
        stats = asyncio.ensure_future(run_blocking(_proxy_metrics))
        pending = [*asks.values(), facts, stats]
        _, late = await asyncio.wait(pending, timeout=max(0.0, stop_at - loop.time()))
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    docs: dict[Server, Any] = {
        t: task.result() if not task.cancelled() else f"no answer within {timeout:g}s"
        for t, task in asks.items()}
    ring_facts: dict[str, tuple[dict[int, int], str | None]] = \
        facts.result() if not facts.cancelled() and facts.exception() is None else {}
    if not stats.cancelled() and stats.exception() is None:
        metrics_doc = stats.result()
    else:
        metrics_doc = _metrics_doc({}, metrics.enabled())
        metrics_doc["error"] = "not read in time" if stats.cancelled() else \
            f"{type(stats.exception()).__name__}: {stats.exception()}"

    local_md5 = {name: md5 for name, (_, md5) in ring_facts.items()}
    counts = {name: c for name, (c, _) in ring_facts.items()}
    servers, problems = _servers(placed, docs, counts, local_md5, full_percent,
                                 pending_limit)
    return {
        "generated": generated,
        "timeout": timeout,
        "rings": [_ring_entry(ref, ring_facts.get(ref.name)) for ref in refs],
        "servers": servers,
        "error_limited": proxy.limiter.snapshot(),
        "metrics": metrics_doc,
        "problems": problems,
    }


# ---- rings ---------------------------------------------------------------------------------

def _rings(proxy: ProxyCore) -> list[_RingRef]:
    out = [_RingRef(p.ring_name, "object", p.name, proxy.object_rings[p.index])
           for p in proxy.policies if p.index in proxy.object_rings]
    out.append(_RingRef("container", "container", None, proxy.container_ring))
    out.append(_RingRef("account", "account", None, proxy.account_ring))
    return out


def _placement(refs: list[_RingRef]) -> dict[Server, dict[str, list[tuple[_RingRef, dict]]]]:
    """(ip, port) -> device name -> [(ring, its device entry)] of every ring placing it."""
    out: dict[Server, dict[str, list[tuple[_RingRef, dict]]]] = {}
    for ref in refs:
        for dev in ref.ring.devs:
            if dev is not None:
                out.setdefault((dev["ip"], dev["port"]), {}) \
                    .setdefault(dev["device"], []).append((ref, dev))
    return out


def _ring_facts(refs: list[_RingRef]) -> dict[str, tuple[dict[int, int], str | None]]:
    """ring name -> (dev id -> partition replicas, file md5) (blocking)."""
    return {ref.name: (ref.ring.assignments(), file_md5(ref.ring.path)) for ref in refs}


def balance(devs: list[dict[str, Any] | None], counts: dict[int, int]) -> float:
    """The worst device's distance, in %, from its weight's share of the assignments."""
    weighted = [(d["id"], float(d.get("weight") or 0.0)) for d in devs if d is not None]
    total_weight = sum(w for _, w in weighted)
    assigned = sum(counts.values())
    if total_weight <= 0 or assigned == 0:
        return 0.0
    worst = 0.0
    for dev_id, weight in weighted:
        want = assigned * weight / total_weight
        have = counts.get(dev_id, 0)
        if want > 0:
            worst = max(worst, 100.0 * abs(have - want) / want)
        elif have:
            worst = MAX_BALANCE
    return round(min(worst, MAX_BALANCE), 2)


def _ring_entry(ref: _RingRef, facts: tuple[dict[int, int], str | None] | None) -> dict:
    devs = [d for d in ref.ring.devs if d is not None]
    return {"name": ref.name, "policy": ref.policy, "replicas": ref.ring.replica_count,
            "part_power": ref.ring.part_power, "partitions": ref.ring.partition_count,
            "devices": len(devs),
            "zones": len({(d.get("region", 1), d.get("zone")) for d in devs}),
            # None: the counts were not ready in time (a busy thread pool)
            "balance": balance(ref.ring.devs, facts[0]) if facts else None,
            "md5": facts[1] if facts else None}


# ---- servers -------------------------------------------------------------------------------

def _servers(placed: dict[Server, dict[str, list[tuple[_RingRef, dict]]]],
             docs: dict[Server, Any], counts: dict[str, dict[int, int]],
             local_md5: dict[str, str | None], full_percent: float,
             pending_limit: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The servers' entries, and every problem once (a host's problems are judged once
    and listed on each of its servers)."""
    by_server: dict[Server, list[str]] = {}
    for label, members, doc in hosts(docs):
        found = problems_of(label, doc, local_md5, full_percent, pending_limit) \
            if isinstance(doc, dict) else [f"{label}: {doc}"]
        for server in members:
            by_server[server] = list(found)
    out = []
    for server in sorted(placed):
        ip, port = server
        doc = docs.get(server)
        devices = placed[server]
        roles = {ref.kind for entries in devices.values() for ref, _ in entries}
        entry: dict[str, Any] = {
            "host": f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}",
            "roles": [r for r in ROLE_ORDER if r in roles],
            "ok": isinstance(doc, dict),
            "error": None if isinstance(doc, dict) else str(doc),
            "devices": [], "daemons": [],
            "problems": by_server.get(server, []),
        }
        if isinstance(doc, dict):
            entry["devices"] = _devices(doc, devices, counts)
            entry["daemons"] = [_daemon(name, st) for name, st in
                                sorted(doc.get("daemons", {}).items())]
            for d in entry["devices"]:
                if d["mounted"] is False and d["error"] == NOT_ON_HOST:
                    entry["problems"].append(f"{entry['host']}: device {d['name']} is in "
                                             f"the rings but not on the host")
        else:
            entry["devices"] = [_device(name, "object", None, placed_on, counts)
                                for name, placed_on in sorted(devices.items())]
        out.append(entry)
    problems = list(dict.fromkeys(p for e in out for p in e["problems"]))
    return out, problems


def _devices(doc: dict[str, Any], placed: dict[str, list[tuple[_RingRef, dict]]],
             counts: dict[str, dict[int, int]]) -> list[dict[str, Any]]:
    """The host's devices joined with the rings' devices of this server by name. A name
    that is both an object and a DB device (meta_devices: DBs live apart) gets the object
    rings' partitions on the first and the container and account rings' on the second."""
    objs = doc.get("devices") or {}
    meta = doc.get("meta_devices") or {}
    out = []
    for name, usage in sorted(objs.items()):
        rings = [(r, d) for r, d in placed.get(name, [])
                 if r.kind == "object" or name not in meta]
        out.append(_device(name, "object", usage, rings, counts))
    for name, usage in sorted(meta.items()):
        rings = [(r, d) for r, d in placed.get(name, []) if r.kind != "object"]
        out.append(_device(name, "meta", usage, rings, counts))
    for name in sorted(set(placed) - set(objs) - set(meta)):
        out.append(_device(name, "object", {"mounted": False, "error": NOT_ON_HOST},
                           placed[name], counts))
    return out


def _device(name: str, kind: str, usage: dict[str, Any] | None,
            placed: list[tuple[_RingRef, dict]],
            counts: dict[str, dict[int, int]]) -> dict[str, Any]:
    """One device; `usage` None: the server did not answer (what only the ring says).
    A ring whose assignments were not counted in time gives None partitions."""
    u = usage or {}

    def known(key: str) -> Any:
        return u.get(key) if usage is not None else None

    quarantined = u.get("quarantined")
    return {
        "name": name, "kind": kind,
        "mounted": bool(u.get("mounted", True)) if usage is not None else None,
        "total": known("total"), "used": known("used"), "free": known("free"),
        # One device's assignments may come from several rings (policies, DB rings).
        "partitions": {ref.name: counts[ref.name].get(dev["id"], 0)
                       if ref.name in counts else None for ref, dev in placed},
        "weight": float(placed[0][1].get("weight") or 0.0) if placed else None,
        "async_pending": int(u.get("async_pending", 0)) if usage is not None else None,
        "quarantined": sum(quarantined.values()) if isinstance(quarantined, dict)
        else (0 if usage is not None else None),
        "error": u.get("error"),
    }


def _daemon(name: str, st: dict[str, Any]) -> dict[str, Any]:
    last = st.get("last_pass") or {}
    counters = {k: v for k, v in last.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
                and k not in ("start", "duration", "pid", "running_since")}
    progress = last.get("progress")
    if not isinstance(progress, str):
        # Status files say how far a pass got only in its counters (common/runtime/daemon.py
        # writes them at the end of a pass): the last pass's, in its own words.
        progress = " ".join(f"{k}={v}" for k, v in counters.items()) or None
    return {"name": name, "configured": bool(st.get("configured")),
            "alive": bool(st.get("alive")), "running_for": st.get("running_for"),
            "last_pass_age": st.get("last_pass_age"), "last_duration": last.get("duration"),
            "failures": int(last.get("failures") or 0), "progress": progress,
            "counters": counters}


# ---- the proxy's own metrics ---------------------------------------------------------------

def _proxy_metrics() -> dict[str, Any]:
    """Every worker's request counts summed (blocking: reads the multiprocess files)."""
    if not metrics.enabled():
        return _metrics_doc({}, False)
    return _metrics_doc(metrics_summary.parse(metrics.exposition().decode()), True)


def _metrics_doc(samples: metrics_summary.Samples, enabled: bool) -> dict[str, Any]:
    methods = metrics_summary.by_method(samples)
    buckets: dict[float, float] = {}
    for m in methods.values():
        for bound, n in m.buckets.items():
            buckets[bound] = buckets.get(bound, 0.0) + n
    nin, nout = metrics_summary.bytes_in_out(samples)
    return {
        "enabled": enabled,
        "requests": {name: int(m.requests) for name, m in sorted(methods.items())
                     if m.counted},
        "errors": {"4xx": int(sum(m.errors_4xx for m in methods.values())),
                   "5xx": int(sum(m.errors_5xx for m in methods.values()))},
        "latency_ms": {"p50": _ms(metrics_summary.quantile(list(buckets.items()), 0.5)),
                       "p99": _ms(metrics_summary.quantile(list(buckets.items()), 0.99))},
        "bytes_in": int(nin), "bytes_out": int(nout),
        "error": None,
    }


def _ms(seconds: float | None) -> float | None:
    # JSON has no infinity: past the last finite bucket reads as unknown.
    if seconds is None or seconds == float("inf"):
        return None
    return round(seconds * 1000.0, 3)
