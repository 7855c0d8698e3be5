"""The headline numbers `swiftlite status` prints from a server's /metrics."""

from __future__ import annotations

from swiftlite.ops.headline import quantile, summarize


def test_quantile_is_the_bucket_bound_it_falls_in():
    buckets = [(0.001, 10.0), (0.01, 90.0), (0.1, 99.0), (float("inf"), 100.0)]
    assert quantile(buckets, 0.5) == 0.01
    assert quantile(buckets, 0.99) == 0.1
    assert quantile(buckets, 1.0) == float("inf")
    assert quantile([], 0.5) is None


def test_summarize_counts_methods_errors_and_bytes():
    samples = {
        "swiftlite_requests_total": [
            ({"method": "GET", "status": "200"}, 90.0),
            ({"method": "GET", "status": "503"}, 2.0),
            ({"method": "PUT", "status": "201"}, 8.0)],
        "swiftlite_request_duration_seconds_bucket": [
            ({"method": "GET", "le": "0.005"}, 50.0),
            ({"method": "GET", "le": "0.05"}, 92.0),
            ({"method": "GET", "le": "+Inf"}, 92.0)],
        "swiftlite_request_bytes_total": [({"method": "PUT"}, 8 * 2**20)],
        "swiftlite_response_bytes_total": [({"method": "GET"}, 2**20)],
    }
    lines = summarize(samples)
    assert lines[0] == "GET 92 requests, 2 5xx, p50 5.0ms p99 50ms"
    assert lines[1].startswith("PUT 8 requests, 0 5xx")
    assert lines[-1] == "bytes in 8.0 MiB, out 1.0 MiB"


def test_summarize_shows_update_rounds_and_held_rows():
    samples = {
        "swiftlite_db_commit_round_updates_count": [({}, 40.0)],
        "swiftlite_db_commit_round_updates_sum": [({}, 100.0)],
        "swiftlite_db_commit_deferred_total": [({}, 3.0)],
        "swiftlite_db_held_dbs": [({"pid": "1"}, 2.0), ({"pid": "2"}, 1.0)],
    }
    assert summarize(samples) == [
        "update rounds 40 (2.5 updates each), 3 left to a busy DB, 3 DBs holding rows"]
    assert summarize({}) == []  # a server without the update log shows no such line
