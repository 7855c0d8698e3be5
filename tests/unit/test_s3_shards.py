"""How run_s3.py deals ceph's s3-tests to its shards (tests/conformance/s3_suite.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

import s3_suite  # noqa: E402

SUITE = s3_suite.SUITE


def ids(*names: str) -> list[str]:
    return [f"{SUITE}::{n}" for n in names]


def test_slow_tests_are_spread_and_each_shard_keeps_the_suites_order():
    tests = ids("a", "slow1", "b", "slow2", "c", "d", "slow3")
    shards = s3_suite.deal(tests, 2, {"slow1": 90, "slow2": 80, "slow3": 70})
    # Dealt in turn, slow1 and slow3 would share a shard (160 s against 80 s).
    loads = [sum({"slow1": 90, "slow2": 80, "slow3": 70}.get(t.rpartition("::")[2], 1)
                 for t in s) for s in shards]
    assert max(loads) - min(loads) <= 70
    assert sorted(sum(shards, [])) == sorted(tests)
    for s in shards:
        assert s == sorted(s, key=tests.index)


def test_the_same_durations_deal_the_same_way():
    tests = ids(*(f"t{i}" for i in range(50)))
    durations = {f"t{i}": float(i % 7) for i in range(50)}
    assert s3_suite.deal(tests, 3, durations) == s3_suite.deal(list(tests), 3, dict(durations))


def test_the_committed_durations_name_real_tests_and_parse():
    durations = s3_suite.read_durations()
    assert durations, s3_suite.DURATIONS
    assert all(name.startswith("test_") and secs >= s3_suite.MIN_KEPT
               for name, secs in durations.items())
