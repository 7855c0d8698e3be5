"""Split-brain container policies with an erasure-coded policy: objects move into and out of
EC (issue 39). A real all-in-one cluster, `--devices 6 --policies silver --ec 4+2 --ec-small
16384`: Policy-0 and silver replicated, `ec` 4+2 with Policy-0 as its small-object tier.

As in test_container_reconciler.py, a container's replicas are created at once with
different policies and objects are written under each straight to the object servers (EC
ones as the proxy writes them: six archives with footers, then the commit); then the
container-replicator and the container-reconciler run once each, and every object reads byte
for byte through the proxy (whose EC reader is not the reconciler's), its files only in its
container's policy's data dir (a small one moved into `ec` in its tier, a large one's tier
tombstoned).
"""

from __future__ import annotations

import hashlib
import os
import time

import pytest
import requests

from swiftlite.common.config import load_sections
from swiftlite.common.ec import ECScheme, Encoder
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine.ec_archive import COMMIT_HEADER, pack_footer
from swiftlite.ring import Ring
from tests.cluster import start_cluster, swift_api
from tests.integration.test_container_reconciler import (
    POLICY,
    Backend,
    files,
    reconciler_status,
)

SILVER, EC = 1, 2
LIMIT = 16384


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("reconciler-ec")), nodes=1, devices=6,
                      replicas=3, part_power=4,
                      extra_args=["--policies", "silver", "--ec", "4+2",
                                  "--ec-small", str(LIMIT)])
    load_sections(c.nodes[0]["conf"])
    yield c
    c.stop()


@pytest.fixture(scope="module")
def api(cluster):
    return swift_api(cluster)


def write_ec(be: Backend, cont: str, name: str, ts: Timestamp, body: bytes) -> None:
    """Six archives pending on the EC primaries, then committed, the commits telling every
    container replica (as the proxy's PUT does)."""
    scheme = ECScheme(4, 2)
    enc = Encoder(scheme)
    pieces = [a + b for a, b in zip(enc.feed(body), enc.finish(), strict=True)]
    part, nodes = be.orings[EC].get_nodes(be.account, cont, name)
    cpart, cnodes = be.container_nodes(cont)
    base = {"X-Timestamp": ts.internal, POLICY: str(EC)}
    for i, n in enumerate(nodes):
        r = requests.put(be.url(n, part, be.account, cont, name),
                         data=pieces[i] + pack_footer(enc.archive_info(i)),
                         headers={**base, "Content-Type": "image/png",
                                  "X-Object-Meta-Kind": "moved"})
        assert r.status_code == 201, r.text
    for n in nodes:
        r = requests.post(be.url(n, part, be.account, cont, name), headers={
            **base, COMMIT_HEADER: "yes",
            "X-Container-Host": ",".join(f"{c['ip']}:{c['port']}" for c in cnodes),
            "X-Container-Device": ",".join(c["device"] for c in cnodes),
            "X-Container-Partition": str(cpart)})
        assert r.status_code == 201, r.text


def split(be: Backend, cont: str, first: int, later: int) -> float:
    """Replica 0 created first under `first`, replicas 1 and 2 after under `later`."""
    now = time.time()
    be.put_container(cont, 0, first, Timestamp.parse(now - 60))
    be.put_container(cont, 1, later, Timestamp.parse(now - 50))
    be.put_container(cont, 2, later, Timestamp.parse(now - 40))
    return now


def test_objects_move_into_and_out_of_an_ec_policy(cluster, api):
    be = Backend(cluster, api.account)
    be.orings[EC] = Ring(os.path.join(cluster.etc_dir, f"object-{EC}.ring.gz"))
    acct = api.account
    # "into-ec": the EC replica came first; objects written under silver move into EC, the
    # small ones into its tier (Policy-0).
    now = split(be, "into-ec", EC, SILVER)
    sizes = {"rep-0": 0, "rep-1": 1, "rep-2": 5000, "rep-3": LIMIT + 1, "rep-4": 1_500_000}
    into = {name: os.urandom(size) for name, size in sizes.items()}
    for i, (name, body) in enumerate(into.items()):
        be.write("into-ec", name, SILVER, Timestamp.parse(now - 30 + i), body)
    write_ec(be, "into-ec", "native", Timestamp.parse(now - 20), b"already EC" * 2000)
    # "out-of-ec": the silver replica came first; EC objects (and one of its tier's) move out.
    now = split(be, "out-of-ec", SILVER, EC)
    out = {f"ec-{i}": os.urandom(size) for i, size in enumerate((1, 70_000, 2_000_001))}
    for i, (name, body) in enumerate(out.items()):
        write_ec(be, "out-of-ec", name, Timestamp.parse(now - 30 + i), body)
    write_ec(be, "out-of-ec", "gone", Timestamp.parse(now - 15), b"old" * 10_000)
    be.write("out-of-ec", "gone", SILVER, Timestamp.parse(now - 10), None)  # deleted there
    be.write("out-of-ec", "tiny", 0, Timestamp.parse(now - 5), b"in the tier")

    cluster.run_daemon(0, "container-replicator")
    assert api("HEAD", "/into-ec").headers["X-Storage-Policy"] == "ec"
    assert api("HEAD", "/out-of-ec").headers["X-Storage-Policy"] == "silver"
    cluster.run_daemon(0, "container-reconciler")
    status = reconciler_status(cluster)
    assert status["moved"] == len(into) + len(out) + 1, status
    assert status["failures"] == 0 and status["unsupported"] == 0 \
        and status["unavailable"] == 0, status
    # The first container replica's pass fixed every replica's rows (a small object's tier
    # row too, which a tie with its misplaced row would lose): none was met again.
    assert status["already"] == 0, status

    for name, body in into.items():
        r = api("GET", f"/into-ec/{name}")
        assert r.status_code == 200 and r.content == body, name
        assert r.headers["Content-Type"] == "image/jpeg"
        small = len(body) <= LIMIT
        assert len(files(cluster, f"objects-{EC}", acct, "into-ec", name, "data")) == \
            (0 if small else 6), name
        assert len(files(cluster, "objects", acct, "into-ec", name, "data")) == \
            (3 if small else 0), name
        if not small:  # the tier tombstoned at its time, as a large PUT leaves it
            assert len(files(cluster, "objects", acct, "into-ec", name, "ts")) >= 2, name
        assert files(cluster, "objects-1", acct, "into-ec", name, "data") == [], name
    assert api("GET", "/into-ec/native").content == b"already EC" * 2000
    for name, body in out.items():
        r = api("GET", f"/out-of-ec/{name}")
        assert r.status_code == 200 and r.content == body, name
        assert r.headers["Content-Type"] == "image/png"
        assert r.headers["X-Object-Meta-Kind"] == "moved"
        assert r.headers["Etag"].strip('"') == hashlib.md5(body).hexdigest()
        assert len(files(cluster, "objects-1", acct, "out-of-ec", name, "data")) == 3, name
        assert files(cluster, f"objects-{EC}", acct, "out-of-ec", name, "data") == [], name
        assert not any(h.startswith("X-Object-Sysmeta-Ec") for h in r.headers), name
    assert api("GET", "/out-of-ec/tiny").content == b"in the tier"
    assert files(cluster, "objects", acct, "out-of-ec", "tiny", "data") == []
    assert api("GET", "/out-of-ec/gone").status_code == 404
    out["tiny"] = b"in the tier"
    for cont, bodies in (("into-ec", {**into, "native": b"already EC" * 2000}),
                         ("out-of-ec", out)):
        listing = api("GET", f"/{cont}?format=json").json()
        assert {o["name"]: o["bytes"] for o in listing} == \
            {n: len(b) for n, b in bodies.items()}, cont
    rows = be.rows("into-ec", 0)
    assert {n: r["storage_policy_index"] for n, r in rows.items()} == \
        {n: 0 if len(b) <= LIMIT else EC for n, b in {**into, "native": b"x" * 20000}.items()}
    assert {r["storage_policy_index"] for r in be.rows("out-of-ec", 0).values()} == {SILVER}

    cluster.run_daemon(0, "container-reconciler")
    status = reconciler_status(cluster)
    assert status["misplaced"] == 0 and status["moved"] == 0 and status["failures"] == 0
