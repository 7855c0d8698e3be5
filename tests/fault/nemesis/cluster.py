"""The cluster a nemesis run works on: a `swiftlite up` cluster (tests/cluster.py) plus what
the harness needs around it: the environment each server runs with (fault injection), where
things are on disk, one daemon pass per node, and a way back to a healthy cluster."""

from __future__ import annotations

import configparser
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from swiftlite.common import hashing
from swiftlite.common.async_pending import ASYNC_DIR, iter_updates
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.replication_server import hash_db_file
from swiftlite.obj.engine import fileformat
from swiftlite.ring import Ring
from tests import backend_signing
from tests.cluster import Cluster, start_cluster
from tests.helpers import healthy, wait_for

backend_signing.install()  # this process talks to storage servers too (idempotent)

ROLES = ("object", "container", "account")
# The daemons that make replicas converge, in the order one round runs them on a node.
DAEMONS = ("object-replicator", "object-updater", "container-replicator")
# One process per node runs every round's passes (`swiftlite daemon NAME --once` each, as
# the CLI would), one round per line on stdin naming the daemons: a pass takes ~0.1 s,
# starting Python and importing swiftlite ~0.7 s of CPU.
_DAEMON_RUNNER = """
import sys
from swiftlite.cli import main
for line in sys.stdin:
    rc = max(main(["daemon", d, "-c", sys.argv[1], "--once"]) for d in line.split())
    print("round done", rc, flush=True)
"""
# The proxy gives up on a hung node after node_timeout (default 10 s): 3 s keeps a SIGSTOP
# run short. It skips a failing node for error_suppression_interval (default 60 s): 2 s lets
# a healed node (stale, or just emptied of a fault) serve again within the run, so clients
# meet it before the replicators have repaired it.
PROXY_SETTINGS = {"node_timeout": "3", "error_suppression_interval": "2"}


@contextmanager
def cluster_hashing(prefix: str, suffix: str) -> Iterator[None]:
    """hash_path (and ring lookups) with the cluster's affixes, restored afterwards: the
    affixes are process-wide, and other tests in this process use their own."""
    old = (hashing._PREFIX.decode(), hashing._SUFFIX.decode())
    hashing.set_hash_path_affixes(prefix, suffix)
    try:
        yield
    finally:
        hashing.set_hash_path_affixes(*old)


@dataclass(frozen=True)
class Where:
    """Where one object lives: partition, hash, primary and handoff device paths."""
    part: int
    hexhash: str
    primaries: tuple[str, ...]
    handoffs: tuple[str, ...]


class NemesisCluster:
    """A cluster of `nodes` storage nodes (every server one process) for nemesis runs."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(os.path.join(c.etc_dir, "swiftlite.conf"))
        self.affixes = (parser.get("hash", "hash_path_prefix"),
                        parser.get("hash", "hash_path_suffix"))
        self.object_ring = Ring(os.path.join(c.etc_dir, "object.ring.gz"))
        self.container_ring = Ring(os.path.join(c.etc_dir, "container.ring.gz"))
        self.node_of_port = {s["port"]: i for i, n in enumerate(c.nodes)
                             for s in n["servers"].values()}
        # (node, role) -> extra environment that server runs with; node -> its daemons'.
        self.env: dict[tuple[int, str], dict[str, str]] = {}
        self.daemon_env: dict[int, dict[str, str]] = {}
        self._where: dict[tuple[str, str, str], Where] = {}
        self._runners: dict[int, tuple[subprocess.Popen, dict[str, str]]] = {}
        self.node_timeout = float(PROXY_SETTINGS["node_timeout"])
        self._tune_proxy()
        self.proxy_fresh = True  # no run has used it since it started

    @classmethod
    def start(cls, root: str, nodes: int = 3, devices: int = 2,
              part_power: int = 5) -> NemesisCluster:
        c = start_cluster(root, nodes=nodes, devices=devices, replicas=3,
                          part_power=part_power, workers=1)
        try:
            return cls(c)
        except BaseException:
            c.stop()
            raise

    def stop(self) -> None:
        for i in list(self._runners):
            self._close_runner(i)
        for i in range(len(self.nodes)):  # a stopped process would not see SIGTERM
            self.signal_node(i, signal.SIGCONT)
        self.c.stop()

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return self.c.nodes

    def log_path(self, name: str) -> str:
        return os.path.join(self.c.root, "logs", f"{name}.log")

    # -- servers -------------------------------------------------------------------------
    def _tune_proxy(self) -> None:
        path = os.path.join(self.c.etc_dir, "proxy.conf")
        parser = configparser.ConfigParser(interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
        parser.read(path)
        parser["proxy-server"].update(PROXY_SETTINGS)
        with open(path, "w") as f:
            parser.write(f)
        self.restart_proxy()

    def restart_proxy(self) -> None:
        proxy = self.c.info["proxy"]
        port = proxy["port"]
        self._signal(proxy["pid"], signal.SIGTERM)
        wait_for(lambda: self._gone(proxy["pid"]), 30, what="the proxy to exit")
        with open(self.log_path("proxy"), "ab") as log:
            p = subprocess.Popen(proxy["cmd"], stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        proxy["pid"] = p.pid
        self.c.extra.append(p)
        wait_for(lambda: healthy(port), 30, what="the proxy to serve")

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass

    def signal_node(self, index: int, sig: int) -> None:
        """Send `sig` (SIGSTOP, SIGCONT) to every server of a node; no waiting."""
        for s in self.c.servers(index).values():
            self._signal(s["pid"], sig)

    def stopped(self, index: int) -> bool:
        """Every server of the node is stopped (state T in /proc)."""
        def state(pid: int) -> str:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        return all(state(s["pid"]) == "T" for s in self.c.servers(index).values())

    def _gone(self, pid: int) -> bool:
        for p in self.c.extra:  # our own child: reap it, or it stays a zombie
            if p.pid == pid:
                return p.poll() is not None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    def restart(self, index: int, roles: tuple[str, ...] = ROLES,
                env: dict[str, str] | None = None) -> None:
        """Stop servers of a node (SIGTERM, then SIGKILL if they linger) and start them again
        with `env` (None: a clean one). Waits for the old processes to exit: a closed port
        alone does not prove a busy server gone."""
        servers = self.c.servers(index, roles).values()
        for s in servers:
            self._signal(s["pid"], signal.SIGTERM)
        try:
            wait_for(lambda: all(self._gone(s["pid"]) for s in servers), 30,
                     what="servers to exit on SIGTERM")
        except AssertionError:
            for s in servers:
                self._signal(s["pid"], signal.SIGKILL)
            wait_for(lambda: all(self._gone(s["pid"]) for s in servers), 10,
                     what="servers to exit on SIGKILL")
        for role in roles:
            if env:
                self.env[(index, role)] = dict(env)
            else:
                self.env.pop((index, role), None)
        self.c.start_node(index, env, roles)

    def ensure_healthy(self) -> None:
        """Every server up and running clean (no injected environment), and a proxy whose
        error limiter holds nothing from an earlier run: a run starts from a healthy cluster
        whatever the previous one left behind."""
        for i, node in enumerate(self.nodes):
            self.signal_node(i, signal.SIGCONT)
            for role, s in node["servers"].items():
                if (i, role) in self.env or not healthy(s["port"], node["ip"]):
                    self.restart(i, (role,))
            self.daemon_env.pop(i, None)
        if not self.proxy_fresh:
            self.restart_proxy()
        self.proxy_fresh = False
        self.c.extra = [p for p in self.c.extra if p.poll() is None]  # reap the dead

    # -- daemons -------------------------------------------------------------------------
    def _runner(self, index: int) -> subprocess.Popen:
        """The node's daemon runner, started anew when the node's daemon env changed."""
        env = self.daemon_env.get(index, {})
        if index in self._runners:
            p, started_with = self._runners[index]
            if started_with == env and p.poll() is None:
                return p
            self._close_runner(index)
        node = self.nodes[index]
        with open(self.log_path(f"{node['name']}-nemesis-daemons"), "ab") as log:
            p = subprocess.Popen([sys.executable, "-c", _DAEMON_RUNNER, node["conf"]],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                 env={**os.environ, **env}, start_new_session=True, text=True)
        self._runners[index] = (p, dict(env))
        return p

    def _close_runner(self, index: int) -> None:
        p, _ = self._runners.pop(index)
        self._signal(p.pid, signal.SIGKILL)
        p.wait()
        for f in (p.stdin, p.stdout):
            if f is not None:
                f.close()

    def daemon_round(self, daemons: tuple[str, ...] = DAEMONS,
                     timeout: float = 120.0) -> list[str]:
        """One pass of each of `daemons` on every node (nodes in parallel); the failures."""
        def one(index: int) -> str:
            p = self._runner(index)
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(" ".join(daemons) + "\n")
            p.stdin.flush()
            return p.stdout.readline().strip()

        failures = []
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            futures = [pool.submit(one, i) for i in range(len(self.nodes))]
            deadline = time.monotonic() + timeout
            for i, fut in enumerate(futures):
                name = self.nodes[i]["name"]
                try:
                    answer = fut.result(max(0.1, deadline - time.monotonic()))
                except FutureTimeout:
                    self._close_runner(i)  # its readline then ends
                    failures.append(f"{name}: daemon passes hung for {timeout:.0f}s")
                    continue
                if answer != "round done 0":
                    failures.append(f"{name}: a daemon pass failed ({answer or 'runner died'}),"
                                    f" see {self.log_path(name + '-nemesis-daemons')}")
        return failures

    # -- placement -----------------------------------------------------------------------
    def dev_path(self, dev: dict[str, Any]) -> str:
        node = self.nodes[self.node_of_port[dev["port"]]]
        return os.path.join(node["devices_root"], dev["device"])

    def where(self, account: str, container: str, name: str) -> Where:
        key = (account, container, name)
        w = self._where.get(key)
        if w is None:
            with cluster_hashing(*self.affixes):
                part = self.object_ring.get_part(account, container, name)
                hexhash = hashing.hash_path(account, container, name)
            primaries = self.object_ring.get_part_nodes(part)
            ids = {d["id"] for d in primaries}
            w = Where(part, hexhash, tuple(self.dev_path(d) for d in primaries),
                      tuple(self.dev_path(d) for d in self.object_ring.devs
                            if d is not None and d["id"] not in ids))
            self._where[key] = w
        return w

    @staticmethod
    def files(dev_path: str, w: Where) -> list[str]:
        try:
            return os.listdir(fileformat.hash_dir(dev_path, w.part, w.hexhash))
        except FileNotFoundError:
            return []

    def state(self, dev_path: str, w: Where) -> str:
        """The object's current file on one device ("<ts>.data", "<ts>.ts" or "")."""
        return fileformat.state_of(self.files(dev_path, w))

    def container_replicas(self, account: str, container: str) -> list[dict[str, Any]]:
        """Each primary container replica: node index, device path, URL, DB file."""
        with cluster_hashing(*self.affixes):
            cpart, devs = self.container_ring.get_nodes(account, container)
            hexhash = hashing.hash_path(account, container)
        return [{"node": self.node_of_port[d["port"]], "dev_path": self.dev_path(d),
                 "url": f"http://{d['ip']}:{d['port']}/{d['device']}/{cpart}/"
                        f"{quote(account)}/{quote(container)}",
                 "db": hash_db_file(self.dev_path(d), "container", cpart, hexhash),
                 "hash": hexhash}
                for d in devs]

    @staticmethod
    def replica_listing(url: str) -> tuple[int, list[dict[str, Any]], int]:
        """(status, rows, X-Container-Object-Count) straight from one container server."""
        try:
            with urllib.request.urlopen(url + "?format=json", timeout=10) as r:
                body = r.read()
                rows = json.loads(body) if body.strip() else []
                return r.status, rows, int(r.headers.get("X-Container-Object-Count", -1))
        except urllib.error.HTTPError as exc:
            return exc.code, [], -1
        except OSError:
            return 0, [], -1

    def pending_records(self, prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
        """Saved container updates (async_pending records) for paths under `prefixes`."""
        out = []
        for node in self.nodes:
            for dev in os.listdir(node["devices_root"]):
                dev_path = os.path.join(node["devices_root"], dev)
                if os.path.isdir(os.path.join(dev_path, ASYNC_DIR)):
                    out += [rec for _, rec in iter_updates(dev_path)
                            if rec["path"].startswith(prefixes)]
        return out

    def pending_updates(self, prefixes: tuple[str, ...]) -> int:
        return len(self.pending_records(prefixes))

    def container_rows(self, target: dict[str, Any], account: str,
                       container: str) -> dict[str, str]:
        """name -> created_at of every row (deleted ones too) of the container replica an
        update record targets, read from its DB file."""
        node = self.nodes[self.node_of_port[target["port"]]]
        with cluster_hashing(*self.affixes):
            hexhash = hashing.hash_path(account, container)
        path = hash_db_file(os.path.join(node["devices_root"], target["device"]), "container",
                            target["partition"], hexhash)
        broker = ContainerBroker(path)
        try:
            return {r["name"]: r["created_at"] for r in broker.get_items_since(-1, 1 << 30)}
        finally:
            broker.close()
