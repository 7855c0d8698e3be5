"""Suffix digests: incremental updates equal a full recompute; drift heals by rehash."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swiftlite.common.hashing import hash_path
from swiftlite.obj.engine import digests, fileformat, hashdir, reading, writing


def put(dev: str, part: int, name: str, ts: float, body: bytes = b"x") -> None:
    w = writing.DataWriter(dev, part, hash_path("a", "c", name), fsync=False)
    w.put([body], {"name": f"/a/c/{name}", "Content-Type": "text/plain"}, f"{ts:016.5f}")


def marker(dev: str, part: int, name: str, ts: float, ext: str) -> None:
    writing.write_marker(dev, part, hash_path("a", "c", name), f"{ts:016.5f}", ext,
                         {"name": f"/a/c/{name}"}, fsync=False)


def test_put_delete_post_track_recompute(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    assert digests.get_digests(dev, 1) == {}
    put(dev, 1, "o1", 1000.0)
    d1 = digests.get_digests(dev, 1)
    suffix = hash_path("a", "c", "o1")[-3:]
    assert list(d1) == [suffix]
    assert d1 == digests.recompute(dev, 1)
    marker(dev, 1, "o1", 1001.0, "meta")
    d2 = digests.get_digests(dev, 1)
    assert d2 != d1 and d2 == digests.recompute(dev, 1)
    marker(dev, 1, "o1", 1002.0, "ts")
    d3 = digests.get_digests(dev, 1)
    assert d3 not in (d1, d2) and d3 == digests.recompute(dev, 1)
    # The tombstone is the only file left, and it is what the digest describes.
    hdir = fileformat.hash_dir(dev, 1, hash_path("a", "c", "o1"))
    assert os.listdir(hdir) == ["0000001002.00000.ts"]


def test_two_replicas_agree_exactly_when_states_agree(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a)
    os.makedirs(b)
    for dev in (a, b):
        put(dev, 0, "x", 10.0)
        put(dev, 0, "y", 11.0)
    # Different orders, same end state.
    marker(a, 0, "x", 12.0, "ts")
    marker(b, 0, "x", 12.0, "ts")
    assert digests.get_digests(a, 0) == digests.get_digests(b, 0)
    put(b, 0, "y", 13.0)
    assert digests.get_digests(a, 0) != digests.get_digests(b, 0)


def test_fold_persists_and_is_idempotent(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    for i in range(20):
        put(dev, 2, f"o{i}", 100.0 + i)
    before = digests.get_digests(dev, 2)
    part_dir = os.path.join(dev, "objects", "2")
    assert os.path.exists(os.path.join(part_dir, digests.JOURNAL))
    assert digests.fold(dev, 2) == before
    assert not os.path.exists(os.path.join(part_dir, digests.JOURNAL))
    assert digests.fold(dev, 2) == before
    put(dev, 2, "late", 500.0)
    assert digests.get_digests(dev, 2) == digests.recompute(dev, 2)


def test_crash_between_digest_write_and_journal_unlink_does_not_double_apply(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    put(dev, 3, "a", 1.0)
    put(dev, 3, "b", 2.0)
    part_dir = os.path.join(dev, "objects", "3")
    jpath = os.path.join(part_dir, digests.JOURNAL)
    saved = open(jpath, "rb").read()
    digests.fold(dev, 3)
    # As if the fold died after renaming the digest file but before unlinking the journal.
    with open(jpath, "wb") as f:
        f.write(saved)
    put(dev, 3, "c", 3.0)  # appended to the same (already partly folded) journal
    assert digests.get_digests(dev, 3) == digests.recompute(dev, 3)
    assert digests.fold(dev, 3) == digests.recompute(dev, 3)


def test_drift_is_healed_by_rehash_of_that_suffix_only(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    put(dev, 4, "keep", 1.0)
    put(dev, 4, "drift", 1.0)
    h = hash_path("a", "c", "drift")
    hdir = fileformat.hash_dir(dev, 4, h)
    # A crash between rename and journal append: a newer file with no journal record.
    with open(os.path.join(hdir, "0000000005.00000.ts"), "wb") as f:
        f.write(fileformat.pack_trailer({"X-Timestamp": "0000000005.00000"}))
    assert digests.get_digests(dev, 4) != digests.recompute(dev, 4)
    healed = digests.rehash_suffixes(dev, 4, [h[-3:]])
    assert healed == digests.recompute(dev, 4) == digests.get_digests(dev, 4)


def test_object_states_lists_current_files(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    put(dev, 5, "o", 1.0)
    marker(dev, 5, "o", 2.0, "meta")
    h = hash_path("a", "c", "o")
    assert digests.object_states(dev, 5, h[-3:]) == {
        h: "0000000001.00000.data|0000000002.00000.meta"}
    assert digests.object_states(dev, 5, "fff" if h[-3:] != "fff" else "000") == {}


def test_quarantine_updates_digest(tmp_path):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    put(dev, 6, "o", 1.0)
    put(dev, 6, "p", 1.0)
    assert reading.quarantine(dev, 6, hash_path("a", "c", "o"))
    assert digests.get_digests(dev, 6) == digests.recompute(dev, 6)
    assert len(os.listdir(os.path.join(dev, "quarantined", "objects"))) == 1


def test_big_journal_is_folded_on_read(tmp_path, monkeypatch):
    monkeypatch.setattr(digests, "FOLD_BYTES", 200)
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    for i in range(30):
        put(dev, 7, f"o{i}", 10.0 + i)
    jpath = os.path.join(dev, "objects", "7", digests.JOURNAL)
    assert os.path.getsize(jpath) > 200
    assert digests.get_digests(dev, 7) == digests.recompute(dev, 7)
    assert not os.path.exists(jpath)


OPS = st.lists(
    st.tuples(st.sampled_from(["put", "delete", "post", "fold", "quarantine"]),
              st.integers(0, 2),           # partition
              st.integers(0, 5),           # object
              st.integers(-2, 5)),         # timestamp step (<= 0: stale, expect a refusal)
    min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_property_digests_equal_full_recompute(ops):
    with tempfile.TemporaryDirectory() as root:
        dev = os.path.join(root, "sda")
        os.makedirs(dev)
        clock = 1000.0
        for op, part, obj, step in ops:
            clock += step
            name = f"obj{obj}"
            try:
                if op == "put":
                    put(dev, part, name, clock)
                elif op == "delete":
                    marker(dev, part, name, clock, "ts")
                elif op == "post":
                    marker(dev, part, name, clock, "meta")
                elif op == "fold":
                    digests.fold(dev, part)
                else:
                    reading.quarantine(dev, part, hash_path("a", "c", name))
            except (hashdir.Conflict, writing.NotFound):
                pass
        for part in range(3):
            assert digests.get_digests(dev, part) == digests.recompute(dev, part)
        assert not os.listdir(os.path.join(dev, "tmp")) if os.path.isdir(
            os.path.join(dev, "tmp")) else True


@pytest.mark.parametrize("bad", ["zzz", "12", "1234", ""])
def test_rehash_ignores_bad_suffixes(tmp_path, bad):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    put(dev, 0, "o", 1.0)
    assert digests.rehash_suffixes(dev, 0, [bad]) == digests.recompute(dev, 0)


def test_packed_digests_match_with_and_without_journal(tmp_path):
    import msgpack

    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    assert msgpack.unpackb(digests.get_digests_packed(dev, 0)) == {}
    for i in range(5):
        put(dev, 0, f"o{i}", 10.0 + i)
    assert msgpack.unpackb(digests.get_digests_packed(dev, 0)) == digests.recompute(dev, 0)
    digests.fold(dev, 0)  # no journal now: the file's own map is served
    assert msgpack.unpackb(digests.get_digests_packed(dev, 0)) == digests.recompute(dev, 0)
    marker(dev, 0, "o1", 50.0, "ts")
    assert msgpack.unpackb(digests.get_digests_packed(dev, 0)) == digests.recompute(dev, 0)


def _record_offsets(jpath: str) -> list[int]:
    """Start offsets of the journal's delta records (after its header)."""
    import msgpack

    data = open(jpath, "rb").read()
    unpacker = msgpack.Unpacker(use_list=False)
    unpacker.feed(data)
    offsets = []
    for _ in unpacker:
        offsets.append(unpacker.tell())
    return offsets[:-1]  # where each record after the header starts


@pytest.mark.parametrize("how", ["garbage", "torn"])
def test_damaged_journal_is_logged_and_every_suffix_rederived(tmp_path, caplog, how):
    """Records after a damaged one are not dropped: the fold logs the damage and re-derives
    the partition's digests from its hash dirs before the journal goes."""
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    for i in range(12):
        put(dev, 8, f"o{i}", 100.0 + i)
    jpath = os.path.join(dev, "objects", "8", digests.JOURNAL)
    offsets = _record_offsets(jpath)
    with open(jpath, "r+b") as f:
        if how == "garbage":  # a bad byte in the 3rd record: the 9 after it are unreadable
            f.seek(offsets[2])
            f.write(b"\xc1")
        else:  # a crash tore the last record (the fold holds the lock: nobody is appending)
            f.truncate(os.path.getsize(jpath) - 5)
    caplog.set_level("ERROR", logger="swiftlite.object.digests")
    # A shared reader may be looking at an append in progress; the fold (exclusive) is not.
    read = digests.get_digests if how == "garbage" else digests.fold
    assert read(dev, 8) == digests.recompute(dev, 8)
    assert not os.path.exists(jpath)
    assert any(jpath.rsplit("/", 1)[0] in r.getMessage() and "re-deriving" in r.getMessage()
               for r in caplog.records), caplog.text
    put(dev, 8, "later", 500.0)  # a new journal from there
    assert digests.get_digests(dev, 8) == digests.recompute(dev, 8)
    assert digests.fold(dev, 8) == digests.recompute(dev, 8)


def test_damaged_journal_on_rehash_and_damaged_digest_file(tmp_path, caplog):
    dev = str(tmp_path / "sda")
    os.makedirs(dev)
    for i in range(6):
        put(dev, 9, f"o{i}", 10.0 + i)
    part_dir = os.path.join(dev, "objects", "9")
    with open(os.path.join(part_dir, digests.JOURNAL), "r+b") as f:
        f.write(b"\xc1")  # the header itself
    caplog.set_level("ERROR", logger="swiftlite.object.digests")
    assert digests.rehash_suffixes(dev, 9, []) == digests.recompute(dev, 9)
    assert "no journal header" in caplog.text
    caplog.clear()
    # A digest file that cannot be read is not an empty partition either.
    with open(os.path.join(part_dir, digests.DIGESTS), "r+b") as f:
        f.seek(digests._HEAD.size)
        f.write(b"\xc1")
    assert digests.get_digests(dev, 9) == digests.recompute(dev, 9) != {}
    assert "unreadable" in caplog.text
    assert digests.get_digests(dev, 9) == digests.recompute(dev, 9)
