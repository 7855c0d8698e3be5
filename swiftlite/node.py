"""`swiftlite node -c CONF`: run every server and daemon one config file names, on one host.

A storage host's config has `[account-server]`, `[container-server]`, `[object-server]` and
daemon sections (`[object-replicator]`, ...); a proxy host's has `[proxy-server]`. Each named
role runs as its own child process (`swiftlite server ROLE` / `swiftlite daemon NAME`), so
an operator (or systemd, or a container) starts a host with one command. A child that dies
is restarted with a growing delay; one that refuses its configuration (a weak secret, a bad
value) stops the node instead, since a restart would fail the same way. SIGTERM stops every
child within `supervisor.STOP_GRACE` seconds (see swiftlite/common/runtime/supervisor.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from argparse import Namespace

from swiftlite.common.config import load_sections
from swiftlite.common.runtime.server import EX_CONFIG
from swiftlite.common.runtime.supervisor import spawn, terminate
from swiftlite.common.signing import SecretError
from swiftlite.roles import DAEMONS

SERVER_ROLES = ("account", "container", "object", "proxy")
# Exit statuses that mean "this configuration cannot run" (cli.main's SecretError is 2).
FATAL_EXITS = (2, EX_CONFIG)
MAX_BACKOFF = 30.0
STABLE_AFTER = 60.0  # a child up this long has its restart delay reset


def commands(conf_path: str, daemons: bool = True) -> dict[str, list[str]]:
    """name -> command line of every server and daemon the config names."""
    sections = load_sections(conf_path)
    py = [sys.executable, "-m", "swiftlite.cli"]
    cmds = {f"{role}-server": py + ["server", role, "-c", conf_path]
            for role in SERVER_ROLES if f"{role}-server" in sections}
    if daemons:
        cmds.update({name: py + ["daemon", name, "-c", conf_path]
                     for name, (_, _, section) in DAEMONS.items() if section in sections})
    return cmds


def run_node(args: Namespace) -> int:
    conf = os.path.abspath(args.config)
    try:
        cmds = commands(conf, daemons=not args.no_daemons)
    except FileNotFoundError as exc:
        print(f"swiftlite node: {exc}", file=sys.stderr)
        return 2
    except SecretError as exc:  # e.g. a sample config's [hash] placeholders
        print(f"swiftlite node: refusing to start ({conf}): {exc}", file=sys.stderr)
        return 1
    if not cmds:
        print(f"swiftlite node: {conf} names no server or daemon section", file=sys.stderr)
        return 2
    log_dir = args.log_dir
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)

    def start(name: str) -> subprocess.Popen:
        log = os.path.join(log_dir, f"{name}.log") if log_dir else None
        return spawn(cmds[name], log)

    procs = {name: start(name) for name in cmds}
    started = {name: time.monotonic() for name in cmds}
    backoff = {name: 1.0 for name in cmds}
    restart_at: dict[str, float] = {}
    stopping = False
    status = 0

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"swiftlite node: running {', '.join(cmds)} from {conf}", flush=True)
    while not stopping:
        now = time.monotonic()
        for name, proc in procs.items():
            if name in restart_at:
                if now >= restart_at[name]:
                    del restart_at[name]
                    procs[name] = start(name)
                    started[name] = now
                continue
            rc = proc.poll()
            if rc is None:
                continue
            if rc in FATAL_EXITS:
                print(f"swiftlite node: {name} refused its configuration (exit {rc}); "
                      "stopping", file=sys.stderr, flush=True)
                stopping, status = True, 1
                break
            if now - started[name] > STABLE_AFTER:
                backoff[name] = 1.0
            print(f"swiftlite node: {name} (pid {proc.pid}) exited with {rc}; restarting "
                  f"in {backoff[name]:.0f}s", file=sys.stderr, flush=True)
            restart_at[name] = now + backoff[name]
            backoff[name] = min(MAX_BACKOFF, backoff[name] * 2)
        time.sleep(0.2)
    killed = terminate(procs)
    if killed:
        print(f"swiftlite node: killed {', '.join(killed)}: still running after SIGTERM",
              file=sys.stderr, flush=True)
    return status
