"""`swiftlite up --ec K+M`: the EC policy's config and ring (swiftlite/allinone.py)."""

from __future__ import annotations

from argparse import Namespace
from collections import Counter

import pytest

from swiftlite.allinone import build, parse_ec
from swiftlite.common import policies
from swiftlite.common.ec import ECScheme
from swiftlite.ring import Ring


def _args(root: str, **kw) -> Namespace:
    base = dict(root=root, bind="127.0.0.1", port=0, nodes=3, devices=2, replicas=3,
                part_power=6, workers=1, no_daemons=True, policies="", ec="4+2",
                ec_segment_size=None, ec_type=None)
    return Namespace(**{**base, **kw})


def test_three_nodes_of_two_devices_hold_two_archives_each(tmp_path):
    plan = build(_args(str(tmp_path / "c"), ec_segment_size=4096))
    ps = policies.load(plan["etc_dir"])
    ec = ps.by_name("ec")
    assert ec.index == 1 and ec.ec == ECScheme(4, 2, segment_size=4096)
    assert ps.default.index == 0 and not ps.default.is_ec
    ring = Ring.load(f"{plan['etc_dir']}/object-1.ring.gz")
    ec.check_ring(ring)
    assert Ring.load(f"{plan['etc_dir']}/object.ring.gz").replica_count == 3
    for part in range(2 ** 6):
        per_node = Counter(n["port"] for n in ring.get_part_nodes(part))
        assert sorted(per_node.values()) == [2, 2, 2]


def test_ec_after_other_policies(tmp_path):
    plan = build(_args(str(tmp_path / "c"), policies="silver"))
    ps = policies.load(plan["etc_dir"])
    assert [(p.index, p.name, p.is_ec) for p in ps] == [(0, "Policy-0", False),
                                                        (1, "silver", False), (2, "ec", True)]


@pytest.mark.parametrize("spec", ["4", "4-2", "0+2", "4+0", "a+b", ""])
def test_bad_ec_specs(spec):
    with pytest.raises(ValueError):
        parse_ec(spec)


def test_too_few_devices_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="needs at least 6 devices"):
        build(_args(str(tmp_path / "c"), nodes=1, devices=4))
    assert not (tmp_path / "c").exists()
