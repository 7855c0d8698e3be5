"""The ring builder: balance, dispersion, movement, min_part_hours, determinism, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from array import array
from collections import Counter
from pathlib import Path

import pytest

from ringbuilder.builder import RingBuilder, RingBuilderError, ideal_parts
from swiftlite.ring import Ring

REPO = Path(__file__).resolve().parents[2]


def make(pp: int, topo: list[tuple[int, int, int, float]], replicas: int = 3,
         mph: int = 0) -> RingBuilder:
    """topo: (zone, host, device number, weight) per device; host h of zone z is 10.0.z.h."""
    b = RingBuilder(pp, replicas, mph)
    for zone, host, dev, weight in topo:
        b.add_dev({"region": 1, "zone": zone, "ip": f"10.0.{zone}.{host}", "port": 6200,
                   "device": f"sd{dev}", "weight": weight})
    return b


def grid(zones: int, hosts: int, devs: int, weight: float = 100.0) -> list:
    return [(z, h, h * devs + d, weight)
            for z in range(1, zones + 1) for h in range(hosts) for d in range(devs)]


TOPOLOGIES = {
    "4 devices 1 host": (10, grid(1, 1, 4)),
    "3 zones": (10, grid(3, 1, 2)),
    "5 zones x 20 devices": (12, grid(5, 4, 5)),
    "2 zones": (10, grid(2, 2, 2)),
}


def snap(b: RingBuilder) -> list[array]:
    return [array("H", t) for t in b.get_ring_data().replica2part2dev]


def changed(before: list[array], after: list[array]) -> list[tuple[int, int, int]]:
    """(replica, partition, old device) of every assignment that changed."""
    return [(r, p, a) for r, (ta, tb) in enumerate(zip(before, after, strict=True))
            for p, (a, b) in enumerate(zip(ta, tb, strict=True)) if a != b]


def assert_balanced(b: RingBuilder, ideal: dict[int, float]) -> None:
    counts = b.part_counts()
    for dev_id, want in ideal.items():
        tol = max(0.01 * want, 1.0)
        assert abs(counts[dev_id] - want) <= tol, (dev_id, counts[dev_id], want)


def devices_of(b: RingBuilder) -> dict[int, dict]:
    return {d["id"]: d for d in b.devs if d is not None}


def rows(b: RingBuilder) -> list[tuple[int, ...]]:
    return list(zip(*b.get_ring_data().replica2part2dev, strict=True))


# -- balance --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["4 devices 1 host", "3 zones", "5 zones x 20 devices"])
def test_equal_weights_balance_within_one_percent(name: str) -> None:
    pp, topo = TOPOLOGIES[name]
    b = make(pp, topo)
    moved, balance = b.rebalance(seed=1)
    assert moved == b.parts * 3
    ideal = ideal_parts(b)
    assert min(ideal.values()) >= 100
    assert_balanced(b, ideal)
    assert b.is_balanced()
    b.validate()


def test_unequal_weights_shares_follow_weights() -> None:
    weights = [50, 100, 100, 150, 200, 250]
    b = make(11, [(1, 0, i, float(w)) for i, w in enumerate(weights)])
    b.rebalance(seed=3)
    assert_balanced(b, ideal_parts(b))
    counts = b.part_counts()
    assert counts[5] > 4.5 * counts[0]  # 250 vs 50: the weights really matter

    # Many zones with mixed weights: no zone is too small, so weight still decides.
    topo = [(z, h, h * 2 + d, float(40 + 17 * ((z * 7 + h * 3 + d) % 7)))
            for z in range(1, 6) for h in range(2) for d in range(2)]
    b = make(12, topo)
    b.rebalance(seed=4)
    assert_balanced(b, ideal_parts(b))


# -- dispersion -----------------------------------------------------------------------------


def test_dispersion_distinct_devices_on_one_host() -> None:
    b = make(*TOPOLOGIES["4 devices 1 host"])
    b.rebalance(seed=1)
    assert all(len(set(row)) == 3 for row in rows(b))
    assert b.dispersion_report()["undispersed"] == 0


def test_dispersion_three_zones_one_replica_each() -> None:
    b = make(*TOPOLOGIES["3 zones"])
    b.rebalance(seed=1)
    devs = devices_of(b)
    for row in rows(b):
        assert sorted(devs[d]["zone"] for d in row) == [1, 2, 3]


def test_dispersion_five_zones_distinct_zones_and_hosts() -> None:
    b = make(*TOPOLOGIES["5 zones x 20 devices"])
    b.rebalance(seed=1)
    devs = devices_of(b)
    for row in rows(b):
        assert len({devs[d]["zone"] for d in row}) == 3
        assert len({devs[d]["ip"] for d in row}) == 3
    assert b.dispersion_report()["percent"] == 0.0


def test_dispersion_two_zones_spread_two_and_one() -> None:
    b = make(*TOPOLOGIES["2 zones"])
    b.rebalance(seed=1)
    devs = devices_of(b)
    for row in rows(b):
        zones = Counter(devs[d]["zone"] for d in row)
        assert sorted(zones.values()) == [1, 2]          # never all three in one zone
        assert len({devs[d]["ip"] for d in row}) == 3    # 4 hosts: every replica its own host
    assert_balanced(b, ideal_parts(b))


def test_dispersion_wins_over_weight_for_a_small_zone() -> None:
    topo = [(1, 0, 0, 100.0), (1, 1, 1, 100.0), (2, 0, 2, 100.0), (2, 1, 3, 100.0),
            (3, 0, 4, 10.0)]
    b = make(10, topo)
    b.rebalance(seed=1)
    devs = devices_of(b)
    for row in rows(b):
        assert sorted(devs[d]["zone"] for d in row) == [1, 2, 3]
    assert b.part_counts()[4] == b.parts  # the small zone still holds one replica of each
    assert b.is_balanced()  # against the dispersion-adjusted targets


def test_dispersion_report_counts_crowded_partitions() -> None:
    b = make(*TOPOLOGIES["3 zones"])
    b.rebalance(seed=1)
    devs = devices_of(b)
    # Force one partition to hold two replicas in zone 1 behind the builder's back.
    zone1 = [d for d in devs if devs[d]["zone"] == 1]
    row = rows(b)[7]
    r = next(i for i, d in enumerate(row) if devs[d]["zone"] != 1)
    b._tables[r][7] = next(d for d in zone1 if d not in row)
    rep = b.dispersion_report()
    assert rep["undispersed"] == 1 and rep["by_level"]["zone"] == 1
    # and the next rebalance repairs it
    b.rebalance(seed=2)
    assert b.dispersion_report()["undispersed"] == 0


# -- movement -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name,new_zone", [("4 devices 1 host", 1), ("3 zones", 2),
                                           ("5 zones x 20 devices", 3)])
def test_adding_a_device_moves_near_the_minimum(name: str, new_zone: int, seed: int) -> None:
    pp, topo = TOPOLOGIES[name]
    b = make(pp, topo)
    b.rebalance(seed=seed)
    before = snap(b)
    new = b.add_dev({"region": 1, "zone": new_zone, "ip": f"10.0.{new_zone}.99", "port": 6200,
                     "device": "new", "weight": 100.0})
    moved, _ = b.rebalance(seed=seed + 10)
    diffs = changed(before, snap(b))
    assert moved == len(diffs)
    # The least that balances: the new device's share (dispersion-adjusted for 3 zones).
    minimum = b.targets()[new]
    assert len(diffs) <= 1.1 * minimum
    assert b.part_counts()[new] >= minimum - max(0.01 * minimum, 1)
    assert b.is_balanced()
    assert b.dispersion_report()["undispersed"] == 0


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("name", ["4 devices 1 host", "3 zones", "5 zones x 20 devices"])
def test_removing_a_device_moves_only_what_it_held(name: str, seed: int) -> None:
    pp, topo = TOPOLOGIES[name]
    b = make(pp, topo)
    b.add_dev({"region": 1, "zone": 1, "ip": "10.0.1.50", "port": 6200, "device": "extra",
               "weight": 100.0})  # so zones stay big enough after the removal
    b.rebalance(seed=seed)
    before = snap(b)
    held = b.part_counts()[2]
    b.remove_dev(2)
    moved, _ = b.rebalance(seed=seed + 10)
    diffs = changed(before, snap(b))
    assert diffs and all(old == 2 for _r, _p, old in diffs)
    assert moved == len(diffs) == held
    assert b.devs[2] is None and 2 not in b.part_counts()
    assert b.is_balanced()
    b.validate()


def test_weight_change_moves_toward_new_share() -> None:
    b = make(*TOPOLOGIES["4 devices 1 host"])
    b.rebalance(seed=1)
    b.set_dev_weight(0, 50.0)
    b.rebalance(seed=2)
    assert_balanced(b, ideal_parts(b))
    assert b.part_counts()[0] == pytest.approx(b.parts * 3 * 50 / 350, rel=0.01)


# -- min_part_hours -------------------------------------------------------------------------


def per_partition_moves(before: list[array], after: list[array]) -> Counter:
    return Counter(p for _r, p, _old in changed(before, after))


def test_min_part_hours_moves_one_replica_per_partition_per_window() -> None:
    b = make(10, grid(5, 1, 2), mph=1)
    moved, _ = b.rebalance(seed=1)
    assert moved == b.parts * 3  # the first rebalance places everything
    b.pretend_min_part_hours_passed()
    start = snap(b)
    for z in range(1, 6):  # double the cluster: half of everything wants to move
        for i in range(2):
            b.add_dev({"region": 1, "zone": z, "ip": f"10.0.{z}.1", "port": 6200,
                       "device": f"n{i}", "weight": 100.0})
    b.rebalance(seed=2)
    b.rebalance(seed=3)  # still inside the window
    b.rebalance(seed=4)
    assert max(per_partition_moves(start, snap(b)).values()) == 1
    assert not b.is_balanced()  # needs two moves for some partitions: must wait
    b.pretend_min_part_hours_passed()
    b.rebalance(seed=5)
    assert b.is_balanced()
    assert b.dispersion_report()["undispersed"] == 0


def test_min_part_hours_zero_balances_in_one_go() -> None:
    b = make(10, grid(5, 1, 2), mph=0)
    b.rebalance(seed=1)
    for z in range(1, 6):
        b.add_dev({"region": 1, "zone": z, "ip": f"10.0.{z}.1", "port": 6200,
                   "device": "n", "weight": 100.0})
    b.rebalance(seed=2)
    assert b.is_balanced()


# -- determinism and persistence ------------------------------------------------------------


def build_and_ring(seed: int) -> bytes:
    b = make(*TOPOLOGIES["5 zones x 20 devices"])
    b.rebalance(seed=seed)
    b.add_dev({"region": 1, "zone": 2, "ip": "10.0.2.77", "port": 6200, "device": "x",
               "weight": 150.0})
    b.rebalance(seed=seed)
    return b.get_ring_data().to_bytes()


def test_same_builder_and_seed_give_identical_ring_bytes() -> None:
    assert build_and_ring(42) == build_and_ring(42)
    assert build_and_ring(42) != build_and_ring(43)


def test_save_load_round_trip(tmp_path: Path) -> None:
    b = make(*TOPOLOGIES["3 zones"], mph=2)
    b.rebalance(seed=1)
    path = str(tmp_path / "object.builder")
    b.save(path)
    c = RingBuilder.load(path)
    assert c.to_dict() == b.to_dict()
    assert c.min_part_seconds_left() > 0
    assert c.get_ring_data().to_bytes() == b.get_ring_data().to_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["object.builder"]  # no temp file left


def test_api_errors() -> None:
    for args in [(0, 3, 1), (33, 3, 1), (8, 0, 1), (8, 3, -1)]:
        with pytest.raises(RingBuilderError):
            RingBuilder(*args)
    b = RingBuilder(8, 3, 1)
    with pytest.raises(RingBuilderError, match="no devices"):
        b.rebalance()
    b.add_dev({"region": 1, "zone": 1, "ip": "1.2.3.4", "port": 6200, "device": "a",
               "weight": 1.0})
    with pytest.raises(RingBuilderError, match="duplicate"):
        b.add_dev({"region": 1, "zone": 2, "ip": "1.2.3.4", "port": 6200, "device": "a",
                   "weight": 1.0})
    with pytest.raises(RingBuilderError, match="weight"):
        b.add_dev({"region": 1, "zone": 1, "ip": "1.2.3.4", "port": 6200, "device": "b",
                   "weight": -1})
    with pytest.raises(RingBuilderError, match="only 1 device"):
        b.rebalance()
    with pytest.raises(RingBuilderError, match="unknown device"):
        b.set_dev_weight(9, 1.0)


def test_search_values() -> None:
    b = make(*TOPOLOGIES["3 zones"])
    b.add_dev({"region": 2, "zone": 1, "ip": "10.0.1.0", "port": 6201, "device": "sd0",
               "weight": 100.0, "meta": "ssd"})
    ids = {s: sorted(d["id"] for d in b.search_devs(s)) for s in [
        "d3", "z1", "10.0.1.0", "/sd1", "r1z1-10.0.1.0:6200/sd0", ":6201", "r2", "_ssd",
        "z2-10.0.2.0", "10.0.9.9"]}
    assert ids == {"d3": [3], "z1": [0, 1, 6], "10.0.1.0": [0, 1, 6], "/sd1": [1, 3, 5],
                   "r1z1-10.0.1.0:6200/sd0": [0], ":6201": [6], "r2": [6], "_ssd": [6],
                   "z2-10.0.2.0": [2, 3], "10.0.9.9": []}
    with pytest.raises(RingBuilderError, match="search value"):
        b.search_devs("what?")


# -- the CLI --------------------------------------------------------------------------------


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ringbuilder.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=60)


def test_cli_workflow(tmp_path: Path) -> None:
    def ok(*args: str, rc: int = 0) -> str:
        res = cli("object.builder", *args, cwd=tmp_path)
        assert res.returncode == rc, res.stderr + res.stdout
        return res.stdout

    ok("create", "8", "3", "1")
    devs = [f"r1z{z}-127.0.0.1:62{z}0/d{z}{i}" for z in (1, 2, 3) for i in (1, 2)]
    out = ok("add", *[x for d in devs for x in (d, "100")])
    assert "got id 5" in out
    out = ok("rebalance", "--seed", "7")
    assert "Balance is now" in out
    ring_file = tmp_path / "object.ring.gz"
    ring = Ring.load(str(ring_file))
    assert ring.part_power == 8 and ring.replica_count == 3
    b = RingBuilder.load(str(tmp_path / "object.builder"))
    assert ring._tables == b.get_ring_data().replica2part2dev
    # Nothing to do inside the window: warning exit, ring untouched.
    first = ring_file.read_bytes()
    assert "No partitions" in ok("rebalance", rc=1)
    out = ok()
    assert "256 partitions, 3 replicas, 1 regions, 3 zones, 6 devices" in out
    assert "127.0.0.1:6210" in out
    assert "is valid" in ok("validate")
    assert "Dispersion is 0.00%" in ok("dispersion")
    ok("set_weight", "/d11", "50")
    ok("pretend_min_part_hours_passed")
    ok("rebalance", "--seed=8")
    assert ring_file.read_bytes() != first
    assert RingBuilder.load(str(tmp_path / "object.builder")).part_counts()[0] < 256
    ok("remove", "z3-127.0.0.1:6230/d32")
    ok("pretend_min_part_hours_passed")
    ok("rebalance")
    assert "d5" not in ok("search", "z3")
    ring_file.unlink()
    ok("write_ring")
    assert Ring.load(str(ring_file)).devs[5] is None


BAD_INPUT = [
    (["add", "r1z1-127.0.0.1/d9", "100"], "malformed device"),
    (["add", "r1z1-127.0.0.1:6200/d1", "100"], "duplicate device"),
    (["add", "r1z1-127.0.0.1:6200/d9", "heavy"], "invalid weight"),
    (["add", "r1z1-127.0.0.1:6200/d9", "-3"], "invalid weight"),
    (["set_weight", "/d1", "nan"], "invalid weight"),
    (["remove", "/nothere"], "no device matches"),
    (["set_weight", "z9", "10"], "no device matches"),
    (["remove", "?!"], "invalid search value"),
    (["create", "0", "3", "1"], "part_power"),
    (["create", "33", "3", "1"], "part_power"),
    (["create", "8", "0", "1"], "replicas"),
    (["create", "eight", "3", "1"], "part_power"),
    (["frobnicate"], "unknown command"),
]


@pytest.fixture
def small_builder(tmp_path: Path) -> Path:
    b = RingBuilder(6, 1, 1)
    b.add_dev({"region": 1, "zone": 1, "ip": "127.0.0.1", "port": 6200, "device": "d1",
               "weight": 100.0})
    path = tmp_path / "object.builder"
    b.save(str(path))
    return path


@pytest.mark.parametrize("args,problem", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_cli_bad_input_fails_cleanly(small_builder: Path, args: list[str], problem: str) -> None:
    before = small_builder.read_bytes()
    res = cli(small_builder.name, *args, cwd=small_builder.parent)
    assert res.returncode == 2
    line = res.stderr.strip()
    assert "\n" not in line and problem in line, res.stderr
    assert small_builder.read_bytes() == before
    assert sorted(p.name for p in small_builder.parent.iterdir()) == ["object.builder"]


def test_cli_rebalance_without_devices_fails(tmp_path: Path) -> None:
    assert cli("o.builder", "create", "6", "3", "1", cwd=tmp_path).returncode == 0
    before = (tmp_path / "o.builder").read_bytes()
    res = cli("o.builder", "rebalance", cwd=tmp_path)
    assert res.returncode == 2 and "no devices" in res.stderr.strip()
    assert (tmp_path / "o.builder").read_bytes() == before
    assert not (tmp_path / "o.ring.gz").exists()
    res = cli("missing.builder", cwd=tmp_path)
    assert res.returncode == 2 and "does not exist" in res.stderr


def test_cli_same_seed_same_ring_bytes(tmp_path: Path) -> None:
    rings = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        assert cli("object.builder", "create", "8", "3", "0", cwd=d).returncode == 0
        devs = [x for z in range(1, 5) for x in (f"r1z{z}-10.0.0.{z}:6200/sda", "100")]
        assert cli("object.builder", "add", *devs, cwd=d).returncode == 0
        assert cli("object.builder", "rebalance", "--seed", "11", cwd=d).returncode == 0
        rings.append((d / "object.ring.gz").read_bytes())
    assert rings[0] == rings[1]


def test_dispersion_across_regions() -> None:
    b = RingBuilder(9, 3, 0)
    for region in (1, 2):
        for zone in (1, 2):
            for dev in range(2):
                b.add_dev({"region": region, "zone": zone, "ip": f"10.{region}.{zone}.{dev}",
                           "port": 6200, "device": "sda", "weight": 100.0})
    b.rebalance(seed=1)
    devs = devices_of(b)
    for row in rows(b):
        assert sorted(Counter(devs[d]["region"] for d in row).values()) == [1, 2]
        assert len({(devs[d]["region"], devs[d]["zone"]) for d in row}) == 3
    assert_balanced(b, ideal_parts(b))


def test_ipv6_devices(tmp_path: Path) -> None:
    res = cli("v6.builder", "create", "6", "2", "0", cwd=tmp_path)
    assert res.returncode == 0
    res = cli("v6.builder", "add", "r1z1-[::1]:6200/d1", "10", "r1z2-[fe80::2]:6201/d2", "10",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    b = RingBuilder.load(str(tmp_path / "v6.builder"))
    assert [d["ip"] for d in b.devs] == ["::1", "fe80::2"]
    assert [d["id"] for d in b.search_devs("[fe80::2]:6201")] == [1]


def test_cli_warns_when_min_part_hours_holds_balance_back(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return cli("o.builder", *args, cwd=tmp_path)

    assert run("create", "8", "3", "24").returncode == 0
    assert run("add", *[x for z in (1, 2, 3) for x in (f"r1z{z}-10.0.0.{z}:6200/a", "1")]
               ).returncode == 0
    assert run("rebalance").returncode == 0
    assert run("add", *[x for z in (1, 2, 3) for x in (f"r1z{z}-10.0.1.{z}:6200/b", "3")]
               ).returncode == 0
    assert run("pretend_min_part_hours_passed").returncode == 0
    res = run("rebalance")
    assert res.returncode == 1 and "balance not reached" in res.stdout, res.stdout
    assert "No partitions" in run("rebalance").stdout  # the window holds everything now
