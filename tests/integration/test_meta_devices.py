"""DBs on their own devices (`meta_devices`): a real all-in-one cluster made with
`swiftlite up --meta-devices 3` keeps container and account DBs on the meta devices only and
objects on the object devices only; the proxy API works across both; DB replication, the
updater and /recon cover the meta devices."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from swiftlite.common import hashing
from swiftlite.common.config import load_sections
from swiftlite.common.hashing import hash_path
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.db.paths import db_file
from swiftlite.ring import Ring
from tests.cluster import Cluster, start_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("meta_devices")]
ACCOUNT = "AUTH_test"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("meta")), nodes=1, devices=3, replicas=3,
                      part_power=4, meta_devices=3)
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def _cluster_hash_affixes(cluster):
    """The cluster's [hash] affixes for ring lookups here (loading its config sets them),
    and back to what other tests of this process use afterwards."""
    saved = hashing._PREFIX, hashing._SUFFIX
    load_sections(cluster.nodes[0]["conf"])
    yield
    hashing._PREFIX, hashing._SUFFIX = saved


def files_under(root: str) -> list[str]:
    return [os.path.relpath(os.path.join(d, f), root)
            for d, _, names in os.walk(root) for f in names]


def container_dbs(c: Cluster, container: str) -> list[str]:
    """The paths of a container's DB replicas, as the container ring places them."""
    ring = Ring.load(os.path.join(c.etc_dir, "container.ring.gz"))
    part, nodes = ring.get_nodes(ACCOUNT, container)
    return [db_file(c.nodes[0]["meta_devices_root"], node["device"], "container", part,
                    ACCOUNT, container) for node in nodes]


def recon(c: Cluster, role: str = "object") -> dict:
    port = c.nodes[0]["servers"][role]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/recon", timeout=10) as r:
        return json.load(r)


def test_rings_name_meta_devices_for_dbs_and_object_devices_for_objects(cluster):
    def names(kind: str) -> set[str]:
        ring = Ring.load(os.path.join(cluster.etc_dir, f"{kind}.ring.gz"))
        return {d["device"] for d in ring.devs if d}

    assert names("object") == {"d1", "d2", "d3"}
    assert names("container") == names("account") == {"m1", "m2", "m3"}
    meta_root = cluster.nodes[0]["meta_devices_root"]
    assert sorted(os.listdir(meta_root)) == ["m1", "m2", "m3"]


def test_dbs_only_on_meta_devices_objects_only_on_object_devices(cluster):
    conn = cluster.connection()
    conn.put_container("photos")
    bodies = {f"img-{i}": os.urandom(100 + i) for i in range(10)}
    for name, body in bodies.items():
        conn.put_object("photos", name, body)
    for name, body in bodies.items():
        assert conn.get_object("photos", name)[1] == body
        assert int(conn.head_object("photos", name)["content-length"]) == len(body)
    _, listing = conn.get_container("photos")
    assert [o["name"] for o in listing] == sorted(bodies)
    assert conn.head_container("photos")["x-container-object-count"] == "10"
    wait_for(lambda: conn.head_account()["x-account-object-count"] == "10", 10,
             what="the account's totals")

    meta = files_under(cluster.nodes[0]["meta_devices_root"])
    objs = files_under(cluster.nodes[0]["devices_root"])
    assert any("/containers/" in f and f.endswith(".db") for f in meta)
    assert any("/accounts/" in f and f.endswith(".db") for f in meta)
    assert not [f for f in meta if "/objects/" in f]
    for name in bodies:  # three replicas of each, all on object devices
        h = hash_path(ACCOUNT, "photos", name)
        assert len([f for f in objs if f"/{h}/" in f and f.endswith(".data")]) == 3
    assert not [f for f in objs if "/containers/" in f or "/accounts/" in f
                or f.endswith(".db")]


def test_replicator_restores_a_container_replica_removed_from_a_meta_device(cluster):
    conn = cluster.connection()
    conn.put_container("restore")
    for i in range(5):
        conn.put_object("restore", f"o{i}", b"x")
    dbs = container_dbs(cluster, "restore")
    assert len(set(dbs)) == 3 and all(os.path.exists(p) for p in dbs), dbs
    # Each replica has its rows: the object servers updated every replica.
    for path in dbs:
        assert ContainerBroker(path).get_info()["object_count"] == 5
    lost = dbs[0]
    shutil.rmtree(os.path.dirname(lost))
    assert not os.path.exists(lost)
    cluster.run_daemon(0, "container-replicator")
    assert os.path.exists(lost)
    assert ContainerBroker(lost).get_info()["object_count"] == 5
    assert [o["name"] for o in conn.get_container("restore")[1]] == [f"o{i}"
                                                                       for i in range(5)]


def test_replicator_reports_totals_that_moved_without_a_report(cluster):
    """Rows that reach a container replica other than through its server (replication, a
    shard count refresh) change its totals with no report from the server; the container
    replicator's pass reports them, so the account follows."""
    conn = cluster.connection()
    conn.put_container("sweep")
    for i in range(3):
        conn.put_object("sweep", f"o{i}", b"xy")

    def account_row() -> dict:
        return {c["name"]: c for c in conn.get_account()[1]}["sweep"]

    wait_for(lambda: account_row()["count"] == 3, 15, what="the account to count 3")
    now = time.time()
    rows = [{"name": f"r{i}", "created_at": Timestamp.parse(now).internal, "size": 5,
             "content_type": "t", "etag": "e", "deleted": 0} for i in range(2)]
    for path in container_dbs(cluster, "sweep"):  # as a peer's replication would
        ContainerBroker(path).merge_items(rows)
    assert account_row()["count"] == 3  # nobody told the account
    cluster.run_daemon(0, "container-replicator")
    wait_for(lambda: account_row()["count"] == 5 and account_row()["bytes"] == 16, 15,
             what="the replicator's report of 5 objects, 16 bytes")


def test_account_updates_saved_on_meta_devices_are_replayed_and_reported(cluster):
    """A container server that cannot reach the account servers saves its report on its
    own (meta) device; /recon counts it and the object-updater replays it from there."""
    conn = cluster.connection()
    conn.put_container("later")
    cluster.kill_node(0, roles=["account"])
    try:
        conn.put_object("later", "o", b"x")

        def meta_pendings() -> int:
            return sum(d["async_pending"] for d in recon(cluster)["meta_devices"].values())

        wait_for(lambda: meta_pendings() >= 1, 15, what="an account update saved on m*")
        assert recon(cluster)["totals"]["async_pending"] >= 1
    finally:
        cluster.start_node(0, roles=["account"])
    cluster.run_daemon(0, "object-updater")

    def counted() -> bool:
        # The report replayed may predate the object's row (the container server reports
        # on its own schedule): its later report arrives itself or is saved and replayed.
        if recon(cluster)["totals"]["async_pending"]:
            cluster.run_daemon(0, "object-updater")
        return {c["name"]: c for c in conn.get_account()[1]}["later"]["count"] == 1

    wait_for(counted, 20, what="the account to count the container's object")
    assert recon(cluster)["totals"]["async_pending"] == 0


def test_status_cluster_shows_meta_devices(cluster):
    res = subprocess.run([sys.executable, "-m", "swiftlite.cli", "status", "--cluster",
                          "--root", cluster.root, "--timeout", "5"],
                         capture_output=True, text=True, timeout=60)
    for dev in ("d1", "d2", "d3", "meta/m1", "meta/m2", "meta/m3"):
        assert f"    {dev}: " in res.stdout, res.stdout
    doc = recon(cluster, "container")
    assert sorted(doc["meta_devices"]) == ["m1", "m2", "m3"]
    assert doc["meta_devices_root"] == cluster.nodes[0]["meta_devices_root"]
    # The host is one host: every server reports the object devices as its devices root.
    assert doc["devices_root"] == recon(cluster)["devices_root"]
