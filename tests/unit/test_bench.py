"""The benchmark's pure parts: the image size mix (shared with the locustfile) and percentiles.

Imports nothing from locust, so the suite does not need the `load` extra.
"""

from __future__ import annotations

import random
import statistics

from loadtests.bench import (
    IMAGE_BUCKETS,
    KIB,
    MIB,
    format_report,
    image_size,
    parse_size,
    percentile,
)


def test_image_size_mix():
    rng = random.Random(7)
    sizes = [image_size(rng) for _ in range(20000)]
    assert min(sizes) >= 16 * KIB and max(sizes) <= 1 * MIB
    assert 48 * KIB <= statistics.median(sizes) <= 96 * KIB  # around 64 KiB
    tail = sum(s > 512 * KIB for s in sizes) / len(sizes)
    assert 0.02 < tail < 0.04  # a real tail to 1 MiB, ~3%
    assert sum(s > 256 * KIB for s in sizes) / len(sizes) > 0.08
    assert abs(sum(w for _, _, w in IMAGE_BUCKETS) - 1.0) < 1e-9


def test_image_size_is_deterministic_per_seed():
    a = [image_size(random.Random(3)) for _ in range(5)]
    b = [image_size(random.Random(3)) for _ in range(5)]
    assert a == b


def test_parse_size():
    assert parse_size("64k") == 65536
    assert parse_size("1m") == MIB
    assert parse_size("1MiB") == MIB
    assert parse_size("100") == 100


def test_percentile_nearest_rank():
    vals = [float(i) for i in range(1, 101)]
    assert percentile(vals, 50) == 50.0
    assert percentile(vals, 99) == 99.0
    assert percentile(vals, 100) == 100.0
    assert percentile([], 50) == 0.0
    assert percentile([5.0], 95) == 5.0


def test_report_prints_ratios():
    one = {"ops": 10, "errors": 0, "secs": 1.0, "ops_s": 10.0, "mb_s": 0.6, "p50_ms": 4.0,
           "p95_ms": 5.0, "p99_ms": 6.0, "reasons": {}, "time_limited": False}
    two = {**one, "ops_s": 5.0, "p50_ms": 8.0}
    report = {"config": {"url": "u", "user": "x", "size": "64k", "count": 10,
                         "concurrency": 2, "rounds": 4, "phase_time": 1.0, "container": "c",
                         "phases": ["put"], "vs": "v"},
              "results": {"A": {"put": one}, "B": {"put": two}}}
    text = format_report(report)
    assert "ratio A/B PUT    ops/s=2.00 p50=0.50 p99=1.00" in text
