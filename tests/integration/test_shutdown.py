"""Graceful, bounded shutdown: SIGTERM stops taking new requests, finishes those in flight,
and every server, daemon and supervisor (`swiftlite node`) exits within 5 s, whatever a
client or a daemon's pass is doing. Also `swiftlite node`: one command runs a host's
servers and daemons from one config file and restarts a child that dies.
"""

from __future__ import annotations

import configparser
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest
import swiftclient

from tests.cluster import Cluster, start_cluster
from tests.helpers import healthy, wait_for

BOUND = 5.0  # seconds from SIGTERM to exit, as the issue asks


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pids_of(conf: str) -> dict[str, int]:
    """pid of every `swiftlite server|daemon ... -c conf` process, by role or daemon name."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "swiftlite.cli" in argv and conf in argv and argv[argv.index("swiftlite.cli") + 1] \
                in ("server", "daemon") and _alive(int(d)):
            found[argv[argv.index("swiftlite.cli") + 2]] = int(d)
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("shutdown")), nodes=1, devices=3,
                      replicas=3, part_power=4)
    yield c
    c.stop()


def _chunked_put_start(url: str, token: str, path: str) -> socket.socket:
    """A chunked PUT whose body is still coming: the headers and one chunk sent."""
    u = urllib.parse.urlsplit(url)
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall((f"PUT {path} HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {token}\r\n"
               "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n").encode())
    return s


def _status_of(s: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed before a status line")
        head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.mark.slow
def test_daemon_abandons_a_long_pass_on_sigterm(cluster, tmp_path):
    conn = cluster.connection()
    conn.put_container("paced")
    for i in range(20):
        conn.put_object("paced", f"o{i}", b"x" * 100)
    # The auditor paced to 1 file/s: its pass over 60 files would take a minute.
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cluster.nodes[0]["conf"])
    parser["object-auditor"] = {"interval": "3600", "max_files_per_second": "1"}
    parser["DEFAULT"]["status_dir"] = str(tmp_path / "run")
    conf = str(tmp_path / "node.conf")
    with open(conf, "w") as f:
        parser.write(f)
    log_path = tmp_path / "auditor.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "swiftlite.cli", "daemon",
                                 "object-auditor", "-c", conf], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "pass starting" in log_path.read_text(errors="replace"), 30,
                 what="the auditor's pass to start")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert took < BOUND, f"auditor took {took:.1f}s to stop"
    with open(tmp_path / "run" / "object-auditor.json") as f:
        status = json.load(f)
    assert status.get("interrupted") is True, status


@pytest.mark.slow
def test_swiftlite_node_runs_restarts_and_stops_in_bound(cluster, tmp_path):
    # Configs and rings of an all-in-one root, run instead by one `swiftlite node` per
    # config (as two hosts would): a second set of servers on the same ports is impossible,
    # so this test brings the cluster's own up and down.
    node_conf = cluster.nodes[0]["conf"]
    proxy_conf = os.path.join(cluster.etc_dir, "proxy.conf")
    cluster.stop()
    logs = tmp_path / "logs"
    nodes = {}
    for name, conf in (("storage", node_conf), ("proxy", proxy_conf)):
        nodes[name] = subprocess.Popen(
            [sys.executable, "-m", "swiftlite.cli", "node", "-c", conf, "--log-dir",
             str(logs / name)], stdout=open(tmp_path / f"{name}.out", "wb"),
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ports = {r: s["port"] for r, s in cluster.nodes[0]["servers"].items()}
        proxy_port = cluster.info["proxy"]["port"]
        for port in (*ports.values(), proxy_port):
            wait_for(lambda p=port: healthy(p), 30, what=f"port {port}")
        conn = swiftclient.Connection(cluster.auth_url, "test:tester", "testing", retries=3)
        conn.put_container("node-run")
        conn.put_object("node-run", "a", b"alpha")
        assert conn.get_object("node-run", "a")[1] == b"alpha"
        children = _pids_of(node_conf)
        assert {"object", "container", "account", "object-replicator",
                "object-auditor"} <= set(children), children
        # A crashed child comes back by itself.
        os.killpg(children["object"], signal.SIGKILL)
        wait_for(lambda: _pids_of(node_conf).get("object", children["object"])
                 != children["object"] and healthy(ports["object"]), 30,
                 what="the object server restarted")
        assert conn.get_object("node-run", "a")[1] == b"alpha"
        # A client holding an upload open cannot hold the stop up.
        token = conn.get_auth()[1]
        acct_path = urllib.parse.urlsplit(conn.url).path
        stalled = _chunked_put_start(cluster.proxy_url, token, f"{acct_path}/node-run/slow")
        everyone = [*_pids_of(node_conf).values(), *_pids_of(proxy_conf).values()]
        t0 = time.monotonic()
        for p in nodes.values():
            p.send_signal(signal.SIGTERM)
        for p in nodes.values():
            p.wait(timeout=30)
        took = time.monotonic() - t0
        wait_for(lambda: not any(_alive(pid) for pid in everyone), 5,
                 what="every child gone")
        stalled.close()
        assert took < BOUND, f"swiftlite node took {took:.1f}s to stop"
        assert all(p.returncode == 0 for p in nodes.values())
    finally:
        for p in nodes.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.slow
def test_proxy_finishes_a_request_in_flight_then_stops(tmp_path):
    c = start_cluster(str(tmp_path / "c"), nodes=1, devices=3, replicas=3, part_power=4)
    try:
        conn = c.connection()
        conn.put_container("inflight")
        token = conn.get_auth()[1]
        acct_path = urllib.parse.urlsplit(conn.url).path
        s = _chunked_put_start(c.proxy_url, token, f"{acct_path}/inflight/obj")
        wait_for(lambda: healthy(c.info["proxy"]["port"]), 10)
        proxy = c.info["proxy"]["pid"]
        t0 = time.monotonic()
        os.kill(proxy, signal.SIGTERM)
        # New connections are refused at once...
        wait_for(lambda: not healthy(c.info["proxy"]["port"]), BOUND, what="listener closed")
        # ...while the upload in flight completes and is stored.
        s.sendall(b"6\r\n world\r\n0\r\n\r\n")
        assert _status_of(s) == 201
        s.close()
        wait_for(lambda: not _alive(proxy), BOUND, what="proxy exit")
        assert time.monotonic() - t0 < BOUND
    finally:
        c.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_server_without_rings_refuses_once(cluster, tmp_path, workers):
    """A proxy whose rings are missing says why and exits EX_CONFIG (78), which `swiftlite
    node` takes as "don't restart"; with several workers it used to respawn them in a loop."""
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(os.path.join(cluster.etc_dir, "proxy.conf"))
    cp["DEFAULT"]["swift_dir"] = str(tmp_path)  # no ring files here
    cp["proxy-server"]["workers"] = str(workers)
    cp["proxy-server"]["bind_port"] = "0"
    conf = tmp_path / "proxy.conf"
    with open(conf, "w") as f:
        cp.write(f)
    proc = subprocess.run([sys.executable, "-m", "swiftlite.cli", "server", "proxy", "-c",
                           str(conf)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 78, proc.stderr[-2000:]
    assert "refusing to start" in proc.stderr and "object.ring.gz" in proc.stderr
    assert proc.stderr.count("refusing to start") <= 2 * workers  # once per worker, no loop
