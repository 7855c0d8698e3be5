"""A multi-host cluster on one machine: every host its own loopback address, same ports.

As on real hosts, each storage host has its own config, devices, status files and its own
copy of the rings (in its `swift_dir`); the operator's builder files live apart, are changed
with the `swiftlite-ring-builder` CLI and the rings they write are pushed to every host by
copying. Each host runs `swiftlite node -c host.conf` (its servers and daemons); the proxy
runs the same way on an address of its own.

Linux routes all of 127.0.0.0/8 to the loopback interface, so 127.0.0.2, 127.0.0.3, ... need
no setup: a server bound to 127.0.0.3 is a different host to the ring and to the proxy.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from tests.helpers import free_port, healthy, wait_for

PROXY_IP = "127.0.0.20"
ROLES = ("object", "container", "account")
KINDS = ROLES  # one ring per role, named for it
USERS = {"user_test_tester": "testing .admin"}


def host_ip(n: int) -> str:
    """Storage host n (1-based) lives on 127.0.0.<n+1>."""
    return f"127.0.0.{n + 1}"


def _bindable(ip: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


def same_ports(ips: list[str], count: int) -> list[int]:
    """`count` ports free on every address (each host listens on the same ports)."""
    ports: list[int] = []
    while len(ports) < count:
        p = free_port()
        if p not in ports and all(_bindable(ip, p) for ip in ips):
            ports.append(p)
    return ports


def _ini(sections: dict[str, dict[str, Any]]) -> str:
    out = []
    for name, items in sections.items():
        out += [f"[{name}]", *(f"{k} = {v}" for k, v in items.items()), ""]
    return "\n".join(out)


def children(pid: int) -> list[int]:
    """Direct children of a process (those `swiftlite node` supervises)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


@dataclass
class Host:
    n: int
    ip: str
    root: str
    conf: str
    devices: list[str]
    proc: subprocess.Popen | None = None

    @property
    def swift_dir(self) -> str:
        return os.path.join(self.root, "etc")

    @property
    def devices_root(self) -> str:
        return os.path.join(self.root, "srv")

    def pids(self) -> list[int]:
        """The host's processes: its `swiftlite node` supervisor and every child."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid, *children(self.proc.pid)]


@dataclass
class MultiHost:
    root: str
    replicas: int = 3
    part_power: int = 8
    devices: int = 2
    node_timeout: float = 2.0
    daemon_interval: float = 1.0
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    hash_conf: dict[str, str] = field(default_factory=lambda: {
        "hash_path_prefix": secrets.token_hex(8), "hash_path_suffix": secrets.token_hex(8)})
    hosts: dict[int, Host] = field(default_factory=dict)
    proxy: subprocess.Popen | None = None
    ports: dict[str, int] = field(default_factory=dict)
    # section -> options added to every storage host's config (a benchmark's settings)
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.builders = os.path.join(self.root, "builders")
        self.proxy_root = os.path.join(self.root, "proxy")
        os.makedirs(self.builders, exist_ok=True)
        os.makedirs(os.path.join(self.proxy_root, "etc"), exist_ok=True)
        # Room for 8 storage hosts; every one listens on the same three ports.
        ips = [host_ip(n) for n in range(1, 9)] + [PROXY_IP]
        obj, cont, acct, proxy = same_ports(ips, 4)
        self.ports = {"object": obj, "container": cont, "account": acct, "proxy": proxy}
        for kind in KINDS:
            self.ring_builder(kind, "create", str(self.part_power), str(self.replicas), "1")

    # ---- the operator's side: builders, rings, configs -------------------------------------

    def ring_builder(self, kind: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        """Run `swiftlite-ring-builder <kind>.builder ARGS` as an operator would."""
        exe = os.path.join(os.path.dirname(sys.executable), "swiftlite-ring-builder")
        r = subprocess.run([exe, os.path.join(self.builders, f"{kind}.builder"), *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode in ok, f"ring-builder {kind} {args}: {r.returncode} {r.stderr}"
        return r.stdout

    def rebalance(self) -> None:
        """Rebalance every ring, as an operator does after a change, once min_part_hours
        has passed (here: pretended, so a test need not wait an hour)."""
        for kind in KINDS:
            self.ring_builder(kind, "pretend_min_part_hours_passed")
            self.ring_builder(kind, "rebalance", ok=(0, 1))

    def push_rings(self) -> None:
        """Copy the ring files to every host and the proxy; a rename, so no server ever
        reads half a file."""
        for dest in [h.swift_dir for h in self.hosts.values()] + \
                [os.path.join(self.proxy_root, "etc")]:
            for kind in KINDS:
                src = os.path.join(self.builders, f"{kind}.ring.gz")
                tmp = os.path.join(dest, f".{kind}.ring.gz.tmp")
                shutil.copyfile(src, tmp)
                os.replace(tmp, os.path.join(dest, f"{kind}.ring.gz"))

    def ring_md5s(self) -> dict[str, str]:
        import hashlib

        return {kind: hashlib.md5(open(os.path.join(self.builders, f"{kind}.ring.gz"),
                                       "rb").read()).hexdigest() for kind in KINDS}

    def add_host(self, n: int, weight: float = 100.0) -> Host:
        """Prepare storage host n (config, empty devices) and add its devices to the
        builders; the caller rebalances and pushes."""
        ip = host_ip(n)
        root = os.path.join(self.root, f"host{n}")
        host = Host(n, ip, root, os.path.join(root, "etc", "host.conf"),
                    [f"d{d}" for d in range(1, self.devices + 1)])
        for d in host.devices:
            os.makedirs(os.path.join(host.devices_root, d), exist_ok=True)
        os.makedirs(host.swift_dir, exist_ok=True)
        interval = {"interval": self.daemon_interval}
        sections: dict[str, dict[str, Any]] = {
            "DEFAULT": {"devices": host.devices_root, "mount_check": "false",
                        "swift_dir": host.swift_dir, "bind_ip": ip, "log_level": "INFO",
                        "backend_secret": self.secret, "ring_reload_interval": 1,
                        "status_dir": os.path.join(root, "run")},
            "hash": self.hash_conf,
            "object-server": {"bind_port": self.ports["object"], "workers": 1},
            "container-server": {"bind_port": self.ports["container"], "workers": 1},
            "account-server": {"bind_port": self.ports["account"], "workers": 1},
            "object-replicator": interval, "container-replicator": interval,
            "account-replicator": interval, "object-updater": interval,
        }
        for name, options in self.extra.items():
            sections[name] = {**sections.get(name, {}), **options}
        with open(host.conf, "w") as f:
            f.write(_ini(sections))
        self.hosts[n] = host
        for kind in KINDS:
            self.ring_builder(kind, "add", *(
                a for d in host.devices
                for a in (f"r1z{n}-{ip}:{self.ports[kind]}/{d}", str(weight))))
        return host

    def write_proxy_conf(self) -> str:
        etc = os.path.join(self.proxy_root, "etc")
        path = os.path.join(etc, "proxy.conf")
        with open(path, "w") as f:
            f.write(_ini({
                "DEFAULT": {"swift_dir": etc, "log_level": "INFO",
                            "backend_secret": self.secret, "ring_reload_interval": 1},
                "hash": self.hash_conf,
                "proxy-server": {"bind_ip": PROXY_IP, "bind_port": self.ports["proxy"],
                                 "workers": 1, "auth_secret": secrets.token_hex(32),
                                 "conn_timeout": 0.5, "node_timeout": self.node_timeout,
                                 **USERS},
            }))
        return path

    # ---- processes -------------------------------------------------------------------------

    def _node(self, conf: str, log_dir: str) -> subprocess.Popen:
        os.makedirs(log_dir, exist_ok=True)
        out = open(os.path.join(log_dir, "node.log"), "ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "swiftlite.cli", "node", "-c", conf, "--log-dir",
                 log_dir], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            out.close()

    def start_host(self, n: int) -> None:
        host = self.hosts[n]
        host.proc = self._node(host.conf, os.path.join(host.root, "logs"))

    def wait_host(self, n: int, timeout: float = 60) -> None:
        host = self.hosts[n]
        for role in ROLES:
            wait_for(lambda r=role: healthy(self.ports[r], host.ip), timeout,
                     what=f"host{n} {role} server at {host.ip}")

    def start_proxy(self) -> None:
        self.proxy = self._node(self.write_proxy_conf(), os.path.join(self.proxy_root, "logs"))
        wait_for(lambda: healthy(self.ports["proxy"], PROXY_IP), 60, what="the proxy")

    def stop_host(self, n: int) -> None:
        host = self.hosts[n]
        if host.proc is not None and host.proc.poll() is None:
            host.proc.send_signal(signal.SIGTERM)
            host.proc.wait(timeout=30)

    def hang_host(self, n: int) -> list[int]:
        """SIGSTOP every process of a host: its sockets still accept connections (the
        kernel does that) but nothing answers, as with a wedged machine."""
        pids = self.hosts[n].pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    def resume_host(self, pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        procs = [h.proc for h in self.hosts.values() if h.proc is not None]
        if self.proxy is not None:
            procs.append(self.proxy)
        for h in self.hosts.values():  # a hung host must be woken to hear SIGTERM
            self.resume_host(h.pids())
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

    # ---- looking at placement --------------------------------------------------------------

    def ring(self, kind: str):
        """The operator's current ring of `kind` (what was last pushed)."""
        from swiftlite.ring import Ring

        return Ring.load(os.path.join(self.builders, f"{kind}.ring.gz"), reload_interval=1e9)

    def parts_on(self, n: int, kind: str = "object") -> dict[str, set[int]]:
        """device -> partitions of `kind` with data on host n's disks."""
        out: dict[str, set[int]] = {}
        host = self.hosts[n]
        for d in host.devices:
            top = os.path.join(host.devices_root, d, kind + "s")
            out[d] = {int(p) for p in os.listdir(top) if p.isdigit()} \
                if os.path.isdir(top) else set()
        return out

    def assigned_parts(self, n: int, kind: str = "object") -> dict[str, set[int]]:
        """device -> partitions of `kind` the current ring assigns to host n."""
        ring = self.ring(kind)
        return {d["device"]: set(ring.parts_for_device(d["id"]))
                for d in ring.devices_on(host_ip(n), self.ports[kind])}

    def misplaced(self, kind: str = "object") -> dict[int, set[int]]:
        """host -> partitions it holds that the ring does not assign to it (handoffs not yet
        reverted, partitions a rebalance moved away and not yet removed)."""
        out = {}
        for n in self.hosts:
            assigned = self.assigned_parts(n, kind)
            extra = {p for d, parts in self.parts_on(n, kind).items()
                     for p in parts - assigned.get(d, set())}
            if extra:
                out[n] = extra
        return out

    def replicas_in_place(self, account: str, container: str, obj: str) -> int:
        """How many of the object's primaries (per the current ring) hold a .data file."""
        from swiftlite.common import hashing

        saved = hashing._PREFIX, hashing._SUFFIX  # other tests in this process set their own
        hashing.set_hash_path_affixes(self.hash_conf["hash_path_prefix"],
                                      self.hash_conf["hash_path_suffix"])
        try:
            hexhash = hashing.hash_path(account, container, obj)
            part, nodes = self.ring("object").get_nodes(account, container, obj)
        finally:
            hashing._PREFIX, hashing._SUFFIX = saved
        by_ip = {h.ip: h for h in self.hosts.values()}
        found = 0
        for node in nodes:
            host = by_ip.get(node["ip"])
            if host is None:
                continue
            hdir = os.path.join(host.devices_root, node["device"], "objects", str(part),
                                hashing.suffix_of(hexhash), hexhash)
            if os.path.isdir(hdir) and any(f.endswith(".data") for f in os.listdir(hdir)):
                found += 1
        return found

    @property
    def auth_url(self) -> str:
        return f"http://{PROXY_IP}:{self.ports['proxy']}/auth/v1.0"

    def connection(self, timeout: float = 30):
        import swiftclient

        return swiftclient.Connection(self.auth_url, "test:tester", "testing", retries=0,
                                      timeout=timeout)

    def describe(self) -> str:
        return json.dumps({"ports": self.ports,
                           "hosts": {n: h.ip for n, h in self.hosts.items()}})


def start_multihost(root: str, hosts: int = 4, **kw: Any) -> MultiHost:
    mh = MultiHost(root, **kw)
    for n in range(1, hosts + 1):
        mh.add_host(n)
    for kind in KINDS:
        mh.ring_builder(kind, "rebalance", ok=(0, 1))
    mh.push_rings()
    try:
        for n in mh.hosts:
            mh.start_host(n)
        mh.start_proxy()
        for n in mh.hosts:
            mh.wait_host(n)
    except BaseException:
        mh.stop()
        raise
    return mh
