"""The rules that judge a host's /recon document (common/clients/recon_client.py, shared by
`swiftlite status --cluster` and the console), and the console report's ring and metrics
arithmetic."""

from __future__ import annotations

import json
import time

from swiftlite.common.clients.recon_client import hosts, problems_of
from swiftlite.proxy.backend.nodes import ErrorLimiter
from swiftlite.proxy.console.cluster import MAX_BALANCE, _metrics_doc, balance

GIB = 2**30


def healthy_doc() -> dict:
    return {
        "role": "object", "devices_root": "/srv/node", "status_dir": "/run/s",
        "rings": {"object": "a" * 32, "container": "b" * 32, "account": None},
        "devices": {"d1": {"mounted": True, "total": 100 * GIB, "used": 50 * GIB,
                           "async_pending": 3, "quarantined": {}}},
        "meta_devices": {"m1": {"mounted": True, "total": 10 * GIB, "used": GIB,
                                "async_pending": 0, "quarantined": {}}},
        "daemons": {
            "object-replicator": {"configured": True, "interval": 30, "alive": True,
                                  "last_pass": {"start": 1, "duration": 1, "failures": 0},
                                  "last_pass_age": 10.0, "running_for": None},
            "stray": {"configured": False},  # a status file no config runs: not judged
        },
    }


MD5 = {"object": "a" * 32, "container": "b" * 32, "account": "c" * 32}


def test_a_healthy_host_has_no_problems():
    doc = healthy_doc()
    doc["rings"]["account"] = "c" * 32
    assert problems_of("h", doc, MD5) == []


def test_ring_md5_mismatch_and_missing_ring():
    doc = healthy_doc()
    doc["rings"]["container"] = "f" * 32
    problems = problems_of("h", doc, MD5)
    assert "h: container ring differs from this one (ffffffff vs bbbbbbbb)" in problems
    assert "h: account ring differs from this one (missing vs cccccccc)" in problems
    assert not any("object ring" in p for p in problems)


def test_device_thresholds_are_parameters():
    doc = healthy_doc()
    assert problems_of("h", doc, MD5, full_percent=49.0) == [
        "h: account ring differs from this one (missing vs cccccccc)",
        "h: device d1 50% full"]
    assert "h: device d1 has 3 async_pendings" in problems_of("h", doc, MD5, pending_limit=2)
    assert not any("async" in p for p in problems_of("h", doc, MD5, pending_limit=3))


def test_unmounted_quarantined_and_meta_devices():
    doc = healthy_doc()
    doc["devices"]["d1"]["mounted"] = False
    doc["meta_devices"]["m1"]["quarantined"] = {"containers": 2}
    problems = problems_of("h", doc, {})
    assert any(p.startswith("h: device d1 unmounted or unreadable") for p in problems)
    assert "h: device meta/m1 has 2 quarantined items {'containers': 2}" in problems


def test_daemon_rules():
    doc = healthy_doc()
    rep = doc["daemons"]["object-replicator"]
    assert problems_of("h", doc, {}) == []
    rep["last_pass_age"] = 3 * 30 + 61  # late, and no pass running
    assert problems_of("h", doc, {}) == ["h: object-replicator last pass ended 151s ago "
                                         "(interval 30s)"]
    rep["running_for"] = 5.0  # a long pass in progress is not late
    assert problems_of("h", doc, {}) == []
    rep.update(alive=False, status_age=100.0)
    rep["last_pass"].update(pid=42, failures=3)
    assert problems_of("h", doc, {}) == [
        "h: object-replicator is not running (pid 42 gone, status not updated for 100s)",
        "h: object-replicator last pass had 3 failures"]
    doc["daemons"]["object-replicator"] = {"configured": True, "interval": 30}
    assert problems_of("h", doc, {}) == [
        "h: object-replicator has never started a pass (not running?)"]


def test_servers_of_one_host_are_judged_once():
    obj, cont = healthy_doc(), {**healthy_doc(), "role": "container"}
    out = hosts({("10.0.0.1", 6200): obj, ("10.0.0.1", 6201): cont,
                 ("10.0.0.2", 6200): "unreachable (ConnectionRefusedError)"})
    assert out == [("10.0.0.1 /srv/node", [("10.0.0.1", 6200), ("10.0.0.1", 6201)], obj),
                   ("10.0.0.2:6200", [("10.0.0.2", 6200)],
                    "unreachable (ConnectionRefusedError)")]


def test_balance_is_the_worst_devices_distance_from_its_share():
    devs = [{"id": 0, "weight": 100}, {"id": 1, "weight": 100}, None,
            {"id": 3, "weight": 200}]
    assert balance(devs, {0: 32, 1: 32, 3: 64}) == 0.0
    assert balance(devs, {0: 40, 1: 24, 3: 64}) == 25.0  # d0: 40 for a share of 32
    assert balance(devs, {}) == 0.0
    drained = [*devs, {"id": 4, "weight": 0}]
    assert balance(drained, {0: 32, 1: 32, 3: 63, 4: 1}) == MAX_BALANCE


def test_metrics_doc_is_json_and_sums_methods():
    samples = {
        "swiftlite_requests_total": [
            ({"method": "GET", "status": "200"}, 90.0),
            ({"method": "GET", "status": "404"}, 4.0),
            ({"method": "PUT", "status": "503"}, 1.0)],
        "swiftlite_request_duration_seconds_bucket": [
            ({"method": "GET", "le": "0.005"}, 50.0),
            ({"method": "GET", "le": "30.0"}, 94.0),
            ({"method": "GET", "le": "+Inf"}, 94.0),
            ({"method": "PUT", "le": "0.005"}, 0.0),
            ({"method": "PUT", "le": "30.0"}, 1.0),
            ({"method": "PUT", "le": "+Inf"}, 1.0)],
        "swiftlite_request_bytes_total": [({"method": "PUT"}, 10.0)],
    }
    doc = _metrics_doc(samples, True)
    assert doc["requests"] == {"GET": 94, "PUT": 1}
    assert doc["errors"] == {"4xx": 4, "5xx": 1}
    assert doc["latency_ms"] == {"p50": 5.0, "p99": 30000.0}
    assert doc["bytes_in"] == 10 and doc["bytes_out"] == 0
    # Past the last finite bound: unknown, never Infinity (which JSON cannot carry).
    slow = {"swiftlite_request_duration_seconds_bucket": [
        ({"method": "GET", "le": "30.0"}, 0.0), ({"method": "GET", "le": "+Inf"}, 2.0)]}
    assert _metrics_doc(slow, True)["latency_ms"] == {"p50": None, "p99": None}
    json.dumps(_metrics_doc({}, False), allow_nan=False)


def test_limiter_snapshot():
    limiter = ErrorLimiter(limit=2, interval=60.0)
    node = {"ip": "10.0.0.1", "port": 6200, "device": "d1"}
    assert limiter.snapshot() == []
    limiter.error(node, "x", fingerprint=1)
    assert limiter.snapshot() == [{"node": "10.0.0.1:6200/d1", "errors": 1,
                                   "limited": False, "until": None}]
    before = time.time()
    limiter.fatal(node, "refused", server=True)
    snap = limiter.snapshot()
    assert [e["node"] for e in snap] == ["10.0.0.1:6200", "10.0.0.1:6200/d1"]
    assert snap[0]["limited"] and before + 59 < snap[0]["until"] <= time.time() + 60.01
    assert limiter.limited(node)
