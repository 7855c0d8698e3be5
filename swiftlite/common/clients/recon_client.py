"""Asking storage servers how they are (`GET /recon`, see common/observe/recon.py) and judging the
answers: what `swiftlite status --cluster` (ops/recon.py) and the console's operator page
(proxy/console/cluster.py) share. Nothing here knows the rings: callers say which servers
to ask and with which ring md5s to compare.

The problem rules (`problems_of`), flagged per host:

- a ring file whose md5 differs from the caller's (the host missed a ring push);
- a device (object or DB: `meta_devices`) unmounted or unreadable, or fuller than
  `full_percent`;
- a daemon configured on the host that never started a pass, that is dead (the pid in its
  status file is gone and the file was not updated within 2 intervals), or whose last pass
  ended more than 3 intervals plus a minute ago with no pass running (for a replicator:
  replication lag), or whose last pass had failures;
- quarantined items (objects, DBs, updates found corrupt: worth a look, replicas were
  restored from peers) and async_pendings above `pending_limit` (container updates waiting
  for the updater, usually a container server down).

A server that does not answer is the caller's problem to word: it has no document.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from swiftlite.common.clients.client import make_session

Server = tuple[str, int]
FULL_PERCENT = 90.0
PENDING_LIMIT = 1000


async def ask_one(session: aiohttp.ClientSession, ip: str, port: int) -> Any:
    """One server's /recon document, or an error string (never raises but on cancel)."""
    host = f"[{ip}]" if ":" in ip else ip
    try:
        async with session.get(f"http://{host}:{port}/recon") as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            return await resp.json()
    except (TimeoutError, OSError, ValueError) as exc:
        return f"unreachable ({type(exc).__name__})"
    except Exception as exc:  # noqa: BLE001 - an aiohttp error of any kind
        return f"unreachable ({type(exc).__name__}: {exc})"


async def ask_all(targets: list[Server], timeout: float) -> dict[Server, Any]:
    """(ip, port) -> its /recon document, or an error string. Signed by the process-wide
    signer (common/signing.py): storage servers refuse unsigned requests."""
    async with make_session(conn_timeout=timeout, node_timeout=timeout) as session:
        answers = await asyncio.gather(*(ask_one(session, ip, port) for ip, port in targets))
    return dict(zip(targets, answers, strict=True))


def all_devices(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, usage) of a host's object devices, then of its DB devices (`meta_devices`,
    named meta/<dev>: the names may repeat)."""
    return [*doc.get("devices", {}).items(),
            *((f"meta/{dev}", d) for dev, d in doc.get("meta_devices", {}).items())]


def problems_of(where: str, doc: dict[str, Any], local_md5: dict[str, str | None],
                full_percent: float = FULL_PERCENT,
                pending_limit: int = PENDING_LIMIT) -> list[str]:
    """What is wrong with one host, per the rules in the module doc."""
    out = []
    for kind, md5 in doc.get("rings", {}).items():
        if local_md5.get(kind) and md5 != local_md5[kind]:
            out.append(f"{where}: {kind} ring differs from this one "
                       f"({(md5 or 'missing')[:8]} vs {local_md5[kind][:8]})")
    for dev, d in all_devices(doc):
        if not d.get("mounted", True) or "error" in d:
            out.append(f"{where}: device {dev} unmounted or unreadable {d.get('error', '')}")
        elif d.get("total") and 100.0 * d["used"] / d["total"] > full_percent:
            out.append(f"{where}: device {dev} {100.0 * d['used'] / d['total']:.0f}% full")
        q = sum(d.get("quarantined", {}).values())
        if q:
            out.append(f"{where}: device {dev} has {q} quarantined items "
                       f"{d['quarantined']}")
        if d.get("async_pending", 0) > pending_limit:
            out.append(f"{where}: device {dev} has {d['async_pending']} async_pendings")
    for name, st in doc.get("daemons", {}).items():
        if not st.get("configured"):
            continue
        late_after = 3 * st.get("interval", 30) + 60
        last = st.get("last_pass")
        if last is None:
            out.append(f"{where}: {name} has never started a pass (not running?)")
            continue
        if not st.get("alive"):
            out.append(f"{where}: {name} is not running (pid {last.get('pid')} gone, "
                       f"status not updated for {st.get('status_age') or 0:.0f}s)")
        elif st.get("running_for") is None and (st.get("last_pass_age") or 0) > late_after:
            age = st["last_pass_age"]
            out.append(f"{where}: {name} last pass ended {age:.0f}s ago "
                       f"(interval {st.get('interval')}s)")
        if last.get("failures"):
            out.append(f"{where}: {name} last pass had {last['failures']} failures")
    return out


def hosts(results: dict[Server, Any]) -> list[tuple[str, list[Server], Any]]:
    """(label, servers, doc) per host: servers answering with the same devices and status
    dirs are one host (its object, container and account servers), so its devices and
    daemons are judged once; each server that did not answer is its own entry with its
    error as doc."""
    groups: dict[tuple[str, str, str], list[Server]] = {}
    out = []
    for (ip, port), doc in sorted(results.items()):
        if isinstance(doc, dict):
            groups.setdefault((ip, doc.get("devices_root", ""), doc.get("status_dir", "")),
                              []).append((ip, port))
        else:
            out.append((f"{ip}:{port}", [(ip, port)], doc))
    for (ip, root, _), servers in groups.items():
        docs = [results[s] for s in servers]
        # The object server's view first: it knows the object daemons' devices best.
        doc = next((d for d in docs if d.get("role") == "object"), docs[0])
        out.append((f"{ip} {root}", servers, doc))
    return sorted(out)
