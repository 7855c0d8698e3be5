"""The ring reader: partition of a path, primaries, handoffs, reloading, O(1) lookups."""

from __future__ import annotations

import cProfile
import pstats
import random
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash

from ringbuilder.builder import RingBuilder
from swiftlite.common import hashing
from swiftlite.ring import Ring, RingData, write_ring


@pytest.fixture
def affixes() -> Iterator[None]:
    saved = (hashing._PREFIX, hashing._SUFFIX)
    yield
    hashing._PREFIX, hashing._SUFFIX = saved


def make_builder(pp: int = 8, zones: int = 5, hosts: int = 2, devs: int = 2,
                 seed: int = 1) -> RingBuilder:
    b = RingBuilder(pp, 3, 0)
    for z in range(1, zones + 1):
        for h in range(hosts):
            for d in range(devs):
                b.add_dev({"region": 1, "zone": z, "ip": f"10.0.{z}.{h}", "port": 6200 + h,
                           "device": f"sd{d}", "weight": 100.0})
    b.rebalance(seed=seed)
    return b


@pytest.fixture
def ring_file(tmp_path: Path) -> tuple[str, RingBuilder]:
    b = make_builder()
    path = str(tmp_path / "object.ring.gz")
    write_ring(path, b.get_ring_data())
    return path, b


def names(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(f"AUTH_{rng.randrange(10)}", f"c{rng.randrange(100)}", f"img/{rng.random()}.jpg")
            for _ in range(n)]


def test_get_nodes_matches_the_builder(ring_file: tuple[str, RingBuilder]) -> None:
    path, b = ring_file
    ring = Ring.load(path)
    tables = b.get_ring_data().replica2part2dev
    seen_parts = set()
    for a, c, o in names(300):
        part, nodes = ring.get_nodes(a, c, o)
        assert part == ring.get_part(a, c, o)
        assert 0 <= part < 256
        assert [n["id"] for n in nodes] == [t[part] for t in tables]
        assert len({n["id"] for n in nodes}) == 3
        assert [n["index"] for n in nodes] == [0, 1, 2]
        for n in nodes:
            assert {"id", "region", "zone", "ip", "port", "device", "weight"} <= set(n)
            assert n == {**b.devs[n["id"]], "index": n["index"]}
        seen_parts.add(part)
    assert len(seen_parts) > 150  # names spread over the partitions
    # account and container paths have partitions too
    part, nodes = ring.get_nodes("AUTH_x")
    assert len(nodes) == 3 and part == ring.get_part("AUTH_x")
    assert ring.get_nodes("AUTH_x", "c")[0] == ring.get_part("AUTH_x", "c")


def test_get_part_uses_top_bits_of_xxh3_with_affixes(ring_file: tuple[str, RingBuilder],
                                                     affixes: None) -> None:
    path, _ = ring_file
    ring = Ring.load(path)
    hashing.set_hash_path_affixes("pre", "suf")
    moved = 0
    for a, c, o in names(200, seed=3):
        key = f"pre/{a}/{c}/{o}suf".encode()
        expected = xxhash.xxh3_128_intdigest(key) >> (128 - ring.part_power)
        assert ring.get_part(a, c, o) == expected
        hashing.set_hash_path_affixes("", "")
        bare = ring.get_part(a, c, o)
        assert bare == xxhash.xxh3_128_intdigest(f"/{a}/{c}/{o}".encode()) >> 120
        moved += bare != expected
        hashing.set_hash_path_affixes("pre", "suf")
    assert moved > 150  # the affixes really change placement
    assert ring.get_part("a", "c") == xxhash.xxh3_128_intdigest(b"pre/a/csuf") >> 120
    assert ring.get_part("a") == xxhash.xxh3_128_intdigest(b"pre/asuf") >> 120


def test_handoffs_stable_exclude_primaries_prefer_new_zones_then_hosts(
        ring_file: tuple[str, RingBuilder]) -> None:
    path, _ = ring_file
    ring = Ring.load(path)
    other = Ring.load(path)
    for part in range(0, 256, 7):
        primaries = ring.get_part_nodes(part)
        handoffs = list(ring.get_more_nodes(part))
        assert handoffs == list(ring.get_more_nodes(part))
        assert [d["id"] for d in handoffs] == [d["id"] for d in other.get_more_nodes(part)]
        ids = [d["id"] for d in handoffs]
        assert len(ids) == len(set(ids)) == 20 - 3
        assert not set(ids) & {d["id"] for d in primaries}
        assert [d["index"] for d in handoffs] == list(range(3, 20))
        # 5 zones, 3 used by primaries: the next two handoffs open the other two zones
        zones = {d["zone"] for d in primaries}
        assert {d["zone"] for d in handoffs[:2]} == {1, 2, 3, 4, 5} - zones
        # then new hosts before any host already holding a copy
        hosts = {d["ip"] for d in primaries} | {d["ip"] for d in handoffs[:2]}
        new_hosts = 10 - len(hosts)
        assert len({d["ip"] for d in handoffs[2:2 + new_hosts]} - hosts) == new_hosts
    # different partitions get different handoff orders (load spreads after a failure)
    firsts = {next(ring.get_more_nodes(p))["id"] for p in range(256)}
    assert len(firsts) > 10


def test_handoffs_skip_zero_weight_devices(tmp_path: Path) -> None:
    b = make_builder(zones=2, hosts=2, devs=1)
    b.add_dev({"region": 1, "zone": 3, "ip": "10.0.3.0", "port": 6200, "device": "sd0",
               "weight": 0.0})
    path = str(tmp_path / "r.ring.gz")
    write_ring(path, b.get_ring_data())
    ring = Ring.load(path)
    for part in range(32):
        assert 4 not in {d["id"] for d in ring.get_more_nodes(part)}


def test_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = str(tmp_path / "object.ring.gz")
    b = make_builder(seed=1)
    write_ring(path, b.get_ring_data())
    ring = Ring.load(path, reload_interval=0)
    lazy = Ring.load(path, reload_interval=3600)
    before = [ring.get_part_nodes(p) for p in range(256)]
    b.add_dev({"region": 1, "zone": 1, "ip": "10.0.1.9", "port": 6200, "device": "new",
               "weight": 400.0})
    b.rebalance(seed=2)
    write_ring(path, b.get_ring_data())  # immediately: same mtime tick is likely
    after = [ring.get_part_nodes(p) for p in range(256)]
    assert after != before
    tables = b.get_ring_data().replica2part2dev
    assert all([n["id"] for n in after[p]] == [t[p] for t in tables] for p in range(256))
    assert any(n["device"] == "new" for nodes in after for n in nodes)
    assert [lazy.get_part_nodes(p) for p in range(256)] == before  # not checked yet
    lazy.reload()
    assert [lazy.get_part_nodes(p) for p in range(256)] == after


def test_a_broken_file_keeps_the_old_ring(tmp_path: Path) -> None:
    path = tmp_path / "object.ring.gz"
    write_ring(str(path), make_builder().get_ring_data())
    ring = Ring.load(str(path), reload_interval=0)
    good = ring.get_part_nodes(5)
    path.write_bytes(b"not a ring")
    assert ring.get_part_nodes(5) == good


@pytest.mark.parametrize("bad", [b"not a ring", b"truncated", b"not a dict"])
def test_a_bad_ring_file_is_logged_once_and_the_old_ring_kept(tmp_path: Path, caplog,
                                                              bad: bytes) -> None:
    import gzip

    import msgpack

    path = tmp_path / "object.ring.gz"
    data = make_builder().get_ring_data()
    write_ring(str(path), data)
    ring = Ring.load(str(path), reload_interval=0)
    good = ring.get_part_nodes(5)
    blob = {b"not a ring": b"not a ring", b"truncated": data.to_bytes()[:200],
            b"not a dict": gzip.compress(msgpack.packb([1, 2, 3]))}[bad]
    path.write_bytes(blob)
    caplog.set_level("ERROR", logger="swiftlite.ring")
    for _ in range(3):
        assert ring.get_part_nodes(5) == good
    errors = [r for r in caplog.records if str(path) in r.getMessage()]
    assert len(errors) == 1, caplog.text  # once per bad file, not once per check
    path.unlink()
    assert ring.get_part_nodes(5) == good and len(caplog.records) == 2
    write_ring(str(path), data)  # a good file again: loaded, and a later bad one is told
    assert ring.get_part_nodes(5) == good
    path.write_bytes(blob)
    assert ring.get_part_nodes(5) == good and len(caplog.records) == 3


def synthetic(pp: int, ndevs: int) -> RingData:
    rng = random.Random(pp)
    devs = [{"id": i, "region": 1, "zone": i % 5, "ip": f"10.1.{i // 250}.{i % 250}",
             "port": 6200, "device": "sda", "weight": 1.0} for i in range(ndevs)]
    tables = [array("H", (rng.randrange(ndevs) for _ in range(1 << pp))) for _ in range(3)]
    return RingData(pp, 3, devs, tables)


def lookup_work(ring: Ring, calls: list[tuple[str, str, str]]) -> int:
    """Python calls made by the lookups: what a lookup costs, whatever else the machine does
    (a timing here failed under load; bench_ring.py times them)."""
    prof = cProfile.Profile()
    prof.enable()
    for a, c, o in calls:
        ring.get_nodes(a, c, o)
    prof.disable()
    return pstats.Stats(prof).total_calls  # type: ignore[attr-defined]


def test_lookups_do_not_grow_with_ring_size(tmp_path: Path) -> None:
    small, big = str(tmp_path / "s.ring.gz"), str(tmp_path / "b.ring.gz")
    write_ring(small, synthetic(4, 10))
    write_ring(big, synthetic(18, 2000))
    calls = names(3000, seed=9)
    small_ring, big_ring = Ring.load(small), Ring.load(big)
    lookup_work(small_ring, calls[:10])  # first lookups may load lazily: not what we measure
    lookup_work(big_ring, calls[:10])
    # Same work per lookup on 16 partitions of 10 devices and 262,144 of 2,000 devices.
    assert lookup_work(big_ring, calls) <= lookup_work(small_ring, calls) * 1.05


def test_devices_on_and_parts_for_device(ring_file: tuple[str, RingBuilder]) -> None:
    path, b = ring_file
    ring = Ring.load(path)
    on_host = ring.devices_on("10.0.3.1", 6201)
    assert sorted(d["device"] for d in on_host) == ["sd0", "sd1"]
    dev = on_host[0]["id"]
    parts = ring.parts_for_device(dev)
    assert len(parts) == b.part_counts()[dev]
    assert all(dev in {n["id"] for n in ring.get_part_nodes(p)} for p in parts)
