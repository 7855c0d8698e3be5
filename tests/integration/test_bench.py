"""loadtests/bench.py against a real cluster: figures print and parse, no errors.

Uses the all-in-one cluster (tests/conftest.py); SWIFTLITE_TEST_EXTERNAL_AUTH aims it at
another Swift endpoint (test:tester / testing) instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "loadtests", "bench.py")
ROW = re.compile(r"^(PUT|GET|HEAD|DELETE)\s+([AB])\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", re.M)
RATIO = re.compile(r"^ratio A/B (PUT|GET|HEAD|DELETE)\s+ops/s=([\d.]+) p50=([\d.]+) "
                   r"p99=([\d.]+)", re.M)


@pytest.fixture(scope="module")
def auth_url(request):
    ext = os.environ.get("SWIFTLITE_TEST_EXTERNAL_AUTH")
    return ext or request.getfixturevalue("cluster").auth_url


def run_bench(*args: str) -> str:
    out = subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_bench_all_phases(auth_url, tmp_path):
    js = str(tmp_path / "bench.json")
    text = run_bench("--url", auth_url, "--user", "test:tester", "--key", "testing",
                     "--size", "16k", "--count", "50", "--concurrency", "8", "--json", js)
    assert "config: url=" in text and "count=50" in text and "concurrency=8" in text
    rows = {m[0]: m for m in ROW.findall(text)}
    assert set(rows) == {"PUT", "GET", "HEAD", "DELETE"}, text
    for _, ep, ops, errors, secs, ops_s, _mb_s, p50, p95, p99 in rows.values():
        assert ep == "A" and int(ops) == 50 and int(errors) == 0, text
        assert float(ops_s) > 0 and float(secs) > 0
        assert 0 < float(p50) <= float(p95) <= float(p99), text
    with open(js) as f:
        report = json.load(f)
    assert report["results"]["A"]["get"]["errors"] == 0
    for phase in ("put", "get"):  # every body moved in full, and MB/s says so
        r = report["results"]["A"][phase]
        assert r["ops"] == 50 and r["bytes"] == 50 * 16384
        assert r["mb_s"] > 0


def test_bench_vs_interleaved(auth_url):
    # the same endpoint on both sides: B uses its own container, ratios are printed
    text = run_bench("--url", auth_url, "--vs", auth_url, "--vs-user", "test:tester",
                     "--vs-key", "testing", "--size", "4k", "--count", "20", "--concurrency",
                     "4", "--phases", "put,get,delete")
    assert "rounds=4" in text
    rows = ROW.findall(text)
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        (p, e) for p in ("PUT", "GET", "DELETE") for e in "AB")
    assert all(int(r[2]) == 20 and int(r[3]) == 0 for r in rows), text
    ratios = {m[0]: m for m in RATIO.findall(text)}
    assert set(ratios) == {"PUT", "GET", "DELETE"}
    assert all(float(r[1]) > 0 for r in ratios.values())


def test_bench_s3_vs_swift(request):
    """`--api s3` signs its own SigV4 requests (unsigned and signed payloads), A/B with Swift."""
    auth_url = request.getfixturevalue("cluster").auth_url
    for extra in ((), ("--s3-sha256",)):
        text = run_bench("--url", auth_url, "--api", "s3", "--vs", auth_url, "--vs-api",
                         "swift", "--size", "8k", "--count", "12", "--concurrency", "3",
                         "--rounds", "2", *extra)
        assert "api=s3" in text and "vs_api=swift" in text, text
        rows = ROW.findall(text)
        assert sorted((r[0], r[1]) for r in rows) == sorted(
            (p, e) for p in ("PUT", "GET", "HEAD", "DELETE") for e in "AB"), text
        assert all(int(r[2]) == 12 and int(r[3]) == 0 for r in rows), text
