"""swiftlite.conf's [storage-policy:N] sections (swiftlite/common/policies.py)."""

from __future__ import annotations

import configparser

import pytest

from swiftlite.common import policies
from swiftlite.obj import fileformat


def parse(text: str) -> policies.Policies:
    p = configparser.ConfigParser(interpolation=None)
    p.read_string(text)
    return policies.parse(p)


def test_no_sections_is_policy_0_alone():
    ps = parse("[hash]\nhash_path_prefix = x\n")
    assert [p.index for p in ps] == [0]
    assert ps.default.name == "Policy-0" and ps.default.ring_name == "object"
    assert ps.info() == [{"name": "Policy-0", "aliases": "Policy-0", "default": True}]


def test_names_aliases_default_and_rings():
    ps = parse("[storage-policy:0]\nname = gold\n"
               "[storage-policy:2]\nname = silver\naliases = cheap, Archive\ndefault = yes\n"
               "[storage-policy:3]\nname = old\ndeprecated = yes\n")
    assert ps.default.index == 2
    assert ps.by_name("ARCHIVE").index == 2 and ps.by_name(" gold ").index == 0
    assert ps.by_name("bronze") is None
    assert ps.get(2).ring_name == "object-2" and ps.get(2).datadir == "objects-2"
    assert ps.get(3).info() == {"name": "old", "aliases": "old", "deprecated": True}


def test_policy_0_is_added_and_a_default_chosen():
    ps = parse("[storage-policy:1]\nname = silver\n")
    assert ps.get(0).name == "Policy-0"
    assert ps.default.index == 0


@pytest.mark.parametrize("text,message", [
    ("[storage-policy:1]\nname = ec\npolicy_type = erasure_coding\n", "not built yet"),
    ("[storage-policy:1]\nname = x\npolicy_type = magic\n", "unknown policy_type"),
    ("[storage-policy:0]\nname = a\n[storage-policy:1]\nname = A\n", "used twice"),
    ("[storage-policy:0]\nname = a\ndefault = yes\n[storage-policy:1]\nname = b\n"
     "default = yes\n", "more than one"),
    ("[storage-policy:0]\nname = a\ndefault = yes\ndeprecated = yes\n", "cannot be deprecated"),
    ("[storage-policy:1]\nname = bad name\n", "invalid policy name"),
])
def test_inconsistent_policies_are_refused(text, message):
    with pytest.raises(policies.PolicyError, match=message):
        parse(text)


def test_policy_parts_name_their_data_dir():
    assert fileformat.part_dir("/d", 5) == "/d/objects/5"
    p = fileformat.policy_part(5, 1)
    assert p == fileformat.policy_part("5", 1) and str(p) == "5" and f"{p}" == "5"
    assert fileformat.part_dir("/d", p) == "/d/objects-1/5"
    assert type(fileformat.policy_part(5, 0)) is int  # policy 0 stays a plain int
    assert p != fileformat.policy_part(5, 2) and hash(p) != hash(fileformat.policy_part(5, 2))
    assert policies.index_of_datadir("objects-12") == 12
    assert policies.index_of_datadir("objects") == 0
    assert policies.index_of_datadir("objectsx") is None
