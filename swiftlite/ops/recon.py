"""`swiftlite status --cluster`: ask every storage server in the rings how it is, flag trouble.

Each distinct (ip, port) of the object, container and account rings is asked `GET /recon`
(signed; see common/recon.py) at once, with a timeout. The answers are shown per host and
checked against these rules; any PROBLEM makes the exit status 1:

- a server that does not answer (down, hung, or refusing our signature);
- a ring file whose md5 differs from the one here (the host missed a ring push);
- a device (object or DB: `meta_devices`) unmounted or unreadable, or fuller than
  --full-percent (default 90);
- a daemon configured on the host that never started a pass, that is dead (the pid in its
  status file is gone and the file was not updated within 2 intervals), or whose last pass
  ended more than 3 intervals plus a minute ago with no pass running (for a
  replicator: replication lag), or whose last pass had failures;
- quarantined items (objects, DBs, updates found corrupt: worth a look, replicas were
  restored from peers) and async_pendings above --pending-limit (default 1000; container
  updates waiting for the updater, usually a container server down).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from swiftlite.common import recon, signing
from swiftlite.common.client import make_session
from swiftlite.common.config import Section, load_config


class SetupError(Exception):
    pass


def _conf(args: argparse.Namespace) -> Section:
    if args.config:
        path = args.config
    else:
        # The all-in-one's plan names its proxy config; a root without one uses the default.
        root = os.path.abspath(args.root)
        path = os.path.join(root, "etc", "proxy.conf")
        try:
            with open(os.path.join(root, "etc", "plan.json")) as f:
                path = json.load(f).get("proxy_conf") or path
        except (OSError, ValueError):
            pass
    try:
        return load_config(path, "DEFAULT")
    except OSError as exc:
        raise SetupError(str(exc)) from None


def endpoints(swift_dir: str) -> dict[tuple[str, int], set[str]]:
    """(ip, port) -> the ring kinds that place devices on it."""
    from swiftlite.ring import Ring

    out: dict[tuple[str, int], set[str]] = {}
    for kind in recon.RING_KINDS:
        path = os.path.join(swift_dir, f"{kind}.ring.gz")
        if not os.path.exists(path):
            continue
        for dev in Ring.load(path, reload_interval=1e9).devs:
            if dev is not None:
                out.setdefault((dev["ip"], dev["port"]), set()).add(kind)
    return out


async def ask_all(targets: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], Any]:
    """(ip, port) -> its /recon document, or an error string."""
    async with make_session(conn_timeout=timeout, node_timeout=timeout) as session:
        async def one(ip: str, port: int) -> Any:
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

        answers = await asyncio.gather(*(one(ip, port) for ip, port in targets))
    return dict(zip(targets, answers, strict=True))


def problems_of(where: str, doc: dict[str, Any], local_md5: dict[str, str | None],
                args: argparse.Namespace) -> list[str]:
    out = []
    for kind, md5 in doc.get("rings", {}).items():
        if local_md5.get(kind) and md5 != local_md5[kind]:
            out.append(f"{where}: {kind} ring differs from this one "
                       f"({(md5 or 'missing')[:8]} vs {local_md5[kind][:8]})")
    for dev, d in all_devices(doc):
        if not d.get("mounted", True) or "error" in d:
            out.append(f"{where}: device {dev} unmounted or unreadable {d.get('error', '')}")
        elif d.get("total") and 100.0 * d["used"] / d["total"] > args.full_percent:
            out.append(f"{where}: device {dev} {100.0 * d['used'] / d['total']:.0f}% full")
        q = sum(d.get("quarantined", {}).values())
        if q:
            out.append(f"{where}: device {dev} has {q} quarantined items "
                       f"{d['quarantined']}")
        if d.get("async_pending", 0) > args.pending_limit:
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


def all_devices(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, usage) of a host's object devices, then of its DB devices (`meta_devices`,
    named meta/<dev>: the names may repeat)."""
    return [*doc.get("devices", {}).items(),
            *((f"meta/{dev}", d) for dev, d in doc.get("meta_devices", {}).items())]


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}G"


def hosts(results: dict[tuple[str, int], Any]) -> list[tuple[str, list[tuple[str, int]], Any]]:
    """(label, servers, doc) per host: servers answering with the same devices and status
    dirs are one host (its object, container and account servers); each server that did not
    answer is its own entry with its error as doc."""
    groups: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
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


def render(results: dict[tuple[str, int], Any], kinds: dict[tuple[str, int], set[str]],
           problems: list[str]) -> str:
    lines = []
    for label, servers, doc in hosts(results):
        roles = " ".join(f"{','.join(sorted(kinds[s]))}:{s[1]}" for s in servers)
        if not isinstance(doc, dict):
            lines.append(f"{label} [{roles}]  DOWN: {doc}")
            continue
        lines.append(f"{label} [{roles}]  up  rings "
                     + " ".join(f"{k}={(v or 'missing')[:8]}" for k, v in doc["rings"].items()))
        lag = doc.get("replication_lag") or {}
        if lag:
            lines.append("    replication lag: " + " ".join(
                f"{name.removesuffix('-replicator')}="
                + ("no pass yet" if v is None else f"{v:.0f}s")
                for name, v in sorted(lag.items())))
        for dev, d in all_devices(doc):
            use = (f"{_gib(d['used'])}/{_gib(d['total'])}"
                   f" ({100.0 * d['used'] / d['total']:.0f}%)") if d.get("total") else "?"
            lines.append(f"    {dev}: {use} async_pending={d.get('async_pending', 0)} "
                         f"quarantined={sum(d.get('quarantined', {}).values())}")
        for name, st in doc["daemons"].items():
            last = st.get("last_pass") or {}
            if "start" not in last:
                state = "alive" if st.get("alive") else "not started"
                lines.append(f"    {name}: {state}, no pass completed yet")
                continue
            state = "alive" if st.get("alive") else "DEAD"
            if st.get("running_for") is not None:
                state += f", pass running {st['running_for']:.0f}s"
            extra = " ".join(f"{k}={v}" for k, v in last.items()
                             if k not in ("daemon", "start", "pid", "running_since"))
            lines.append(f"    {name}: {state}, last pass ended "
                         f"{st.get('last_pass_age') or 0:.0f}s ago: {extra}")
    lines.append("")
    if problems:
        lines.append(f"PROBLEMS ({len(problems)}):")
        lines.extend(f"  {p}" for p in problems)
    else:
        lines.append("no problems found")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        conf = _conf(args)
        signing.configure(conf)
    except SetupError as exc:
        print(f"swiftlite status: {exc}", file=sys.stderr)
        return 2
    swift_dir = conf.get_str("swift_dir", "/etc/swiftlite")
    kinds = endpoints(swift_dir)
    if not kinds:
        print(f"swiftlite status: no ring in {swift_dir}", file=sys.stderr)
        return 2
    local_md5 = recon.ring_md5s(swift_dir)
    results = asyncio.run(ask_all(sorted(kinds), args.timeout))
    problems: list[str] = []
    for label, _, doc in hosts(results):
        if isinstance(doc, dict):
            problems += problems_of(label, doc, local_md5, args)
        else:
            problems.append(f"{label}: {doc}")
    if args.json:
        print(json.dumps({"servers": {f"{ip}:{port}": doc for (ip, port), doc in
                                      sorted(results.items())},
                          "problems": problems}, indent=2))
    else:
        print(render(results, kinds, problems))
    return 1 if problems else 0
