"""`GET /recon` on the storage servers and `swiftlite status --cluster` against a real
two-node all-in-one cluster with its daemons running."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.cluster import Cluster, start_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("recon")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("recon")), nodes=2, devices=2,
                      replicas=2, part_power=6, daemons=True)
    yield c
    c.stop()


def status(c: Cluster, *extra: str) -> subprocess.CompletedProcess:
    args = list(extra) or ["--root", c.root]
    return subprocess.run([sys.executable, "-m", "swiftlite.cli", "status", "--cluster",
                           "--timeout", "2", *args], capture_output=True, text=True, timeout=60)


def recon(c: Cluster, node: int, role: str = "object") -> dict:
    port = c.nodes[node]["servers"][role]["port"]
    # urllib requests to storage servers are signed by tests/backend_signing.py
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/recon", timeout=10) as r:
        return json.load(r)


def test_recon_needs_a_signature(cluster):
    port = cluster.nodes[0]["servers"]["object"]["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /recon HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head = s.recv(4096).split(b"\r\n", 1)[0]
    assert b" 401 " in head, head


def test_recon_reports_devices_rings_daemons(cluster):
    doc = recon(cluster, 0)
    assert sorted(doc["devices"]) == ["d1", "d2"]
    d1 = doc["devices"]["d1"]
    assert d1["total"] > 0 and 0 <= d1["used"] <= d1["total"] and d1["mounted"]
    assert d1["journal_bytes"] >= 0 and d1["journal_partitions"] >= 0
    for kind in ("object", "container", "account"):
        with open(os.path.join(cluster.etc_dir, f"{kind}.ring.gz"), "rb") as f:
            assert doc["rings"][kind] == hashlib.md5(f.read()).hexdigest()
    assert "object-replicator" in doc["daemons"]
    assert set(doc["replication_lag"]) >= {"object-replicator", "container-replicator",
                                           "account-replicator"}
    assert doc["totals"]["async_pending"] == sum(d["async_pending"]
                                                 for d in doc["devices"].values())
    assert abs(doc["time"] - time.time()) < 60
    # Every server of the host tells the same host facts.
    assert recon(cluster, 0, "container")["devices_root"] == doc["devices_root"]


def test_recon_liveness_by_pid_or_fresh_status_file(cluster):
    p = subprocess.Popen(["true"])
    p.wait()  # a pid that no longer runs
    path = os.path.join(recon(cluster, 0)["status_dir"], "test-daemon.json")
    with open(path, "w") as f:
        json.dump({"daemon": "test-daemon", "pid": p.pid, "start": time.time() - 5,
                   "duration": 1}, f)
    try:
        # Written just now: alive though its pid is not (its interval defaults to 30 s).
        st = recon(cluster, 0)["daemons"]["test-daemon"]
        assert st["alive"] and not st["pid_alive"] and not st["configured"], st
        old = time.time() - 61  # older than two intervals
        os.utime(path, (old, old))
        st = recon(cluster, 0)["daemons"]["test-daemon"]
        assert not st["alive"] and st["status_age"] > 60, st
    finally:
        os.unlink(path)


def test_status_cluster_healthy_then_flags_problems(cluster, tmp_path):
    # Healthy once every daemon of both nodes has run a pass.
    res = wait_for(lambda: (r := status(cluster)).returncode == 0 and r, 60,
                   interval=0.5, what="a clean status")
    assert "no problems found" in res.stdout
    assert "/node1" in res.stdout and "/node2" in res.stdout

    # A quarantined object on node1 is worth a look.
    qdir = os.path.join(cluster.nodes[0]["devices_root"], "d1", "quarantined", "objects")
    os.makedirs(os.path.join(qdir, "abc"))
    try:
        res = status(cluster)
        assert res.returncode == 1 and "quarantined" in res.stdout, res.stdout
    finally:
        shutil.rmtree(qdir)

    # Rings here that differ from the hosts' (a push that missed them): same devices,
    # different bytes.
    etc = tmp_path / "etc"
    shutil.copytree(cluster.etc_dir, etc)
    ring = etc / "object.ring.gz"
    ring.write_bytes(gzip.compress(gzip.decompress(ring.read_bytes()), compresslevel=1,
                                   mtime=1))
    conf = etc / "proxy.conf"
    conf.write_text(conf.read_text().replace(cluster.etc_dir, str(etc)))
    res = status(cluster, "-c", str(conf), "--json")
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert any("object ring differs" in p for p in out["problems"]), out["problems"]
    assert not any("container ring differs" in p for p in out["problems"])

    # A server down is named.
    port = cluster.nodes[1]["servers"]["object"]["port"]
    cluster.kill_node(1, roles=["object"])
    res = status(cluster)
    assert res.returncode == 1
    assert f"127.0.0.1:{port}: unreachable" in res.stdout, res.stdout
    cluster.start_node(1, roles=["object"])


def test_status_shows_headline_numbers(cluster):
    conn = cluster.connection()
    conn.put_container("headline")
    for i in range(5):
        conn.put_object("headline", f"o{i}", b"x" * 1000)
        conn.get_object("headline", f"o{i}")
    res = subprocess.run([sys.executable, "-m", "swiftlite.cli", "status", "--root",
                          cluster.root], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    # The proxy's own counters (since it started), method by method.
    lines = res.stdout.splitlines()
    proxy_lines = lines[1:lines.index(next(x for x in lines if x.startswith("node1")))]
    get = next(x for x in proxy_lines if x.strip().startswith("GET "))
    assert int(get.split()[1]) >= 5 and " 0 5xx" in get and "p99 " in get, proxy_lines
    assert any(x.strip().startswith("bytes in") for x in proxy_lines)
    assert any("object server: PUT" in x for x in lines), lines
    # The object PUTs' container updates went through device rounds.
    assert any("container server: update rounds" in x and "DBs holding rows" in x
               for x in lines), lines


def test_async_pending_counted_while_a_container_server_is_down(cluster):
    conn = cluster.connection()
    conn.put_container("pending")

    def total() -> int:
        return sum(recon(cluster, n)["totals"]["async_pending"] for n in (0, 1))

    assert total() == 0
    cluster.kill_node(1, roles=["container"])
    try:
        # The object server whose container replica is node2's cannot tell it: it saves
        # the update for the updater.
        conn.put_object("pending", "o", b"x")
        wait_for(lambda: total() >= 1, 10, what="an async_pending")
        res = status(cluster, "--root", cluster.root, "--pending-limit", "0", "--json")
        assert res.returncode == 1
        problems = json.loads(res.stdout)["problems"]
        assert any("async_pendings" in p for p in problems), problems
    finally:
        cluster.start_node(1, roles=["container"])
    for n in (0, 1):
        cluster.run_daemon(n, "object-updater")
    assert total() == 0
