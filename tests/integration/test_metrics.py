"""Prometheus metrics: every server answers /metrics in the text format, a scrape on any
worker sums every worker's counters, the object server reports its node's daemons and
devices, and nobody outside metrics_allowed_networks can read them.
"""

from __future__ import annotations

import configparser
import http.client
import urllib.parse
import uuid

import pytest
import swiftclient
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster import Cluster, start_cluster
from tests.helpers import start_proxy_variant, wait_for

WORKERS = 3


def get(port: int, path: str, method: str = "GET", headers: dict | None = None,
        body: bytes | None = None) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def samples(port: int, name: str, **labels: str) -> list[tuple[dict, float]]:
    status, body = get(port, "/metrics")
    assert status == 200
    out = []
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                out.append((s.labels, s.value))
    return out


def total(port: int, name: str, **labels: str) -> float:
    return sum(v for _, v in samples(port, name, **labels))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("metrics")), nodes=1, devices=3,
                      replicas=3, part_power=4)
    yield c
    c.stop()


@pytest.mark.slow
def test_put_counters_sum_over_every_worker(cluster):
    proxy = start_proxy_variant(cluster, "metrics", {"workers": str(WORKERS)})
    try:
        url, token = swiftclient.get_auth(cluster.auth_url, "test:tester", "testing")
        acct = urllib.parse.urlsplit(url).path
        cont = f"{acct}/m-{uuid.uuid4().hex[:6]}"
        auth = {"X-Auth-Token": token}
        assert get(proxy.port, cont, "PUT", auth)[0] == 201
        for i in range(100):  # a fresh connection each: the kernel spreads them
            c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            c.request("PUT", f"{cont}/o{i}", body=b"x" * 1000, headers=auth)
            r = c.getresponse()
            r.read()
            assert r.status == 201
            c.close()
        # Workers add what they counted to the shared values within a second.
        wait_for(lambda: total(proxy.port, "swiftlite_request_duration_seconds_count",
                               server="proxy-server", method="PUT", type="object") >= 100,
                 10, what="every worker's PUTs in the shared metrics")
        # Any worker's scrape sums them all, however many times we ask.
        for _ in range(6):
            assert total(proxy.port, "swiftlite_requests_total", server="proxy-server",
                         method="PUT", type="object", status="201") == 100
        assert total(proxy.port, "swiftlite_request_bytes_total", server="proxy-server",
                     method="PUT", type="object") == 100 * 1000
        assert total(proxy.port, "swiftlite_request_duration_seconds_count",
                     server="proxy-server", method="PUT", type="object") == 100
        # The object server counts them too (one grouped PUT per object for its 3 replicas).
        obj_port = cluster.nodes[0]["servers"]["object"]["port"]
        wait_for(lambda: total(obj_port, "swiftlite_requests_total", server="object-server",
                               method="PUT", type="object") >= 100, 10,
                 what="the object server's PUTs")
    finally:
        proxy.stop()


def test_the_object_server_counts_the_files_it_drops_from_the_page_cache(tmp_path):
    """With a window of one byte every committed replica file is dropped from the page
    cache once its batch is answered, and counted; the objects stay whole."""
    c = start_cluster(str(tmp_path / "window"), nodes=1, devices=3, replicas=3, part_power=4)
    try:
        c.kill_node(0, roles=["object"])
        conf = configparser.ConfigParser(interpolation=None)
        conf.read(c.nodes[0]["conf"])
        conf["object-server"]["written_cache_size"] = "1"
        with open(c.nodes[0]["conf"], "w") as f:
            conf.write(f)
        c.start_node(0, roles=["object"])
        conn = c.connection()
        conn.put_container("window")
        for i in range(5):
            conn.put_object("window", f"o{i}", b"%d" % i * 20000)
        port = c.nodes[0]["servers"]["object"]["port"]
        name = "swiftlite_page_cache_dropped_files_total"
        wait_for(lambda: total(port, name) >= 15, 10, what="15 replica files dropped")
        assert total(port, name) == 15  # 5 objects x 3 replicas, each once
        for i in range(5):
            assert conn.get_object("window", f"o{i}")[1] == b"%d" % i * 20000
    finally:
        c.stop()


@pytest.mark.slow
def test_object_server_reports_its_node(cluster):
    conn = cluster.connection()
    conn.put_container("node-metrics")
    conn.put_object("node-metrics", "o", b"data")
    cluster.run_daemon(0, "object-replicator")
    obj_port = cluster.nodes[0]["servers"]["object"]["port"]
    passes = samples(obj_port, "swiftlite_daemon_last_pass_duration_seconds",
                     daemon="object-replicator")
    assert len(passes) == 1
    assert samples(obj_port, "swiftlite_daemon_last_pass_items", daemon="object-replicator",
                   counter="partitions")
    devices = {labels["device"] for labels, _ in samples(obj_port, "swiftlite_device_bytes",
                                                         kind="total")}
    assert devices == {"d1", "d2", "d3"}
    wait_for(lambda: total(obj_port, "swiftlite_batch_commit_objects_count") +
             total(obj_port, "swiftlite_requests_total", method="PUT") > 0, 10,
             what="the object server's PUTs")
    # The pool's gauges are sampled once a second.
    wait_for(lambda: total(obj_port, "swiftlite_threadpool_threads") >= 1, 10,
             what="the thread pool's gauge")


def test_container_server_reports_its_commit_rounds(cluster):
    """Object updates reach the container server's device rounds (swiftlite.db
    .device_commit): every update of the PUTs is counted in some round."""
    port = cluster.nodes[0]["servers"]["container"]["port"]
    before = total(port, "swiftlite_db_commit_round_updates_sum")
    conn = cluster.connection()
    conn.put_container("round-metrics")
    for i in range(10):
        conn.put_object("round-metrics", f"o{i}", b"x")
    # 10 PUTs x 3 replicas, each replica's update to its own container DB (the object
    # servers' updates may come in a moment after the 201s).
    wait_for(lambda: total(port, "swiftlite_db_commit_round_updates_sum") - before >= 30,
             10, what="30 updates counted in commit rounds")
    assert total(port, "swiftlite_db_commit_round_seconds_count") >= 1
    assert total(port, "swiftlite_db_commit_round_dbs_sum") >= 1


def test_request_types():
    from swiftlite.common.observe.metrics import request_type

    assert request_type("proxy-server", "/v1/AUTH_a") == "account"
    assert request_type("proxy-server", "/v1/AUTH_a/c/") == "container"
    assert request_type("proxy-server", "/v1/AUTH_a/c/o/with/slashes") == "object"
    assert request_type("proxy-server", "/auth/v1.0") == "other"
    assert request_type("object-server", "/d1/12/AUTH_a/c/o/x") == "object"
    assert request_type("container-server", "/d1/12/AUTH_a/c") == "container"
    assert request_type("account-server", "/d1/12/AUTH_a") == "account"


@pytest.mark.slow
def test_scrapes_only_from_allowed_networks(cluster):
    proxy = start_proxy_variant(cluster, "private-metrics",
                                {"metrics_allowed_networks": "10.0.0.0/8"})
    try:
        wait_for(lambda: get(proxy.port, "/healthcheck")[0] == 200, 10)
        status, body = get(proxy.port, "/metrics")
        assert status == 403 and b"swiftlite_requests" not in body
    finally:
        proxy.stop()


@pytest.mark.slow
def test_grafana_dashboard_asks_only_for_exported_series(cluster):
    import json
    import os
    import re

    conn = cluster.connection()
    conn.put_container("dash")
    conn.put_object("dash", "o", b"x")
    conn.get_object("dash", "o")
    cluster.run_daemon(0, "object-auditor")
    servers = cluster.nodes[0]["servers"]
    # The hot-object cache's series come from a proxy with the cache on (a miss, a fill).
    cached = start_proxy_variant(cluster, "dash-cache", {"object_cache_size": "1048576"})
    url = urllib.parse.urlsplit(conn.url)
    status, _ = get(cached.port, f"{url.path}/dash/o",
                    headers={"X-Auth-Token": conn.token})
    assert status == 200

    def exported() -> set[str]:
        names: set[str] = set()
        for port in (cluster.info["proxy"]["port"], servers["object"]["port"],
                     servers["container"]["port"], cached.port):
            status, body = get(port, "/metrics")
            assert status == 200
            for family in text_string_to_metric_families(body.decode()):
                names.update(s.name for s in family.samples)
        return names

    path = os.path.join(os.path.dirname(__file__), "..", "..", "etc", "grafana-dashboard.json")
    with open(path) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    wanted = {m for e in exprs for m in re.findall(r"swiftlite_[a-z_]+", e)}
    assert len(wanted) >= 10
    # Some counts reach their series within a second (the metrics sampler).
    try:
        wait_for(lambda: wanted <= exported(), 10, what="every series the dashboard asks for")
    finally:
        cached.stop()
