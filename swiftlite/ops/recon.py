"""`swiftlite status --cluster`: ask every storage server in the rings how it is, flag trouble.

Each distinct (ip, port) of the object, container and account rings is asked `GET /recon`
(signed; see common/observe/recon.py) at once, with a timeout. The answers are shown per host and
checked against the rules of common/clients/recon_client.py (ring md5s against the rings here,
--full-percent, default 90, and --pending-limit, default 1000); any PROBLEM makes the exit
status 1, and so does a server that does not answer (down, hung, or refusing our
signature). The asking and the rules are shared with the console's operator page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from swiftlite.common import signing
from swiftlite.common.clients.recon_client import all_devices, ask_all, hosts, problems_of
from swiftlite.common.config import Section, load_config
from swiftlite.common.observe import recon


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


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}G"


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
            problems += problems_of(label, doc, local_md5, args.full_percent,
                                    args.pending_limit)
        else:
            problems.append(f"{label}: {doc}")
    if args.json:
        print(json.dumps({"servers": {f"{ip}:{port}": doc for (ip, port), doc in
                                      sorted(results.items())},
                          "problems": problems}, indent=2))
    else:
        print(render(results, kinds, problems))
    return 1 if problems else 0
