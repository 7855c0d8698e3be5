"""An erasure-coded policy's small objects kept by its replicated tier:
`swiftlite up --devices 6 --ec 4+2 --ec-small 16384` (policy `ec` with small_object_policy =
Policy-0, small_object_size = 16384). An object of at most 16 KiB in an `ec` container is
three replicas under objects/; a larger one six archives under objects-1/. A large write
tombstones the tier before it answers, so a tier hit is served as it is (no archive asked);
a small write clears older archives in the background.
"""

from __future__ import annotations

import glob
import json
import os
import random

import pytest
import requests

from swiftlite.common import hashing
from swiftlite.common.config import load_sections
from tests.cluster import start_cluster, swift_api
from tests.helpers import wait_for

LIMIT = 16384


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("ecsmall")), nodes=1, devices=6,
                      replicas=3, part_power=6,
                      extra_args=["--ec", "4+2", "--ec-small", str(LIMIT)])
    yield c
    c.stop()


@pytest.fixture(scope="module")
def api(cluster):
    call = swift_api(cluster)
    assert call("PUT", "/tiered", {"X-Storage-Policy": "ec"}).status_code == 201
    return call


def body_of(size: int, seed: int = 0) -> bytes:
    return random.Random(seed * 7919 + size).randbytes(size)


def files(cluster, api, name: str, datadir: str, ext: str = "data") -> list[str]:
    load_sections(cluster.nodes[0]["conf"])  # the cluster's [hash] affixes
    h = hashing.hash_path(api.account, "tiered", name)
    return sorted(glob.glob(os.path.join(cluster.nodes[0]["devices_root"], "*", datadir, "*",
                                         h[-3:], h, f"*.{ext}")))


def replicas(cluster, api, name):
    return files(cluster, api, name, "objects")


def archives(cluster, api, name):
    return files(cluster, api, name, "objects-1")


def test_info_shows_the_tier(cluster):
    pols = requests.get(cluster.proxy_url + "/info", timeout=10).json()["swift"]["policies"]
    assert next(p for p in pols if p["name"] == "ec")["small_object_size"] == LIMIT


@pytest.mark.parametrize("size,tiered", [(0, True), (1, True), (LIMIT, True),
                                         (LIMIT + 1, False), (100_000, False)])
def test_objects_go_by_size(cluster, api, size, tiered):
    name = f"by-size-{size}"
    body = body_of(size)
    assert api("PUT", f"/tiered/{name}", data=body,
               headers={"X-Object-Meta-Kind": "k"}).status_code == 201
    # A PUT answers at a quorum; the last copies or archives may land just after.
    wait_for(lambda: len(replicas(cluster, api, name)) == (3 if tiered else 0) and
             len(archives(cluster, api, name)) == (0 if tiered else 6), 20,
             what=f"every copy of {name} where its size sends it")
    r = api("GET", f"/tiered/{name}")
    # A small write leaves EC untouched where it had nothing (no tombstone); a large one
    # tombstoned the tier on a quorum before it answered (the third may land just after).
    tombs = files(cluster, api, name, "objects-1" if tiered else "objects", "ts")
    assert tombs == [] if tiered else len(tombs) >= 2
    assert r.status_code == 200 and r.content == body
    assert r.headers["X-Object-Meta-Kind"] == "k"
    head = api("HEAD", f"/tiered/{name}")
    assert int(head.headers["Content-Length"]) == size
    row = next(o for o in api("GET", "/tiered", params={"format": "json",
                                                         "prefix": name}).json()
               if o["name"] == name)
    assert row["bytes"] == size and row["hash"] == head.headers["ETag"]


def test_a_chunked_body_goes_by_what_arrives(cluster, api):
    for name, size in (("chunked-small", 5000), ("chunked-big", LIMIT + 5000)):
        body = body_of(size, 3)
        r = api("PUT", f"/tiered/{name}", data=iter([body[:1000], body[1000:]]))
        assert r.status_code == 201
        assert bool(replicas(cluster, api, name)) == (size <= LIMIT)
        assert bool(archives(cluster, api, name)) == (size > LIMIT)
        assert api("GET", f"/tiered/{name}").content == body


def test_ranges_and_conditions_on_a_tiered_object(api):
    body = body_of(3000, 5)
    etag = api("PUT", "/tiered/ranged", data=body).headers["ETag"]
    r = api("GET", "/tiered/ranged", {"Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == body[100:200]
    assert api("GET", "/tiered/ranged", {"If-None-Match": etag}).status_code == 304
    assert api("GET", "/tiered/ranged", {"If-Match": "nope"}).status_code == 412
    assert api("GET", "/tiered/ranged", {"Range": "bytes=5000-"}).status_code == 416


def test_overwrites_across_the_limit_read_newest_and_clear_the_old_place(cluster, api):
    small, big = body_of(2000, 7), body_of(50_000, 7)
    assert api("PUT", "/tiered/grows", data=small).status_code == 201
    assert api("PUT", "/tiered/grows", data=big).status_code == 201
    # The tier's copy was tombstoned on a quorum before the PUT answered.
    assert len(files(cluster, api, "grows", "objects", "ts")) >= 2
    assert api("GET", "/tiered/grows").content == big
    wait_for(lambda: not replicas(cluster, api, "grows")
             and len(files(cluster, api, "grows", "objects", "ts")) == 3,
             what="the tier's third replica tombstoned")
    assert api("PUT", "/tiered/grows", data=small).status_code == 201
    assert api("GET", "/tiered/grows").content == small
    wait_for(lambda: not archives(cluster, api, "grows"), what="the old archives cleared")
    assert api("GET", "/tiered/grows").content == small
    listing = api("GET", "/tiered", params={"format": "json", "prefix": "grows"}).json()
    assert [o["bytes"] for o in listing] == [len(small)]


def test_the_newest_place_wins_when_a_clear_was_missed(cluster, api):
    """Old archives left under a newer small object (the background clear lost, or an
    archive that missed it brought back) never hide the newer write."""
    old, new = body_of(40_000, 11), body_of(1000, 11)
    assert api("PUT", "/tiered/stale-ec", data=old).status_code == 201
    saved = {p: open(p, "rb").read() for p in archives(cluster, api, "stale-ec")}
    assert api("PUT", "/tiered/stale-ec", data=new).status_code == 201
    wait_for(lambda: not archives(cluster, api, "stale-ec"), what="the archives cleared")
    for ts in files(cluster, api, "stale-ec", "objects-1", "ts"):
        os.unlink(ts)
    for path, data in saved.items():  # the old archives, as if the clear never came
        with open(path, "wb") as f:
            f.write(data)
    assert api("GET", "/tiered/stale-ec").content == new
    assert int(api("HEAD", "/tiered/stale-ec").headers["Content-Length"]) == len(new)


def test_a_tier_that_cannot_take_the_tombstone_fails_the_write(cluster, api):
    """Reads trust the tier, so a large PUT or a DELETE whose tombstone the tier's replicas
    (and their handoffs) cannot store answers 503, not a success a stale copy would hide.
    Every device's objects/ (the tier's) is a file for the while."""
    small = body_of(1000, 13)
    assert api("PUT", "/tiered/no-tomb", data=small).status_code == 201
    devs = glob.glob(os.path.join(cluster.nodes[0]["devices_root"], "*"))
    moved = []
    for d in devs:
        if os.path.isdir(os.path.join(d, "objects")):  # a device may hold no object yet
            os.rename(os.path.join(d, "objects"), os.path.join(d, "objects.away"))
            moved.append(d)
        open(os.path.join(d, "objects"), "wb").close()
    try:
        assert api("PUT", "/tiered/no-tomb", data=body_of(40_000, 13)).status_code == 503
        assert api("DELETE", "/tiered/no-tomb").status_code == 503
    finally:
        for d in devs:
            os.unlink(os.path.join(d, "objects"))
        for d in moved:
            os.rename(os.path.join(d, "objects.away"), os.path.join(d, "objects"))
    # The tier's copy is what reads see (the failed PUT's archives are its to reclaim).
    assert api("GET", "/tiered/no-tomb").content == small
    assert api("DELETE", "/tiered/no-tomb").status_code == 204
    assert api("GET", "/tiered/no-tomb").status_code == 404


def test_post_and_delete_reach_either_place(cluster, api):
    for name, size in (("meta-small", 100), ("meta-big", 30_000)):
        assert api("PUT", f"/tiered/{name}", data=body_of(size)).status_code == 201
        assert api("POST", f"/tiered/{name}", {"X-Object-Meta-Color": "red"}).status_code == 202
        assert api("HEAD", f"/tiered/{name}").headers["X-Object-Meta-Color"] == "red"
        assert api("DELETE", f"/tiered/{name}").status_code == 204
        assert api("GET", f"/tiered/{name}").status_code == 404
        assert api("HEAD", f"/tiered/{name}").status_code == 404
        assert api("POST", f"/tiered/{name}", {"X-Object-Meta-A": "b"}).status_code == 404
    assert api("DELETE", "/tiered/never-was").status_code == 404
    names = {o["name"] for o in api("GET", "/tiered", params={"format": "json"}).json()}
    assert not names & {"meta-small", "meta-big"}


def test_if_none_match_sees_both_places(api):
    assert api("PUT", "/tiered/once-big", data=body_of(30_000)).status_code == 201
    assert api("PUT", "/tiered/once-big", data=b"tiny",
               headers={"If-None-Match": "*"}).status_code == 412
    assert api("PUT", "/tiered/once-small", data=b"tiny").status_code == 201
    assert api("PUT", "/tiered/once-small", data=body_of(30_000),
               headers={"If-None-Match": "*"}).status_code == 412
    assert api("PUT", "/tiered/once-new", data=b"tiny",
               headers={"If-None-Match": "*"}).status_code == 201
    assert api("GET", "/tiered/once-big").content == body_of(30_000)


def test_the_reconciler_leaves_tiered_rows_alone(cluster, api):
    for i in range(3):
        api("PUT", f"/tiered/rec-{i}", data=body_of(500, i))
    cluster.run_daemon(0, "container-reconciler")
    path, = glob.glob(os.path.join(cluster.root, "run", "*", "container-reconciler.json"))
    with open(path) as f:
        status = json.load(f)
    assert status["misplaced"] == 0 and status["unsupported"] == 0 \
        and status["failures"] == 0, status
    for i in range(3):
        assert api("GET", f"/tiered/rec-{i}").content == body_of(500, i)
        assert len(replicas(cluster, api, f"rec-{i}")) == 3
