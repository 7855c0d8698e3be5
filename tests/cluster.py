"""A real all-in-one cluster (`swiftlite up`) for integration and fault tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.helpers import healthy, wait_for


@dataclass
class Cluster:
    root: str
    proc: subprocess.Popen
    info: dict[str, Any] = field(default_factory=dict)
    user: str = "test:tester"
    key: str = "testing"
    extra: list[subprocess.Popen] = field(default_factory=list)

    @property
    def auth_url(self) -> str:
        return self.info["proxy"]["auth_url"]

    @property
    def proxy_url(self) -> str:
        return self.info["proxy"]["url"]

    @property
    def etc_dir(self) -> str:
        return self.info["etc_dir"]

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return self.info["nodes"]

    def connection(self, user: str | None = None, key: str | None = None):
        import swiftclient

        return swiftclient.Connection(self.auth_url, user or self.user, key or self.key,
                                      retries=0, timeout=30)

    def servers(self, index: int, roles: Iterable[str] | None = None) -> dict[str, Any]:
        """role -> server entry (port, pid, cmd) of one node, all roles or those named."""
        servers = self.nodes[index]["servers"]
        return {r: s for r, s in servers.items() if roles is None or r in roles}

    def kill_node(self, index: int, sig: int = signal.SIGKILL,
                  roles: Iterable[str] | None = None) -> None:
        """Kill every server of one node (0-based), or those of `roles`, as a crash would."""
        node = self.nodes[index]
        for s in self.servers(index, roles).values():
            try:
                os.killpg(s["pid"], sig)
            except ProcessLookupError:
                pass
        for s in self.servers(index, roles).values():
            wait_for(lambda s=s: not healthy(s["port"], node["ip"]), 10,
                     what=f"{node['name']} port {s['port']} to close")

    def start_node(self, index: int, env: dict[str, str] | None = None,
                   roles: Iterable[str] | None = None) -> None:
        """Start a node's servers (or those of `roles`), with `env` added to the environment
        (fault injection: e.g. durability.FAIL_ENV)."""
        node = self.nodes[index]
        for role, s in self.servers(index, roles).items():
            log = open(os.path.join(self.root, "logs", f"{node['name']}-{role}.log"), "ab")
            p = subprocess.Popen(s["cmd"], stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True,
                                 env={**os.environ, **env} if env else None)
            log.close()
            s["pid"] = p.pid
            self.extra.append(p)
        for s in self.servers(index, roles).values():
            wait_for(lambda s=s: healthy(s["port"], node["ip"]), 30,
                     what=f"{node['name']} port {s['port']} to serve")

    def run_daemon(self, index: int, daemon: str, timeout: float = 120) -> None:
        """One pass of a background daemon on one node (`swiftlite daemon NAME --once`)."""
        node = self.nodes[index]
        subprocess.run([sys.executable, "-m", "swiftlite.cli", "daemon", daemon, "-c",
                        node["conf"], "--once"], check=True, timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        for p in self.extra:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def start_cluster(root: str, nodes: int = 1, devices: int = 4, replicas: int = 3,
                  part_power: int = 8, workers: int = 1, daemons: bool = False,
                  timeout: float = 60, meta_devices: int = 0,
                  extra_args: Iterable[str] = ()) -> Cluster:
    os.makedirs(root, exist_ok=True)
    cmd = [sys.executable, "-m", "swiftlite.cli", "up", "--root", root, "--port", "0",
           "--nodes", str(nodes), "--devices", str(devices), "--replicas", str(replicas),
           "--part-power", str(part_power), "--workers", str(workers)]
    if meta_devices:
        cmd += ["--meta-devices", str(meta_devices)]
    if not daemons:
        cmd.append("--no-daemons")
    cmd.extend(extra_args)
    out = open(os.path.join(root, "up.log"), "ab")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    path = os.path.join(root, "cluster.json")
    deadline = time.monotonic() + timeout

    def ready() -> bool:
        if proc.poll() is not None:
            with open(os.path.join(root, "up.log"), errors="replace") as f:
                raise RuntimeError(f"swiftlite up exited {proc.returncode}:\n{f.read()[-3000:]}")
        return os.path.exists(path)

    wait_for(ready, max(1.0, deadline - time.monotonic()), what="cluster.json")
    with open(path) as f:
        info = json.load(f)
    return Cluster(root, proc, info)


def swift_api(cluster: Cluster):
    """`call(method, path="", headers=None, **kw)`: a requests call into test:tester's account
    of `cluster` with its token (`call.account` names the account)."""
    import requests

    r = requests.get(cluster.auth_url, headers={"X-Auth-User": "test:tester",
                                                "X-Auth-Key": "testing"})
    assert r.status_code == 200
    url, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]

    def call(method: str, path: str = "", headers: dict | None = None, **kw):
        return requests.request(method, url + path, headers={"X-Auth-Token": token,
                                                             **(headers or {})}, **kw)
    call.account = url.rsplit("/", 1)[1]  # type: ignore[attr-defined]
    call.url = url  # type: ignore[attr-defined]
    call.token = token  # type: ignore[attr-defined]
    return call
