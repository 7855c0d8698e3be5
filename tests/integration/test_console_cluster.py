"""The console's operator report (`proxy/console/cluster.py`): a proxy in this process, with
its metrics on, in front of a real two-node all-in-one cluster on loopback."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

import aiohttp
import pytest
from aiohttp import web, web_protocol, web_response

from swiftlite.common.config import load_sections
from swiftlite.common.observe import metrics
from swiftlite.common.observe.logs import RequestLogger
from swiftlite.proxy.console.cluster import cluster_report
from swiftlite.proxy.server import PROXY, create_app
from swiftlite.ring import Ring
from tests.cluster import Cluster, start_cluster
from tests.helpers import async_wait_for, free_port, healthy, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_cluster")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("console")), nodes=2, devices=2,
                      replicas=2, part_power=6)
    yield c
    c.stop()


@pytest.fixture
def proxy_metrics(tmp_path, monkeypatch):
    """common/observe/metrics.py set up in this process as `serve` sets it up in a worker, and put
    back afterwards: other tests in this process must not count into our files."""
    from prometheus_client import REGISTRY, values

    # Undone at teardown (metrics.prepare sets it in os.environ).
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    # prometheus_client picks its value class when first imported, which in this process
    # was before there was a multiprocess directory; `values.ValueClass` is its hook for this.
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())
    for name, empty in (("_state", {}), ("_m", {}), ("_samplers", []), ("_tallies", {}),
                        ("_requests", {}), ("_flushed", {}), ("_sampler_pid", 0)):
        monkeypatch.setattr(metrics, name, empty)
    yield str(tmp_path / "metrics")
    for metric in metrics._m.values():
        REGISTRY.unregister(metric)


@pytest.fixture
async def proxy(cluster, proxy_metrics, monkeypatch):
    """(the Proxy, its URL): served here, its requests counted as a worker counts them."""
    # The proxy app patches aiohttp's parser and 204 framing for its process.
    monkeypatch.setattr(web_protocol, "HttpRequestParser", web_protocol.HttpRequestParser)
    monkeypatch.setattr(web_response, "should_remove_content_length",
                        web_response.should_remove_content_length)
    conf = load_sections(os.path.join(cluster.etc_dir, "proxy.conf"))["proxy-server"]
    conf["metrics_dir"] = proxy_metrics
    metrics.prepare(conf, "proxy-server")
    metrics.init()
    app = create_app(conf)
    runner = web.AppRunner(app, access_log_class=RequestLogger)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield app[PROXY], f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def ring_devices(cluster: Cluster, kind: str) -> dict[str, set[str]]:
    """"ip:port" -> the device names `kind`'s ring places there."""
    out: dict[str, set[str]] = {}
    for d in Ring.load(os.path.join(cluster.etc_dir, f"{kind}.ring.gz")).devs:
        if d is not None:
            out.setdefault(f"{d['ip']}:{d['port']}", set()).add(d["device"])
    return out


def recon(cluster: Cluster, node: int) -> dict:
    port = cluster.nodes[node]["servers"]["object"]["port"]
    # urllib requests to storage servers are signed by tests/backend_signing.py
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/recon", timeout=10) as r:
        return json.load(r)


async def test_report_lists_rings_servers_daemons_and_counts_requests(cluster, proxy):
    core, url = proxy
    # A daemon's status file as common/runtime/daemon.py writes it after a pass.
    status_dir = recon(cluster, 0)["status_dir"]
    os.makedirs(status_dir, exist_ok=True)  # made by the first daemon; none runs here
    status = os.path.join(status_dir, "test-replicator.json")
    with open(status, "w") as f:
        json.dump({"daemon": "test-replicator", "pid": os.getpid(), "start": time.time() - 3,
                   "duration": 2.5, "partitions": 64, "failures": 1}, f)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/auth/v1.0", headers={
                    "X-Auth-User": cluster.user, "X-Auth-Key": cluster.key}) as r:
                assert r.status == 200
                token, storage = r.headers["X-Auth-Token"], r.headers["X-Storage-Url"]
            async with s.put(f"{storage}/console", headers={"X-Auth-Token": token}) as r:
                assert r.status in (201, 202)
            async with s.put(f"{storage}/console/o", data=b"x" * 1000,
                             headers={"X-Auth-Token": token}) as r:
                assert r.status == 201

        # The access log counts a request once its answer is sent: it may come after ours.
        report = await async_wait_for(lambda: _report_when(core, _two_puts), 10,
                                      what="the PUTs counted")
    finally:
        os.unlink(status)
    assert json.loads(json.dumps(report, allow_nan=False)) == report
    assert abs(report["generated"] - time.time()) < 30

    m = report["metrics"]
    assert m["enabled"] and m["requests"]["PUT"] >= 2 and m["requests"]["GET"] >= 1
    assert m["bytes_in"] >= 1000 and m["errors"]["5xx"] == 0
    assert m["latency_ms"]["p50"] is not None and m["latency_ms"]["p99"] is not None

    rings = {r["name"]: r for r in report["rings"]}
    assert set(rings) == {"object", "container", "account"}
    for kind, r in rings.items():
        ring = Ring.load(os.path.join(cluster.etc_dir, f"{kind}.ring.gz"))
        assert (r["replicas"], r["part_power"], r["partitions"]) == (2, 6, 64)
        assert r["devices"] == len([d for d in ring.devs if d]) == 4
        assert isinstance(r["balance"], float) and 0 <= r["balance"] < 50, r
        assert r["md5"] and len(r["md5"]) == 32 and r["zones"] >= 1
    assert rings["object"]["policy"] == "Policy-0" and rings["container"]["policy"] is None

    servers = {s["host"]: s for s in report["servers"]}
    expected: dict[str, set[str]] = {}
    for kind in ("object", "container", "account"):
        for host, names in ring_devices(cluster, kind).items():
            expected.setdefault(host, set()).update(names)
            assert kind in servers[host]["roles"]
    assert set(servers) == set(expected) and len(servers) == 6
    for host, s in servers.items():
        assert s["ok"] and s["error"] is None, s
        assert {d["name"] for d in s["devices"]} == expected[host]
        for d in s["devices"]:
            assert d["mounted"] and d["total"] > 0 and 0 <= d["used"] <= d["total"]
            assert d["weight"] and d["async_pending"] >= 0 and d["quarantined"] == 0
        # Two replicas of 64 partitions over four devices, two of them on this server.
        role = s["roles"][0]
        assert sum(d["partitions"][role] for d in s["devices"]) == 64, s["devices"]
    node = cluster.nodes[0]
    daemons = servers[f"{node['ip']}:{node['servers']['object']['port']}"]["daemons"]
    test_daemon = next(d for d in daemons if d["name"] == "test-replicator")
    assert test_daemon["alive"] and test_daemon["failures"] == 1
    assert test_daemon["last_duration"] == 2.5 and test_daemon["last_pass_age"] >= 0
    assert "partitions=64" in test_daemon["progress"] and not test_daemon["configured"]
    assert len(report["problems"]) == len(set(report["problems"]))  # each host's once


def _two_puts(report: dict) -> bool:
    return report["metrics"]["requests"].get("PUT", 0) >= 2


async def _report_when(core, cond):
    report = await cluster_report(core)
    return report if cond(report) else None


async def test_error_limited_node_is_listed(cluster, proxy):
    core, _ = proxy
    node = next(d for d in core.object_ring.devs if d)
    for i in range(core.limiter.limit):
        core.limiter.error(node, "test fault", fingerprint=("GET", f"/a/c/o{i}"))
    before = time.time()
    report = await cluster_report(core)
    key = f"{node['ip']}:{node['port']}/{node['device']}"
    entry = next(e for e in report["error_limited"] if e["node"] == key)
    assert entry["errors"] == core.limiter.limit and entry["limited"]
    assert before < entry["until"] <= before + core.limiter.interval + 1


async def test_a_hung_and_a_dead_server_do_not_hold_the_report(cluster, proxy):
    """Runs last: it leaves node2's account server dead."""
    core, _ = proxy
    node = cluster.nodes[1]
    hung = node["servers"]["container"]
    dead = node["servers"]["account"]
    os.killpg(hung["pid"], signal.SIGSTOP)  # the kernel still accepts: no answer comes
    try:
        cluster.kill_node(1, roles=["account"])
        start = time.monotonic()
        report = await cluster_report(core, timeout=1.0)
        took = time.monotonic() - start
    finally:
        os.killpg(hung["pid"], signal.SIGCONT)
    assert took < 1.5, took
    servers = {s["host"]: s for s in report["servers"]}
    bad = {f"{node['ip']}:{hung['port']}", f"{node['ip']}:{dead['port']}"}
    for host, s in servers.items():
        if host in bad:
            assert not s["ok"] and s["error"], s
            assert s["devices"] and all(d["mounted"] is None for d in s["devices"])
            assert any(p.startswith(host) for p in report["problems"])
        else:
            assert s["ok"], s
    assert "no answer within 1s" in servers[f"{node['ip']}:{hung['port']}"]["error"]
    assert "unreachable" in servers[f"{node['ip']}:{dead['port']}"]["error"]
    wait_for(lambda: healthy(hung["port"], node["ip"]), 10, what="the container server back")
