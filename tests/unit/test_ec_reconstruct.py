"""The reconstructor's decisions (obj/ec_plan.py) and its rebuild of one archive from k
others (obj/engine/ec_rebuild.py), without servers."""

from __future__ import annotations

import random

import pytest

from swiftlite.common.ec import ECScheme, Encoder
from swiftlite.obj import ec_plan
from swiftlite.obj.engine import bodysum, ec_rebuild, fileformat
from swiftlite.obj.engine.digests import state_hash

SCHEME = ECScheme(4, 2, segment_size=4096)
H1 = "0123456789abcdef0123456789abc123"
H2 = "fedcba9876543210fedcba9876543123"
T1, T2, T3 = "1700000001.00000", "1700000002.00000", "1700000003.00000"


def digest_of(states: dict[str, dict[str, str]]) -> dict[str, bytes]:
    """What digests.py keeps for these states (XOR of each object's state hash)."""
    out = {}
    for s, objs in states.items():
        d = 0
        for h, st in objs.items():
            d ^= state_hash(h, st)
        if d:
            out[s] = d.to_bytes(16, "big")
    return out


def test_primaries_of_different_indexes_holding_the_same_versions_agree():
    # Archive 0 and archive 3 of the same durable version: the same state, so the same
    # digest; nothing differs, nothing is listed.
    a = {"123": {H1: f"{T1}.data"}}
    b = {"123": {H1: f"{T1}.data"}}
    assert ec_plan.differing(digest_of(a), digest_of(b)) == []
    assert ec_plan.differing(digest_of(a), {}) == ["123"]
    assert ec_plan.differing(digest_of(a), digest_of({"123": {H1: f"{T2}.data"}})) == ["123"]


def test_missing_or_older_archive_is_rebuilt_from_the_holders():
    mine = {"123": {H2: f"{T1}.data"}}  # H1 missing, H2 older
    theirs = {1: {"123": {H1: f"{T1}.data", H2: f"{T2}.data"}},
              2: {"123": {H1: f"{T1}.data", H2: f"{T1}.data"}}}
    plan = ec_plan.plan_primary(mine, theirs)
    assert sorted(plan.rebuild) == [(H1, f"{T1}.data", [1, 2]), (H2, f"{T2}.data", [1])]
    assert plan.send == {}


def test_tombstones_go_to_primaries_that_lack_them_never_archives():
    mine = {"123": {H1: f"{T2}.ts", H2: f"{T3}.data"}}
    theirs = {1: {"123": {H1: f"{T1}.data"}}, 2: {"123": {H1: f"{T2}.ts"}}}
    plan = ec_plan.plan_primary(mine, theirs)
    assert plan.rebuild == []  # the newer tombstone wins; H2 is newest here: peers rebuild
    assert plan.send == {1: [(H1, f"{T2}.ts")]}


def test_a_newer_tombstone_elsewhere_means_no_rebuild():
    plan = ec_plan.plan_primary({"123": {}}, {1: {"123": {H1: f"{T2}.ts"}},
                                              2: {"123": {H1: f"{T1}.data"}}})
    assert plan.rebuild == [] and plan.send == {}


def test_meta_goes_to_peers_with_the_same_archive_version():
    mine = {"123": {H1: f"{T1}.data|{T2}.meta"}}
    theirs = {1: {"123": {H1: f"{T1}.data"}}, 2: {"123": {}}}
    plan = ec_plan.plan_primary(mine, theirs)
    assert plan.send == {1: [(H1, f"{T2}.meta")]}


def test_revert_sends_each_archive_to_its_index_and_tombstones_everywhere():
    states = {"123": {H1: f"{T1}.data", H2: f"{T2}.ts"}, "abc": {"f" * 29 + "abc": f"{T1}.data"}}
    out = ec_plan.plan_revert(states, {H1: 4, "f" * 29 + "abc": None}, 6)
    assert out[4] == [(H1, f"{T1}.data"), (H2, f"{T2}.ts")]
    assert out[0] == [(H2, f"{T2}.ts")]
    assert sorted(out) == list(range(6))


def archive_files(body: bytes) -> list[bytes]:
    """The six .data files an object server keeps for `body` (archive + trailer)."""
    enc = Encoder(SCHEME)
    pieces = [enc.feed(body), enc.finish()]
    out = []
    for i in range(SCHEME.n):
        archive = b"".join(p[i] for p in pieces)
        sums = bodysum.Summer().feed([archive])
        md = {"name": "/a/c/o", "X-Timestamp": T1, "Content-Type": "x/y",
              "Content-Length": str(len(archive)), "ETag": sums.etag,
              bodysum.CHECK_KEY: sums.check, **enc.archive_info(i).to_metadata()}
        out.append(archive + fileformat.pack_trailer(md))
    return out


@pytest.mark.parametrize("size", [0, 1, 4096, 3 * 4096 + 17])
@pytest.mark.parametrize("lost", [0, 3, 5])
def test_rebuild_gives_back_the_very_file(size, lost):
    files = archive_files(random.Random(size).randbytes(size))
    sources = {}
    for i, f in enumerate(files):
        if i != lost:
            src = ec_rebuild.parse_source(f)
            assert src is not None
            sources[i] = src
    made = ec_rebuild.rebuild(lost, sources)
    # The same archive bytes and the same metadata (in whatever order).
    md, body_len = fileformat.parse_tail(made, len(made))
    assert (md, body_len) == fileformat.parse_tail(files[lost], len(files[lost]))
    assert made[:body_len] == files[lost][:body_len]
    src = ec_rebuild.parse_source(made)
    assert src is not None and src.info.frag_index == lost


def test_corrupt_sources_are_refused_and_too_few_fail():
    files = archive_files(random.Random(2).randbytes(9000))
    bad = bytearray(files[1])
    bad[10] ^= 0xFF
    assert ec_rebuild.parse_source(bytes(bad)) is None
    assert ec_rebuild.parse_source(b"junk") is None
    sources = {i: ec_rebuild.parse_source(files[i]) for i in (2, 3, 4)}
    with pytest.raises(ec_rebuild.RebuildError):
        ec_rebuild.rebuild(0, sources)


def test_a_peer_that_did_not_list_a_suffix_is_not_sent_what_it_holds():
    # Peer 1 agreed with us on suffix 123 (not listed); peer 2 lacks our tombstone there.
    mine = {"123": {H1: f"{T2}.ts"}}
    plan = ec_plan.plan_primary(mine, {1: {"abc": {}}, 2: {"123": {}}})
    assert plan.send == {2: [(H1, f"{T2}.ts")]}
