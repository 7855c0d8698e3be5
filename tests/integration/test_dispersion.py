"""`swiftlite dispersion populate|report` against a real all-in-one cluster: canaries placed
through the proxy, replicas counted on the storage servers, copies lost on disk or behind a
dead server reported by name, and 100% again after a replication pass."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from swiftlite.common.config import load_sections
from swiftlite.common.hashing import set_hash_path_affixes
from swiftlite.ops.dispersion import OBJECTS_CONTAINER, canary_names
from swiftlite.ring import Ring
from tests.cluster import Cluster, start_cluster

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dispersion")]

ACCOUNT = "AUTH_test"  # the all-in-one root's first .admin user, test:tester


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    # 256 partitions: the default 1% coverage gives the minimum of 10 canaries per kind.
    c = start_cluster(str(tmp_path_factory.mktemp("dispersion")), nodes=1, devices=4,
                      replicas=3, part_power=8)
    yield c
    c.stop()
    shutil.rmtree(c.root, ignore_errors=True)


def dispersion(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swiftlite.cli", "dispersion", *args,
                           "--root", cluster.root, "--timeout", "1"],
                          capture_output=True, text=True, timeout=60)


def report(cluster: Cluster) -> tuple[int, dict]:
    res = dispersion(cluster, "report", "--json")
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout)


def placed(cluster: Cluster, kind: str, count: int) -> list[tuple[str, int, list[str]]]:
    """(name, partition, primary devices) of the first `count` canaries, computed here with
    the cluster's hash affixes and ring, as the tool does."""
    load_sections(os.path.join(cluster.etc_dir, "swiftlite.conf"))
    try:
        ring = Ring.load(os.path.join(cluster.etc_dir, f"{kind}.ring.gz"))
        return [(name, part, [n["device"] for n in ring.get_part_nodes(part)])
                for name, part in canary_names(ring, ACCOUNT, kind, count)]
    finally:
        set_hash_path_affixes("", "")  # other tests in this worker use the defaults


def node_label(cluster: Cluster, role: str, device: str) -> str:
    node = cluster.nodes[0]
    return f"{node['ip']}:{node['servers'][role]['port']}/{device}"


def test_populate_is_idempotent_and_report_full(cluster):
    res = dispersion(cluster, "populate")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "containers: created 10, 10 canaries" in res.stdout
    assert "objects: created 10, 10 canaries" in res.stdout

    # Twice is once: nothing new, and the cluster holds exactly the canaries of one run.
    res = dispersion(cluster, "populate")
    assert res.returncode == 0 and "created 0, 10 canaries" in res.stdout, res.stdout
    conn = cluster.connection()
    assert len(conn.get_container(OBJECTS_CONTAINER)[1]) == 10
    # A larger coverage extends the same sequence: 5% of 256 partitions is 13 canaries.
    res = dispersion(cluster, "populate", "--coverage", "5")
    assert "created 3, 13 canaries" in res.stdout, res.stdout
    objs = sorted(o["name"] for o in conn.get_container(OBJECTS_CONTAINER)[1])
    assert objs == sorted(name for name, _, _ in placed(cluster, "object", 13))
    rc, rep = report(cluster)
    assert rc == 0
    for kind in ("container", "object"):
        r = rep[kind]
        assert (r["canaries"], r["copies_expected"], r["copies_found"]) == (13, 39, 39)
        assert r["pct_complete"] == 100.0 and r["missing"] == {} and r["node_errors"] == {}


def test_report_names_lost_copies_until_replication(cluster):
    # populate keeps how many canaries there are in the account's metadata.
    conn = cluster.connection()
    if "x-account-meta-dispersion-objects" not in conn.head_account():  # run on its own
        assert dispersion(cluster, "populate").returncode == 0
    meta = conn.head_account()
    count = int(meta["x-account-meta-dispersion-objects"])
    ccount = int(meta["x-account-meta-dispersion-containers"])
    assert count >= 10 and ccount >= 10
    root = cluster.nodes[0]["devices_root"]

    # Objects: one copy of two canaries gone, two copies of a third (a partition's dir on a
    # device removed, as a replaced disk would be).
    objs = placed(cluster, "object", count)
    lost = {(objs[0][0], objs[0][2][0]), (objs[1][0], objs[1][2][1]),
            (objs[2][0], objs[2][2][0]), (objs[2][0], objs[2][2][2])}
    parts = {name: part for name, part, _ in objs}
    for name, dev in lost:
        shutil.rmtree(os.path.join(root, dev, "objects", str(parts[name])))

    # Containers: their server down, every copy unconfirmed and the devices named.
    cluster.kill_node(0, roles=["container"])
    rc, rep = report(cluster)
    assert rc == 1
    c = rep["container"]
    assert c["copies_found"] == 0 and c["missing"] == {"3": ccount}
    assert set(c["node_errors"]) == {node_label(cluster, "container", d)
                                     for d in os.listdir(root)}
    assert all("unreachable" in e["reason"] for e in c["node_errors"].values())
    o = rep["object"]
    assert o["missing"] == {"1": 2, "2": 1} and o["complete"] == count - 3
    assert o["copies_found"] == 3 * count - 4 and o["node_errors"] == {}
    assert {(m["name"], m["node"], m["reason"]) for m in o["missing_copies"]} == \
        {(name, node_label(cluster, "object", dev), "404") for name, dev in lost}

    # While it is down, two container canaries lose a copy; back up, only those are missing.
    conts = placed(cluster, "container", ccount)
    lost_c = {(conts[3][0], conts[3][2][1]), (conts[4][0], conts[4][2][0])}
    cparts = {name: part for name, part, _ in conts}
    for name, dev in lost_c:
        shutil.rmtree(os.path.join(root, dev, "containers", str(cparts[name])))
    cluster.start_node(0, roles=["container"])
    rc, rep = report(cluster)
    c = rep["container"]
    assert rc == 1 and c["missing"] == {"1": 2} and c["node_errors"] == {}
    assert {(m["name"], m["node"]) for m in c["missing_copies"]} == \
        {(name, node_label(cluster, "container", dev)) for name, dev in lost_c}

    # One replication pass of each kind (side by side) puts every copy back.
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda daemon: cluster.run_daemon(0, daemon),
                      ("object-replicator", "container-replicator")))
    rc, rep = report(cluster)
    assert rc == 0, rep
    for kind in ("container", "object"):
        assert rep[kind]["copies_found"] == rep[kind]["copies_expected"]
        assert rep[kind]["pct_complete"] == 100.0 and rep[kind]["missing_copies"] == []
