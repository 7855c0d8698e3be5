"""Storage policies on a real all-in-one cluster: `swiftlite up --policies silver`.

Containers on Policy-0 (the default) and on silver (index 1, ring object-1.ring.gz); each
policy's objects land under its own data dir (`objects`, `objects-1`) on the same devices.
"""

from __future__ import annotations

import glob
import os
import time

import pytest
import requests

from swiftlite.common import hashing
from swiftlite.common.config import load_sections
from swiftlite.ring import Ring
from tests.cluster import start_cluster, swift_api
from tests.helpers import wait_for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("policies")), nodes=1, devices=4,
                      replicas=3, part_power=6, extra_args=["--policies", "silver"])
    yield c
    c.stop()


@pytest.fixture(scope="module")
def api(cluster):
    return swift_api(cluster)


def hash_path(cluster, *names: str) -> str:
    load_sections(cluster.nodes[0]["conf"])  # the cluster's [hash] affixes (conftest resets)
    return hashing.hash_path(*names)


def _object_files(cluster, datadir: str, account: str, cont: str, name: str) -> list[str]:
    """The .data files of one object under `datadir` on every device of the cluster."""
    hexhash = hash_path(cluster, account, cont, name)
    out = []
    for node in cluster.nodes:
        out += glob.glob(os.path.join(node["devices_root"], "*", datadir, "*",
                                      hexhash[-3:], hexhash, "*.data"))
    return out


def test_info_lists_both_policies(cluster, api):
    info = requests.get(cluster.proxy_url + "/info").json()
    pols = info["swift"]["policies"]
    assert [p["name"] for p in pols] == ["Policy-0", "silver"]
    assert pols[0].get("default") is True and "default" not in pols[1]


def test_container_keeps_its_policy(api):
    assert api("PUT", "/gold1").status_code == 201
    assert api("PUT", "/silver1", {"X-Storage-Policy": "silver"}).status_code == 201
    assert api("HEAD", "/gold1").headers["X-Storage-Policy"] == "Policy-0"
    assert api("HEAD", "/silver1").headers["X-Storage-Policy"] == "silver"
    assert api("GET", "/silver1").headers["X-Storage-Policy"] == "silver"
    # Names are case-insensitive; naming the same policy again is fine, another is a 409.
    assert api("PUT", "/silver1", {"X-Storage-Policy": "SILVER"}).status_code == 202
    r = api("PUT", "/silver1", {"X-Storage-Policy": "Policy-0"})
    assert r.status_code == 409
    assert api("PUT", "/gold1", {"X-Storage-Policy": "silver"}).status_code == 409
    # A re-PUT that names no policy keeps the container's.
    assert api("PUT", "/silver1").status_code == 202
    assert api("HEAD", "/silver1").headers["X-Storage-Policy"] == "silver"


def test_unknown_policy_is_400_and_creates_nothing(api):
    r = api("PUT", "/nowhere", {"X-Storage-Policy": "bronze"})
    assert r.status_code == 400
    assert "bronze" in r.text
    assert api("HEAD", "/nowhere").status_code == 404


def test_objects_land_in_their_policy_data_dir(cluster, api):
    api("PUT", "/gold2")
    api("PUT", "/silver2", {"X-Storage-Policy": "silver"})
    acct = api.account
    for cont, datadir, other in (("gold2", "objects", "objects-1"),
                                 ("silver2", "objects-1", "objects")):
        body = os.urandom(3000)
        assert api("PUT", f"/{cont}/o", data=body).status_code == 201
        assert len(_object_files(cluster, datadir, acct, cont, "o")) == 3
        assert _object_files(cluster, other, acct, cont, "o") == []
        r = api("GET", f"/{cont}/o")
        assert r.status_code == 200 and r.content == body
        assert api("POST", f"/{cont}/o", {"X-Object-Meta-A": "b"}).status_code == 202
        assert api("HEAD", f"/{cont}/o").headers["X-Object-Meta-A"] == "b"
        listing = api("GET", f"/{cont}?format=json").json()
        assert [o["name"] for o in listing] == ["o"]
        assert api("DELETE", f"/{cont}/o").status_code == 204
        assert api("GET", f"/{cont}/o").status_code == 404
        assert _object_files(cluster, datadir, acct, cont, "o") == []


def test_silver_objects_are_placed_by_its_own_ring(cluster, api):
    api("PUT", "/silver3", {"X-Storage-Policy": "silver"})
    assert api("PUT", "/silver3/placed", data=b"x").status_code == 201
    hash_path(cluster, "a")
    ring = Ring(os.path.join(cluster.etc_dir, "object-1.ring.gz"))
    part, nodes = ring.get_nodes(api.account, "silver3", "placed")
    root = cluster.nodes[0]["devices_root"]
    hexhash = hash_path(cluster, api.account, "silver3", "placed")
    for n in nodes:
        hdir = os.path.join(root, n["device"], "objects-1", str(part), hexhash[-3:], hexhash)
        assert glob.glob(os.path.join(hdir, "*.data")), hdir


def test_account_stats_per_policy(api):
    api("PUT", "/stats-gold")
    api("PUT", "/stats-silver", {"X-Storage-Policy": "silver"})
    api("PUT", "/stats-silver/a", data=b"12345")
    api("PUT", "/stats-silver/b", data=b"123")

    def reported():  # container servers report to the account within a second or so
        h = api("HEAD").headers
        return (int(h.get("X-Account-Storage-Policy-Silver-Object-Count", 0)) >= 2
                and int(h.get("X-Account-Storage-Policy-Silver-Bytes-Used", 0)) >= 8 and h)

    h = wait_for(reported, 20, what="per-policy account stats")
    # Every object so far is in one policy or the other: the totals add up.
    assert (int(h["X-Account-Storage-Policy-Silver-Object-Count"])
            + int(h.get("X-Account-Storage-Policy-Policy-0-Object-Count", 0))
            == int(h["X-Account-Object-Count"]))
    assert int(h["X-Account-Storage-Policy-Silver-Container-Count"]) >= 1
    assert int(h["X-Account-Storage-Policy-Policy-0-Container-Count"]) >= 1
    listing = api("GET", "?format=json").json()
    by_name = {c["name"]: c for c in listing}
    assert by_name["stats-silver"]["storage_policy"] == "silver"
    assert by_name["stats-gold"]["storage_policy"] == "Policy-0"


def test_swiftlite_conf_names_the_policies(cluster):
    with open(os.path.join(cluster.etc_dir, "swiftlite.conf")) as f:
        text = f.read()
    assert "[storage-policy:1]" in text and "name = silver" in text
    assert os.path.exists(os.path.join(cluster.etc_dir, "object-1.ring.gz"))


def test_replicator_restores_a_lost_replica_in_policy_1(cluster, api):
    api("PUT", "/silver-rep", {"X-Storage-Policy": "silver"})
    body = os.urandom(5000)
    assert api("PUT", "/silver-rep/obj", data=body).status_code == 201
    files = _object_files(cluster, "objects-1", api.account, "silver-rep", "obj")
    assert len(files) == 3
    lost = files[0]
    os.unlink(lost)
    # The digest still says the object is there: drop the partition's digests as a lost
    # disk would (a new device holds nothing), so the replicator sees the difference.
    part_dir = os.path.dirname(os.path.dirname(os.path.dirname(lost)))
    for name in os.listdir(part_dir):
        if name.startswith("hashes."):
            os.unlink(os.path.join(part_dir, name))
    os.rmdir(os.path.dirname(lost))
    cluster.run_daemon(0, "object-replicator")
    restored = _object_files(cluster, "objects-1", api.account, "silver-rep", "obj")
    assert lost in restored and len(restored) == 3
    with open(lost, "rb") as f:
        assert f.read(len(body)) == body
    # Nothing of policy 1 leaked into policy 0's data dir.
    assert _object_files(cluster, "objects", api.account, "silver-rep", "obj") == []


def test_auditor_quarantines_a_corrupt_policy_1_object(cluster, api):
    api("PUT", "/silver-aud", {"X-Storage-Policy": "silver"})
    assert api("PUT", "/silver-aud/obj", data=b"a" * 4000).status_code == 201
    files = _object_files(cluster, "objects-1", api.account, "silver-aud", "obj")
    bad = files[0]
    with open(bad, "r+b") as f:
        f.write(b"b")  # the body no longer matches its ETag
    cluster.run_daemon(0, "object-auditor")
    assert not os.path.exists(bad)
    dev = bad.split(os.sep + "objects-1" + os.sep)[0]
    assert glob.glob(os.path.join(dev, "quarantined", "objects", "*", "*.data"))
    # The two good replicas still serve it.
    r = api("GET", "/silver-aud/obj")
    assert r.status_code == 200 and r.content == b"a" * 4000


def test_expirer_expires_a_policy_1_object(cluster, api):
    api("PUT", "/silver-exp", {"X-Storage-Policy": "silver"})
    at = int(time.time()) + 1
    assert api("PUT", "/silver-exp/obj", {"X-Delete-At": str(at)},
               data=b"soon").status_code == 201
    assert len(_object_files(cluster, "objects-1", api.account, "silver-exp", "obj")) == 3
    wait_for(lambda: time.time() > at + 0.5, 5, what="X-Delete-At to pass")
    cluster.run_daemon(0, "object-expirer")
    assert _object_files(cluster, "objects-1", api.account, "silver-exp", "obj") == []
    hexhash = hash_path(cluster, api.account, "silver-exp", "obj")
    tombstones = glob.glob(os.path.join(cluster.nodes[0]["devices_root"], "*", "objects-1",
                                        "*", hexhash[-3:], hexhash, "*.ts"))
    assert len(tombstones) == 3
    wait_for(lambda: api("GET", "/silver-exp?format=json").json() == [], 20,
             what="the expired object to leave the listing")
