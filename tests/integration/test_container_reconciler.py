"""Split-brain container policies converge and their objects are moved (issue 39).

A real all-in-one cluster with two replicated policies (Policy-0 and silver). A container
is created on its three replicas at once with different policies (direct signed backend
PUTs, as proxies on either side of a partition would send them); objects are written under
each policy (direct PUTs to each policy's object servers, with the container updates a
proxy would ask for). Then the container-replicator and the container-reconciler run once
each (`swiftlite daemon ... --once`), and:

- every replica reports the first-created replica's policy (not the newest, not the
  majority's);
- every object reads byte for byte through the proxy, its files are in that policy's data
  dirs and gone from the other's; a misplaced DELETE is carried over;
- a second reconciler pass moves nothing;
- an object overwritten while it is being moved keeps its newest version.
"""

from __future__ import annotations

import glob
import json
import os
import time

import pytest
import requests

from swiftlite.common import hashing
from swiftlite.common.config import load_sections
from swiftlite.common.timestamp import Timestamp
from swiftlite.ring import Ring
from tests.cluster import start_cluster, swift_api

POLICY = "X-Backend-Storage-Policy-Index"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("reconciler")), nodes=1, devices=4,
                      replicas=3, part_power=4, extra_args=["--policies", "silver"])
    load_sections(c.nodes[0]["conf"])  # the cluster's [hash] affixes, for ring lookups
    yield c
    c.stop()


@pytest.fixture(scope="module")
def api(cluster):
    return swift_api(cluster)


class Backend:
    """Signed requests straight to the storage servers, as a proxy would send them."""

    def __init__(self, cluster, account: str) -> None:
        self.cluster = cluster
        self.account = account
        etc = cluster.etc_dir
        self.crings = Ring(os.path.join(etc, "container.ring.gz"))
        self.orings = {0: Ring(os.path.join(etc, "object.ring.gz")),
                       1: Ring(os.path.join(etc, "object-1.ring.gz"))}

    @staticmethod
    def url(node: dict, part: int, *names: str) -> str:
        return f"http://{node['ip']}:{node['port']}/{node['device']}/{part}/" + "/".join(names)

    def container_nodes(self, cont: str) -> tuple[int, list[dict]]:
        return self.crings.get_nodes(self.account, cont)

    def put_container(self, cont: str, replica: int, policy: int, ts: Timestamp) -> None:
        part, nodes = self.container_nodes(cont)
        r = requests.put(self.url(nodes[replica], part, self.account, cont),
                         headers={"X-Timestamp": ts.internal, POLICY: str(policy)})
        assert r.status_code == 201, r.text

    def container_policy(self, cont: str, replica: int) -> str:
        part, nodes = self.container_nodes(cont)
        r = requests.head(self.url(nodes[replica], part, self.account, cont))
        assert r.status_code == 204
        return r.headers[POLICY]

    def write(self, cont: str, name: str, policy: int, ts: Timestamp,
              body: bytes | None, update: bool = True) -> None:
        """PUT (or DELETE, body None) one object on every primary of `policy`, telling every
        container replica when `update`."""
        part, nodes = self.orings[policy].get_nodes(self.account, cont, name)
        cpart, cnodes = self.container_nodes(cont)
        headers = {"X-Timestamp": ts.internal, POLICY: str(policy)}
        if update:
            headers.update({
                "X-Container-Host": ",".join(f"{n['ip']}:{n['port']}" for n in cnodes),
                "X-Container-Device": ",".join(n["device"] for n in cnodes),
                "X-Container-Partition": str(cpart)})
        for n in nodes:
            if body is None:
                r = requests.delete(self.url(n, part, self.account, cont, name), headers=headers)
                assert r.status_code in (204, 404), r.text
            else:
                r = requests.put(self.url(n, part, self.account, cont, name), data=body,
                                 headers={**headers, "Content-Type": "image/jpeg"})
                assert r.status_code == 201, r.text

    def rows(self, cont: str, replica: int) -> dict[str, dict]:
        """Every row (tombstones too) of one replica, by name."""
        part, nodes = self.container_nodes(cont)
        r = requests.get(self.url(nodes[replica], part, self.account, cont),
                         headers={"X-Backend-Record-Type": "rows", "X-Backend-Since-Row": "0"})
        assert r.status_code == 200
        import msgpack
        return {row["name"]: row for row in msgpack.unpackb(r.content, raw=False)}


def files(cluster, datadir: str, account: str, cont: str, name: str, ext: str) -> list[str]:
    hexhash = hashing.hash_path(account, cont, name)
    root = cluster.nodes[0]["devices_root"]
    return glob.glob(os.path.join(root, "*", datadir, "*", hexhash[-3:], hexhash, f"*.{ext}"))


def reconciler_status(cluster) -> dict:
    path, = glob.glob(os.path.join(cluster.root, "run", "*", "container-reconciler.json"))
    with open(path) as f:
        return json.load(f)


def test_split_brain_container_policies_converge_and_objects_move(cluster, api):
    be = Backend(cluster, api.account)
    cont = "split"
    now = time.time()
    first = Timestamp.parse(now - 60)
    # Replica 0 was created first, on silver; replicas 1 and 2 later, on Policy-0.
    be.put_container(cont, 0, 1, first)
    be.put_container(cont, 1, 0, Timestamp.parse(now - 50))
    be.put_container(cont, 2, 0, Timestamp.parse(now - 40))
    bodies = {}
    for i in range(4):  # written under the loser, Policy-0
        bodies[f"lost-{i}"] = os.urandom(2000 + i)
        be.write(cont, f"lost-{i}", 0, Timestamp.parse(now - 30 + i), bodies[f"lost-{i}"])
    for i in range(2):  # written under the winner, silver
        bodies[f"kept-{i}"] = os.urandom(3000 + i)
        be.write(cont, f"kept-{i}", 1, Timestamp.parse(now - 20 + i), bodies[f"kept-{i}"])
    # One object written under silver, then deleted by a proxy that saw Policy-0.
    be.write(cont, "gone", 1, Timestamp.parse(now - 15), b"old")
    be.write(cont, "gone", 0, Timestamp.parse(now - 10), None)
    assert {be.container_policy(cont, i) for i in range(3)} == {"0", "1"}

    cluster.run_daemon(0, "container-replicator")
    # Every replica on the first-created one's policy, and holding every row.
    assert [be.container_policy(cont, i) for i in range(3)] == ["1", "1", "1"]
    for i in range(3):
        rows = be.rows(cont, i)
        assert rows["lost-0"]["storage_policy_index"] == 0
        assert rows["kept-0"]["storage_policy_index"] == 1
    assert api("HEAD", f"/{cont}").headers["X-Storage-Policy"] == "silver"

    cluster.run_daemon(0, "container-reconciler")
    status = reconciler_status(cluster)
    assert status["moved"] == 4 and status["tombstoned"] == 1 and status["failures"] == 0
    acct = api.account
    for name, body in bodies.items():
        r = api("GET", f"/{cont}/{name}")
        assert r.status_code == 200 and r.content == body, name
        assert r.headers["Content-Type"] == "image/jpeg"
        assert len(files(cluster, "objects-1", acct, cont, name, "data")) == 3, name
        assert files(cluster, "objects", acct, cont, name, "data") == [], name
    assert api("GET", f"/{cont}/gone").status_code == 404
    assert files(cluster, "objects-1", acct, cont, "gone", "data") == []
    listing = api("GET", f"/{cont}?format=json").json()
    assert sorted(o["name"] for o in listing) == sorted(bodies)
    assert {o["bytes"] for o in listing} == {len(b) for b in bodies.values()}
    for i in range(3):  # every replica's rows now on silver
        assert {r["storage_policy_index"] for r in be.rows(cont, i).values()} == {1}

    cluster.run_daemon(0, "container-reconciler")
    status = reconciler_status(cluster)
    assert status["misplaced"] == 0 and status["moved"] == 0 and status["failures"] == 0


def test_an_object_overwritten_during_the_move_keeps_the_newest(cluster, api):
    """The reconciler read a misplaced row; meanwhile the object changed (the write's own
    container update not yet in): newer in the source policy (moved as itself), or newer in
    the destination (not overwritten by the older copy)."""
    be = Backend(cluster, api.account)
    cont = "split-race"
    now = time.time()
    be.put_container(cont, 0, 1, Timestamp.parse(now - 60))
    be.put_container(cont, 1, 0, Timestamp.parse(now - 50))
    be.put_container(cont, 2, 0, Timestamp.parse(now - 50))
    for name in ("src-newer", "dst-newer"):
        be.write(cont, name, 0, Timestamp.parse(now - 30), b"old " + name.encode())
    be.write(cont, "src-newer", 0, Timestamp.parse(now - 5), b"new in the source",
             update=False)
    be.write(cont, "dst-newer", 1, Timestamp.parse(now - 5), b"new in the destination",
             update=False)
    cluster.run_daemon(0, "container-replicator")
    assert [be.container_policy(cont, i) for i in range(3)] == ["1", "1", "1"]
    cluster.run_daemon(0, "container-reconciler")
    assert api("GET", f"/{cont}/src-newer").content == b"new in the source"
    assert api("GET", f"/{cont}/dst-newer").content == b"new in the destination"
    acct = api.account
    for name in ("src-newer", "dst-newer"):
        assert files(cluster, "objects", acct, cont, name, "data") == []
    rows = be.rows(cont, 0)
    assert rows["src-newer"]["created_at"] == Timestamp.parse(now - 5).internal
    assert rows["src-newer"]["size"] == len(b"new in the source")
    assert {r["storage_policy_index"] for r in rows.values()} == {1}


def test_a_move_killed_midway_is_finished_by_the_next_pass(cluster, api):
    """The states a kill leaves (built by hand): copied but the old copy still there, and
    copied and tombstoned but the row not fixed. The next pass finishes both, copying
    nothing again, and the object reads throughout."""
    be = Backend(cluster, api.account)
    cont = "split-resume"
    now = time.time()
    be.put_container(cont, 0, 1, Timestamp.parse(now - 60))
    be.put_container(cont, 1, 0, Timestamp.parse(now - 50))
    be.put_container(cont, 2, 0, Timestamp.parse(now - 50))
    ts = Timestamp.parse(now - 30)
    for name in ("copied", "tombstoned"):
        be.write(cont, name, 0, ts, name.encode())  # the misplaced row
        be.write(cont, name, 1, ts, name.encode(), update=False)  # step 2 done
    be.write(cont, "tombstoned", 0, Timestamp(ts.ticks, 1), None, update=False)  # step 3
    cluster.run_daemon(0, "container-replicator")
    for name in ("copied", "tombstoned"):
        assert api("GET", f"/{cont}/{name}").content == name.encode()
    cluster.run_daemon(0, "container-reconciler")
    status = reconciler_status(cluster)
    assert status["already"] == 2 and status["moved"] == 0 and status["failures"] == 0
    acct = api.account
    for name in ("copied", "tombstoned"):
        assert api("GET", f"/{cont}/{name}").content == name.encode()
        assert files(cluster, "objects", acct, cont, name, "data") == []
        assert be.rows(cont, 1)[name]["storage_policy_index"] == 1
