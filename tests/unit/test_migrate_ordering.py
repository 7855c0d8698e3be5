"""Upload orders computed from a real (tiny) ring file."""

from __future__ import annotations

from array import array

import pytest

from swiftlite.common.hashing import set_hash_path_affixes
from swiftlite.migrate.ordering import load_ring, order_items, place
from swiftlite.migrate.walker import Item
from swiftlite.ring.ring import RingData, write_ring

PART_POWER = 4
NDEV = 4


@pytest.fixture
def ring(tmp_path):
    devs = [{"id": i, "region": 1, "zone": i, "ip": "127.0.0.1", "port": 6000 + i,
             "device": f"d{i}", "weight": 1.0} for i in range(NDEV)]
    parts = 1 << PART_POWER
    tables = [array("H", [(p + r) % NDEV for p in range(parts)]) for r in range(3)]
    path = tmp_path / "object.ring.gz"
    write_ring(str(path), RingData(PART_POWER, 3, devs, tables))
    (tmp_path / "swiftlite.conf").write_text(
        "[hash]\nhash_path_prefix = pre\nhash_path_suffix = suf\n")
    yield load_ring(str(path))
    set_hash_path_affixes("", "")  # the affixes are process-global: leave them as found


def make_items(ring, n=400):
    items = [Item(f"img/{i:04d}.jpg", f"/x/{i}", 10) for i in range(n)]
    place(items, ring, "AUTH_test", "photos")
    return items


def test_place_uses_the_ring(ring):
    items = make_items(ring)
    for it in items:
        part, nodes = ring.get_nodes("AUTH_test", "photos", it.name)
        assert it.part == part and it.dev == nodes[0]["id"]
    # the names spread over every partition and device of the tiny ring
    assert len({it.part for it in items}) == 1 << PART_POWER
    assert len({it.dev for it in items}) == NDEV


def test_path_order_is_sorted_names(ring):
    items = make_items(ring)
    out = order_items(list(reversed(items)), "path")
    assert [it.name for it in out] == sorted(it.name for it in items)


def test_partition_order(ring):
    items = make_items(ring)
    out = order_items(items, "partition")
    assert len(out) == len(items)
    keys = [(it.part, it.name) for it in out]
    assert keys == sorted(keys)


def test_interleaved_round_robins_devices_in_partition_order(ring):
    items = make_items(ring)
    out = order_items(items, "interleaved")
    assert sorted(it.name for it in out) == sorted(it.name for it in items)
    # every window of NDEV consecutive uploads touches every device while all have work
    per_dev = {d: sum(1 for it in items if it.dev == d) for d in range(NDEV)}
    full = min(per_dev.values()) * NDEV
    for i in range(0, full, NDEV):
        assert {it.dev for it in out[i:i + NDEV]} == set(range(NDEV))
    # within one device the uploads go in partition order
    for d in range(NDEV):
        mine = [(it.part, it.name) for it in out if it.dev == d]
        assert mine == sorted(mine)


def test_hash_affixes_change_placement(ring, tmp_path):
    # the [hash] section beside the ring was applied: placement differs without it
    with_affix = [it.part for it in make_items(ring, 50)]
    set_hash_path_affixes("", "")
    try:
        without = [it.part for it in make_items(ring, 50)]
    finally:
        set_hash_path_affixes("pre", "suf")
    assert with_affix != without


def test_unknown_order_rejected():
    with pytest.raises(ValueError):
        order_items([], "random")
