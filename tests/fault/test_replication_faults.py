"""Replication under faults, on real `swiftlite up` clusters driven one daemon pass at a time.

Sizes are kept small so each test runs in well under a minute on 2 cores: the write storm is
300 objects at concurrency 8 (not the issue's 1000).
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import swiftclient

from swiftlite.common.hashing import hash_path, set_hash_path_affixes
from swiftlite.obj.engine import fileformat, reading
from swiftlite.ring import Ring, write_ring
from tests.cluster import Cluster, start_cluster
from tests.helpers import free_port, healthy, wait_for

pytestmark = pytest.mark.slow
CONT = "imgs"


@pytest.fixture
def four_nodes(tmp_path):
    c = start_cluster(str(tmp_path / "c"), nodes=4, devices=1, replicas=3, part_power=4)
    yield c
    c.stop()


def body_of(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (20 + i % 50)


def account_of(conn) -> str:
    url, _ = conn.get_auth()
    return url.rstrip("/").rsplit("/", 1)[1]


class Placement:
    """Where the ring puts an object and whether a node holds it on disk."""

    def __init__(self, c: Cluster, account: str) -> None:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(os.path.join(c.etc_dir, "swiftlite.conf"))
        self.prefix = parser.get("hash", "hash_path_prefix")
        self.suffix = parser.get("hash", "hash_path_suffix")
        self.c = c
        self.account = account
        self.ring = Ring(os.path.join(c.etc_dir, "object.ring.gz"))
        self.by_port = {n["servers"]["object"]["port"]: n for n in c.nodes}

    def hash(self, name: str) -> str:
        set_hash_path_affixes(self.prefix, self.suffix)
        try:
            return hash_path(self.account, CONT, name)
        finally:
            set_hash_path_affixes("", "")  # other tests in this worker use the defaults

    def primaries(self, name: str) -> tuple[int, list[dict[str, Any]]]:
        h = self.hash(name)
        part = int(h[:16], 16) >> (64 - self.ring.part_power)
        return part, self.ring.get_part_nodes(part)

    def dev_path(self, dev: dict[str, Any], devices_root: str | None = None) -> str:
        root = devices_root or self.by_port[dev["port"]]["devices_root"]
        return os.path.join(root, dev["device"])

    def state_on(self, dev: dict[str, Any], part: int, name: str,
                 devices_root: str | None = None) -> str:
        hdir = fileformat.hash_dir(self.dev_path(dev, devices_root), part, self.hash(name))
        try:
            return fileformat.state_of(os.listdir(hdir))
        except FileNotFoundError:
            return ""

    def missing(self, names: list[str], ext: str = ".data",
                roots: dict[int, str] | None = None) -> list[tuple[str, str]]:
        """(name, device) for every primary copy not on disk with a current `ext` file."""
        out = []
        for n in names:
            part, devs = self.primaries(n)
            for d in devs:
                root = (roots or {}).get(d["port"])
                if not self.state_on(d, part, n, root).split("|")[0].endswith(ext):
                    out.append((n, f"{d['port']}/{d['device']}"))
        return out


def replicate_all(c: Cluster, daemon: str = "object-replicator") -> None:
    for i in range(len(c.nodes)):
        c.run_daemon(i, daemon)


def test_kill_node_during_write_storm_then_replicate(four_nodes):
    c = four_nodes
    conn = c.connection()
    conn.put_container(CONT)
    account = account_of(conn)
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    local = threading.local()
    killed = threading.Event()

    def put(i: int) -> None:
        if not hasattr(local, "conn"):
            local.conn = c.connection()
        name, body = f"storm-{i:04d}", body_of(i)
        if i == 100:
            c.kill_node(1)  # kill -9 every server of node 2 while the others keep writing
            killed.set()
        try:
            etag = local.conn.put_object(CONT, name, body)
        except swiftclient.ClientException:
            return
        assert etag == hashlib.md5(body).hexdigest()
        with lock:
            acked[name] = body

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(300)))
    assert killed.is_set()
    assert len(acked) >= 250, f"only {len(acked)} of 300 PUTs acknowledged"
    for name, body in acked.items():  # with the node still down
        assert conn.get_object(CONT, name)[1] == body, name
    where = Placement(c, account)
    assert len(where.missing(sorted(acked))) > 50  # written while node 2 was down
    c.start_node(1)
    replicate_all(c)
    assert where.missing(sorted(acked)) == []
    for name, body in acked.items():
        assert conn.get_object(CONT, name)[1] == body, name


def test_corrupt_replica_quarantined_and_restored(four_nodes):
    c = four_nodes
    conn = c.connection()
    conn.put_container(CONT)
    where = Placement(c, account_of(conn))
    good = b"good bytes " * 3000
    conn.put_object(CONT, "victim", good)
    part, devs = where.primaries("victim")
    bad_dev = devs[0]
    path = reading.current_paths(where.dev_path(bad_dev), part, where.hash("victim"))[0]
    with open(path, "r+b") as f:
        f.write(b"EVIL")  # same size; the body no longer matches its ETag
    node_index = c.nodes.index(where.by_port[bad_dev["port"]])
    c.run_daemon(node_index, "object-auditor")
    assert where.state_on(bad_dev, part, "victim") == ""  # quarantined
    qdir = os.path.join(where.dev_path(bad_dev), "quarantined", "objects")
    assert any(n.startswith(where.hash("victim")) for n in os.listdir(qdir))
    for _ in range(10):
        assert conn.get_object(CONT, "victim")[1] == good
    replicate_all(c)
    with open(reading.current_paths(where.dev_path(bad_dev), part,
                                    where.hash("victim"))[0], "rb") as f:
        assert f.read().startswith(good)
    for _ in range(10):
        assert conn.get_object(CONT, "victim")[1] == good


def test_delete_while_replica_down_stays_deleted(four_nodes):
    c = four_nodes
    conn = c.connection()
    conn.put_container(CONT)
    where = Placement(c, account_of(conn))
    conn.put_object(CONT, "doomed", b"old data")
    part, devs = where.primaries("doomed")
    down = c.nodes.index(where.by_port[devs[2]["port"]])
    c.kill_node(down)
    conn.delete_object(CONT, "doomed")
    c.start_node(down)
    assert where.state_on(devs[2], part, "doomed").endswith(".data")  # the stale copy
    c.run_daemon(down, "object-replicator")  # it pushes first: must not resurrect
    replicate_all(c)
    with pytest.raises(swiftclient.ClientException) as exc:
        conn.get_object(CONT, "doomed")
    assert exc.value.http_status == 404
    assert where.missing(["doomed"], ".ts") == []


def _kill_server(c: Cluster, index: int, role: str) -> None:
    s = c.nodes[index]["servers"][role]
    os.killpg(s["pid"], signal.SIGKILL)
    wait_for(lambda: not healthy(s["port"]), 10, what=f"{role} server to die")


def _start_server(c: Cluster, index: int, role: str) -> None:
    node = c.nodes[index]
    s = node["servers"][role]
    with open(os.path.join(c.root, "logs", f"{node['name']}-{role}.log"), "ab") as log:
        p = subprocess.Popen(s["cmd"], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    s["pid"] = p.pid
    c.extra.append(p)
    wait_for(lambda: healthy(s["port"]), 30, what=f"{role} server to serve")


def test_container_server_down_then_updater(four_nodes):
    c = four_nodes
    conn = c.connection()
    conn.put_container(CONT)
    account = account_of(conn)
    cring = Ring(os.path.join(c.etc_dir, "container.ring.gz"))
    where = Placement(c, account)
    set_hash_path_affixes(where.prefix, where.suffix)
    try:
        cpart, cnodes = cring.get_nodes(account, CONT)
    finally:
        set_hash_path_affixes("", "")
    by_port = {n["servers"]["container"]["port"]: i for i, n in enumerate(c.nodes)}
    down = by_port[cnodes[0]["port"]]
    _kill_server(c, down, "container")
    names = [f"up-{i:03d}" for i in range(40)]
    for i, n in enumerate(names):
        conn.put_object(CONT, n, body_of(i))
    conn.delete_object(CONT, names[0])
    _start_server(c, down, "container")
    node = cnodes[0]
    url = f"http://{node['ip']}:{node['port']}/{node['device']}/{cpart}/{account}/{CONT}"
    with urllib.request.urlopen(url) as r:
        assert int(r.headers["X-Container-Object-Count"]) == 0  # it missed every update
    replicate_all(c, "object-updater")
    expect = names[1:]
    total = sum(len(body_of(i)) for i in range(1, 40))
    for node in cnodes:  # every container replica, the one that was down included
        url = f"http://{node['ip']}:{node['port']}/{node['device']}/{cpart}/{account}/{CONT}"
        with urllib.request.urlopen(url + "?format=json") as r:
            listing = [o["name"] for o in json.load(r)]
            assert listing == expect
            assert int(r.headers["X-Container-Object-Count"]) == len(expect)
            assert int(r.headers["X-Container-Bytes-Used"]) == total
    _, listing = conn.get_container(CONT)
    assert [o["name"] for o in listing] == expect
    # The DB replicators then find nothing to change, and the counts stay exact.
    replicate_all(c, "container-replicator")
    replicate_all(c, "account-replicator")
    for d in ("container-replicator", "account-replicator"):
        dbs = 0
        for n in c.nodes:
            with open(os.path.join(c.root, "run", n["name"], f"{d}.json")) as f:
                st = json.load(f)
            assert st["failures"] == 0, (n["name"], st)
            dbs += st["objects"]
        assert dbs == 3  # each DB replica examined once, on its own node
    headers, listing = conn.get_container(CONT)
    assert [o["name"] for o in listing] == expect
    assert int(headers["x-container-object-count"]) == len(expect)


def _add_object_node(c: Cluster) -> tuple[subprocess.Popen, str, int]:
    """A new node holding one device, running only an object server."""
    root = os.path.join(c.root, "node-new")
    os.makedirs(os.path.join(root, "d1"), exist_ok=True)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(c.nodes[0]["conf"])
    port = free_port()
    parser["DEFAULT"]["devices"] = root
    parser["DEFAULT"]["status_dir"] = os.path.join(c.root, "run", "node-new")
    parser["object-server"]["bind_port"] = str(port)
    conf = os.path.join(c.etc_dir, "node-new.conf")
    with open(conf, "w") as f:
        parser.write(f)
    with open(os.path.join(c.root, "logs", "node-new-object.log"), "ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "swiftlite.cli", "server", "object", "-c",
                              conf], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    wait_for(lambda: healthy(port), 30, what="new object server")
    return p, conf, port


def test_add_node_and_rebalance_during_reads(tmp_path):
    from ringbuilder.builder import RingBuilder

    c = start_cluster(str(tmp_path / "c"), nodes=3, devices=1, replicas=3, part_power=4)
    new_proc = None
    try:
        conn = c.connection()
        conn.put_container(CONT)
        where = Placement(c, account_of(conn))
        names = [f"r-{i:03d}" for i in range(60)]
        for i, n in enumerate(names):
            conn.put_object(CONT, n, body_of(i))
        new_proc, new_conf, new_port = _add_object_node(c)
        errors: list[str] = []
        reads = [0]
        stop = threading.Event()

        def reader() -> None:
            rconn = c.connection()
            while not stop.is_set():
                for i, n in enumerate(names):
                    try:
                        if rconn.get_object(CONT, n)[1] != body_of(i):
                            errors.append(f"{n}: wrong bytes")
                    except swiftclient.ClientException as exc:
                        errors.append(f"{n}: {exc.http_status}")
                    reads[0] += 1

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        builder_path = os.path.join(c.etc_dir, "object.builder")
        b = RingBuilder.load(builder_path)
        b.add_dev({"region": 1, "zone": 9, "ip": "127.0.0.1", "port": new_port,
                   "device": "d1", "weight": 100.0})
        b.pretend_min_part_hours_passed()
        b.rebalance(seed=2)
        b.save(builder_path)
        write_ring(os.path.join(c.etc_dir, "object.ring.gz"), b.get_ring_data())
        ring_written = time.monotonic()
        where.ring = Ring(os.path.join(c.etc_dir, "object.ring.gz"))
        moved = [n for n in names if any(d["port"] == new_port for d in where.primaries(n)[1])]
        assert moved, "the rebalance moved nothing to the new node"
        # The old primaries push to the new one; the one that lost a partition reverts it
        # (pushes, then removes its copy) in the same pass.
        replicate_all(c)
        subprocess.run([sys.executable, "-m", "swiftlite.cli", "daemon", "object-replicator",
                        "-c", new_conf, "--once"], check=True, timeout=120)
        roots = {new_port: os.path.join(c.root, "node-new")}
        assert where.missing(names, roots=roots) == []
        # Wait for the proxy to reload the ring (it re-stats it every 15 s), with reads on.
        start_reads = reads[0]
        wait_for(lambda: time.monotonic() > ring_written + 16
                 and reads[0] > start_reads + len(names), 60, what="reads past a ring reload")
        stop.set()
        t.join(30)
        assert errors == []
        # No copy is left where the new ring does not place it.
        for n in moved:
            part, devs = where.primaries(n)
            primary_ports = {d["port"] for d in devs}
            for d in where.ring.devs:
                if d is not None and d["port"] not in primary_ports:
                    assert where.state_on(d, part, n, roots.get(d["port"])) == "", (n, d)
    finally:
        if new_proc is not None and new_proc.poll() is None:
            os.killpg(new_proc.pid, signal.SIGKILL)
        c.stop()
