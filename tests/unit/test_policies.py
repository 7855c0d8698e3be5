"""swiftlite.conf's [storage-policy:N] sections (swiftlite/common/policies.py)."""

from __future__ import annotations

import configparser

import pytest

from swiftlite.common import policies
from swiftlite.common.ec import DEFAULT_EC_TYPE, DEFAULT_SEGMENT_SIZE, ECScheme
from swiftlite.obj.engine import fileformat


def parse(text: str) -> policies.Policies:
    p = configparser.ConfigParser(interpolation=None)
    p.read_string(text)
    return policies.parse(p)


def test_no_sections_is_policy_0_alone():
    ps = parse("[hash]\nhash_path_prefix = x\n")
    assert [p.index for p in ps] == [0]
    assert ps.default.name == "Policy-0" and ps.default.ring_name == "object"
    assert ps.info() == [{"name": "Policy-0", "aliases": "Policy-0", "default": True,
                          "policy_type": "replication"}]


def test_names_aliases_default_and_rings():
    ps = parse("[storage-policy:0]\nname = gold\n"
               "[storage-policy:2]\nname = silver\naliases = cheap, Archive\ndefault = yes\n"
               "[storage-policy:3]\nname = old\ndeprecated = yes\n")
    assert ps.default.index == 2
    assert ps.by_name("ARCHIVE").index == 2 and ps.by_name(" gold ").index == 0
    assert ps.by_name("bronze") is None
    assert ps.get(2).ring_name == "object-2" and ps.get(2).datadir == "objects-2"
    assert ps.get(3).info() == {"name": "old", "aliases": "old", "deprecated": True,
                                "policy_type": "replication"}


def test_policy_0_is_added_and_a_default_chosen():
    ps = parse("[storage-policy:1]\nname = silver\n")
    assert ps.get(0).name == "Policy-0"
    assert ps.default.index == 0


EC = "[storage-policy:1]\nname = ec\npolicy_type = erasure_coding\n"


@pytest.mark.parametrize("text,message", [
    ("[storage-policy:1]\nname = ec\npolicy_type = erasure_coding\n",
     "needs ec_num_data_fragments"),
    (EC + "ec_num_data_fragments = 4\n", "needs ec_num_parity_fragments"),
    (EC + "ec_num_data_fragments = four\nec_num_parity_fragments = 2\n",
     "ec_num_data_fragments must be an integer"),
    (EC + "ec_num_data_fragments = 0\nec_num_parity_fragments = 2\n", "at least 1"),
    (EC + "ec_num_data_fragments = 30\nec_num_parity_fragments = 3\n", "at most 32"),
    (EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
     "ec_object_segment_size = 100\n", "segment_size must be at least"),
    (EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\nec_type = no_such\n",
     "not usable here"),
    ("[storage-policy:0]\nname = zero\npolicy_type = erasure_coding\n"
     "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n", "policy 0 cannot be"),
    ("[storage-policy:1]\nname = r\nec_num_data_fragments = 4\n", "only apply to"),
    ("[storage-policy:1]\nname = x\npolicy_type = magic\n", "unknown policy_type"),
    ("[storage-policy:0]\nname = a\n[storage-policy:1]\nname = A\n", "used twice"),
    ("[storage-policy:0]\nname = a\ndefault = yes\n[storage-policy:1]\nname = b\n"
     "default = yes\n", "more than one"),
    ("[storage-policy:0]\nname = a\ndefault = yes\ndeprecated = yes\n", "cannot be deprecated"),
    ("[storage-policy:1]\nname = bad name\n", "invalid policy name"),
    (EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
     "small_object_policy = nowhere\n", "not a replicated policy"),
    (EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
     "small_object_policy = ec\n", "not a replicated policy"),
    (EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
     "small_object_policy = Policy-0\nsmall_object_size = 0\n", "positive number"),
    ("[storage-policy:0]\nname = a\n[storage-policy:1]\nname = old\ndeprecated = yes\n"
     "[storage-policy:2]\nname = ec\npolicy_type = erasure_coding\n"
     "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\nsmall_object_policy = old\n",
     "deprecated"),
    ("[storage-policy:1]\nname = r\nsmall_object_policy = Policy-0\n", "only apply to"),
])
def test_inconsistent_policies_are_refused(text, message):
    with pytest.raises(policies.PolicyError, match=message):
        parse(text)


def test_erasure_coding_policy_has_its_scheme():
    ps = parse(EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
               "ec_object_segment_size = 4096\n")
    ec = ps.by_name("ec")
    assert ec.is_ec and ec.ec == ECScheme(4, 2, DEFAULT_EC_TYPE, 4096) and ec.replicas == 6
    assert not ps.get(0).is_ec and ps.get(0).replicas is None
    assert ec.info() == {"name": "ec", "aliases": "ec", "policy_type": "erasure_coding",
                         "ec_type": DEFAULT_EC_TYPE, "ec_num_data_fragments": 4,
                         "ec_num_parity_fragments": 2, "ec_object_segment_size": 4096}
    defaults = parse(EC + "ec_num_data_fragments = 2\nec_num_parity_fragments = 1\n")
    assert defaults.get(1).ec == ECScheme(2, 1, DEFAULT_EC_TYPE, DEFAULT_SEGMENT_SIZE)


def test_an_ec_policy_may_keep_small_objects_in_a_replicated_one():
    ps = parse("[storage-policy:0]\nname = gold\n[storage-policy:1]\nname = silver\n"
               "aliases = cheap\n" + EC.replace(":1]", ":2]") +
               "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
               "small_object_policy = CHEAP\nsmall_object_size = 8192\n")
    assert ps.get(2).small == (1, 8192) and ps.get(2).info()["small_object_size"] == 8192
    assert ps.get(0).small is None and ps.get(1).small is None
    plain = parse(EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
                  "small_object_policy = Policy-0\n")
    assert plain.get(1).small == (0, policies.DEFAULT_SMALL_OBJECT_SIZE)
    assert parse(EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n"
                 ).get(1).small is None


class _Ring:
    def __init__(self, replicas: int) -> None:
        self.replica_count = replicas


def test_ec_ring_must_have_k_plus_m_replicas():
    ps = parse(EC + "ec_num_data_fragments = 4\nec_num_parity_fragments = 2\n")
    ps.get(1).check_ring(_Ring(6))
    ps.get(0).check_ring(_Ring(3))  # replicated: any count
    with pytest.raises(policies.PolicyError, match="must have 6 replicas, not 3"):
        ps.get(1).check_ring(_Ring(3))


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
