"""Container sharding on a real cluster (threshold 2,000 rows): a container grows past it
under a PUT/DELETE storm and is sharded with nothing lost or listed twice; listings across
shards against a model over every listing parameter; counts, redirects, collapse after mass
deletes, DELETE of a sharded container."""

from __future__ import annotations

import json
import threading
from urllib.parse import urlencode, urlsplit
from xml.etree import ElementTree

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from swiftclient import ClientException

from swiftlite.db.listing import Bounds, ListingParams, next_after, walk
from tests.helpers import http_request, wait_for
from tests.sharding_support import (
    THRESHOLD,
    Storm,
    converge,
    listing_names,
    put_many,
    run_daemon,
    sharding_cluster,
    shards,
    split,
)

pytestmark = pytest.mark.xdist_group("sharding")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = sharding_cluster(str(tmp_path_factory.mktemp("sharding")))
    yield c
    c.stop()


def sharder(c, **kw) -> None:
    assert run_daemon(c, "container-sharder", **kw) == 0


def check_listing(conn, container: str, model: dict[str, int]) -> None:
    _, rows = conn.get_container(container, full_listing=True)
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names)), "a name listed twice"
    assert names == sorted(model), (set(names) ^ set(model))
    assert {r["name"]: r["bytes"] for r in rows} == model


def test_storm_while_sharding_loses_nothing(cluster):
    conn = cluster.connection()
    conn.put_container("storm")
    model = {f"{'abcdefgh'[i % 8]}/pre-{i:05d}": 1 for i in range(THRESHOLD + 400)}
    put_many(cluster, "storm", model)
    storm = Storm(cluster, "storm", model, writers=8).start()
    try:
        # Sharding starts with writes already flowing, and they go on until after the
        # root switched to sharded (so updates reach it in every state).
        wait_for(lambda: storm.ops >= 100, 60, what="the storm to get going")
        sharder(cluster)
        state = shards(cluster, "AUTH_test/storm")
        assert state["state"] == "sharded"
        done = storm.ops
        wait_for(lambda: storm.ops >= done + 300, 60, what="writes after the switch")
    finally:
        storm.stop()
    assert storm.ops > 400
    converge(cluster)
    check_listing(conn, "storm", model)
    state = shards(cluster, "AUTH_test/storm")
    assert len(state["ranges"]) >= 2
    assert all(r["state"] == "active" for r in state["ranges"])
    assert sum(r["object_count"] for r in state["ranges"]) == len(model)
    assert all(rep["state"] == "sharded" for rep in state["replicas"])
    head = conn.head_container("storm")
    assert int(head["x-container-object-count"]) == len(model)
    assert int(head["x-container-bytes-used"]) == sum(model.values())
    # Delimiter roll-ups span the shards without repeats.
    assert listing_names(conn, "storm", delimiter="/") == [f"{x}/" for x in "abcdefgh"]
    # The account counts the root once (its shards are hidden from it).
    def account_right():
        h, containers = conn.get_account(full_listing=True)
        names = [x["name"] for x in containers]
        row = next(x for x in containers if x["name"] == "storm")
        return row["count"] == len(model) and all(not n.startswith("\x00") for n in names)

    wait_for(account_right, 30, what="the account's listing to count the shards' rows")


def test_updates_are_redirected_to_shards(cluster):
    """After the switch an object server's update is sent to the shard (301 followed), not
    kept by the root: the sharder has nothing to forward."""
    conn = cluster.connection()
    conn.put_container("redir")
    put_many(cluster, "redir", [f"r{i:05d}" for i in range(300)])
    split(cluster, "AUTH_test/redir", 100)
    put_many(cluster, "redir", [f"r{i:05d}-new" for i in range(50)])
    for i in range(20):
        conn.delete_object("redir", f"r{i:05d}")
    with open(f"{cluster.root}/run/node1/container-sharder.json") as f:
        assert json.load(f)["forwarded_rows"] == 0
    sharder(cluster)
    with open(f"{cluster.root}/run/node1/container-sharder.json") as f:
        assert json.load(f)["forwarded_rows"] == 0  # nothing went into the root
    names = listing_names(conn, "redir")
    assert len(names) == 300 + 50 - 20 == len(set(names))
    assert int(conn.head_container("redir")["x-container-object-count"]) == len(names)


def test_delete_sharded_container(cluster):
    conn = cluster.connection()
    conn.put_container("del")
    names = [f"d{i:05d}" for i in range(250)]
    put_many(cluster, "del", names)
    split(cluster, "AUTH_test/del", 100)
    assert shards(cluster, "AUTH_test/del")["state"] == "sharded"
    with pytest.raises(ClientException) as exc:
        conn.delete_container("del")
    assert exc.value.http_status == 409
    for n in names[:-1]:
        conn.delete_object("del", n)
    sharder(cluster)  # refreshes the counts: one object left
    with pytest.raises(ClientException) as exc:
        conn.delete_container("del")
    assert exc.value.http_status == 409
    conn.delete_object("del", names[-1])
    sharder(cluster)
    conn.delete_container("del")
    with pytest.raises(ClientException) as exc:
        conn.head_container("del")
    assert exc.value.http_status == 404
    # Made again, the container starts empty and unsharded.
    conn.put_container("del")
    conn.put_object("del", "again", b"1")
    assert listing_names(conn, "del") == ["again"]


def test_collapse_after_mass_deletes(cluster):
    conn = cluster.connection()
    conn.put_container("shrink")
    names = [f"s{i:05d}" for i in range(400)]
    put_many(cluster, "shrink", names)
    split(cluster, "AUTH_test/shrink", 100)
    assert shards(cluster, "AUTH_test/shrink")["state"] == "sharded"
    keep = set(names[::20])
    gone = [n for n in names if n not in keep]

    def delete(chunk):
        c = cluster.connection()
        for n in chunk:
            c.delete_object("shrink", n)

    threads = [threading.Thread(target=delete, args=(gone[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keep) < THRESHOLD // 10  # under shrink_threshold
    sharder(cluster)
    state = shards(cluster, "AUTH_test/shrink")
    assert state["state"] == "collapsed"
    assert all(rep["state"] == "collapsed" for rep in state["replicas"])
    assert listing_names(conn, "shrink") == sorted(keep)
    assert int(conn.head_container("shrink")["x-container-object-count"]) == len(keep)
    # Unsharded again: updates land in the root.
    conn.put_object("shrink", "zz-after", b"1")
    conn.delete_object("shrink", sorted(keep)[0])
    assert listing_names(conn, "shrink") == sorted(keep)[1:] + ["zz-after"]


# -- listings across shards against a model ------------------------------------------------
ALPHABET = "ab/-é"
MODEL_NAMES = sorted({a + b + c + d for a in "ab" for b in "ab/-" for c in "ab-é"
                      for d in ("", "a", "/")})


@pytest.fixture(scope="module")
def listed(cluster):
    """A sharded container holding MODEL_NAMES (small shards, so many boundaries)."""
    conn = cluster.connection()
    conn.put_container("model")
    put_many(cluster, "model", MODEL_NAMES)
    assert run_daemon(cluster, "container-sharder") == 0  # under the threshold: unsharded
    assert shards(cluster, "AUTH_test/model")["state"] == "unsharded"
    split(cluster, "AUTH_test/model", 17)
    state = shards(cluster, "AUTH_test/model")
    assert state["state"] == "sharded" and len(state["ranges"]) >= 5
    return conn


def model_listing(p: ListingParams) -> list[str]:
    def fetch(b: Bounds, prefix, limit, reverse):
        def ok(n):
            if b.lo is not None and (n < b.lo or (n == b.lo and not b.lo_incl)):
                return False
            if b.hi is not None and n >= b.hi:
                return False
            if prefix:
                up = next_after(prefix)
                return n >= prefix and (up is None or n < up)
            return True
        rows = [(n, "0000000001.00000", 1, "x", "e") for n in MODEL_NAMES if ok(n)]
        return (rows[::-1] if reverse else rows)[:limit]
    return [r[0] for r in walk(fetch, p)]


opt = st.one_of(st.none(), st.text(ALPHABET, min_size=1, max_size=3))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(marker=opt, end_marker=opt, prefix=opt, delimiter=st.sampled_from([None, "/", "-"]),
       reverse=st.booleans(), limit=st.integers(1, 40),
       fmt=st.sampled_from(["json", "xml", "plain"]))
def test_listing_model(listed, cluster, marker, end_marker, prefix, delimiter, reverse, limit,
                       fmt):
    p = ListingParams(limit=limit, marker=marker, end_marker=end_marker, prefix=prefix,
                      delimiter=delimiter, reverse=reverse, out_format=fmt)
    expected = model_listing(p)
    query = {"format": fmt, "limit": limit, "reverse": "on" if reverse else "off"}
    for k, v in (("marker", marker), ("end_marker", end_marker), ("prefix", prefix),
                 ("delimiter", delimiter)):
        if v is not None:
            query[k] = v
    base = urlsplit(listed.url)
    status, headers, body = http_request(
        f"{base.scheme}://{base.netloc}", "GET",
        f"{base.path}/model?{urlencode(query)}", {"X-Auth-Token": listed.token})
    assert status in (200, 204)
    if fmt == "json":
        got = [r.get("name", r.get("subdir")) for r in json.loads(body)]
    elif fmt == "xml":
        root = ElementTree.fromstring(body)
        assert root.attrib["name"] == "model"
        got = [e.find("name").text if e.tag == "object" else e.attrib["name"] for e in root]
    else:
        got = body.decode().splitlines()
    assert got == expected
    assert int(headers["X-Container-Object-Count"]) == len(MODEL_NAMES)


def test_listing_path_param(listed):
    _, rows = listed.get_container("model", path="a")
    got = [r["name"] for r in rows]
    assert got == model_listing(ListingParams(limit=10000, marker=None, end_marker=None,
                                              prefix="a/", delimiter="/", reverse=False,
                                              out_format="json", path="a/"))
    assert "a/-/" in got and "a/-/a" not in got
