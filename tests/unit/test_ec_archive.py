"""Fragment archives on an object server's disk (swiftlite/obj/engine/ec_archive.py): the footer of
an EC PUT's body, and the two phases (.pend, then .data)."""

from __future__ import annotations

import hashlib
import os
import random

import pytest
import xxhash

from swiftlite.common.ec import ECScheme, Encoder
from swiftlite.common.ec.meta import EC_ARCHIVE_ETAG
from swiftlite.obj.engine import (
    bodysum,
    digests,
    ec_archive,
    fileformat,
    pending_marks,
    reading,
    writing,
)
from swiftlite.obj.engine.hashdir import Conflict

SCHEME = ECScheme(4, 2, segment_size=4096)
HASH = "0123456789abcdef0123456789abc123"
PART = fileformat.policy_part(7, 1)


def encoded(body: bytes, index: int = 0) -> tuple[bytes, bytes, Encoder]:
    enc = Encoder(SCHEME)
    pieces = [enc.feed(body), enc.finish()]
    archive = b"".join(p[index] for p in pieces)
    return archive, ec_archive.pack_footer(enc.archive_info(index)), enc


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 20000])
def test_footer_splits_off_whatever_the_chunks(size):
    archive, footer, enc = encoded(random.Random(size).randbytes(size), 2)
    # The proxy's footer: the archive's fast check where the ArchiveInfo has its MD5.
    fast = Encoder(SCHEME, archive_md5=False)
    assert b"".join(p[2] for p in (fast.feed(random.Random(size).randbytes(size)),
                                    fast.finish())) == archive
    check_footer = ec_archive.pack_footer(fast.footer_metadata(2))
    for stream, want in ((archive + footer, hashlib.md5(archive).hexdigest()),
                         (archive + check_footer,
                          "xxh3-64:" + xxhash.xxh3_64(archive).hexdigest())):
        split_name(stream, archive, enc.archive_info(2).to_metadata(), want)


def split_name(stream: bytes, archive: bytes, metadata: dict[str, str], want: str) -> None:
    rng = random.Random(1)
    for _ in range(5):
        splitter = ec_archive.FooterSplitter()
        out, i = [], 0
        while i < len(stream):
            n = rng.choice([1, 7, 1000, 5000, 70000])
            out += splitter.feed(stream[i:i + n])
            i += n
        rest, md, expected = splitter.finish()
        assert b"".join(out + rest) == archive
        assert expected == want
        if want.startswith("xxh3-64:"):  # the MD5 is the writer's to compute
            assert md == {**metadata, EC_ARCHIVE_ETAG: bodysum.OWN_MD5}
        else:
            assert md == metadata


def test_a_footers_fast_check_is_checked_and_the_md5_recorded(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    archive, footer, _ = encoded(b"abc" * 5000)
    good = "xxh3-64:" + xxhash.xxh3_64(archive).hexdigest()
    md = {"name": "/a/c/o", "Content-Type": "x/y", EC_ARCHIVE_ETAG: bodysum.OWN_MD5}
    w = writing.DataWriter(dev, PART, HASH, fsync=False, ext="data")
    with pytest.raises(writing.ETagMismatch):
        w.put([archive], md, "0000000001.00000", "xxh3-64:" + "0" * 16)
    w = writing.DataWriter(dev, PART, HASH, fsync=False, ext="data")
    res = w.put([archive], md, "0000000001.00000", good)
    assert res.metadata[EC_ARCHIVE_ETAG] == hashlib.md5(archive).hexdigest() == \
        res.metadata["ETag"]


def test_bad_footers_are_refused():
    archive, footer, _ = encoded(b"x" * 5000)
    for stream, message in [(archive, "no EC footer|too short"),
                            (archive[:-1] + footer, "bytes, not the"),
                            (archive + footer[:-1] + b"X", "no EC footer")]:
        splitter = ec_archive.FooterSplitter()
        splitter.feed(stream)
        with pytest.raises(ec_archive.BadFooter, match=message):
            splitter.finish()


def _put(dev: str, ts: str, body: bytes, ext: str) -> dict[str, str]:
    archive, _, enc = encoded(body)
    md = {"name": "/a/c/o", "Content-Type": "x/y", **enc.archive_info(0).to_metadata()}
    w = writing.DataWriter(dev, PART, HASH, fsync=False, ext=ext)
    w.put([archive], md, ts, enc.archive_etag(0))
    return md


def _current(dev: str) -> str | None:
    info = reading.open_object(dev, PART, HASH)
    info.close()
    return info.timestamp if info.status == "ok" else None


def test_pending_archive_is_not_the_object_until_made_durable(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    _put(dev, "0000000001.00000", b"old" * 3000, "data")
    before = digests.get_digests(dev, PART)
    # Phase 1 of a newer write: on disk, but neither read nor in the digests (a kill -9
    # here leaves the old object whole).
    _put(dev, "0000000002.00000", b"new" * 3000, ec_archive.PENDING)
    assert _current(dev) == "0000000001.00000"
    assert digests.get_digests(dev, PART) == before
    assert ec_archive.pending_archives(dev, PART, HASH) == ["0000000002.00000.pend"]
    # ...and a reader that knows the version is durable elsewhere may open it.
    info = ec_archive.open_pending(dev, PART, HASH, "0000000002.00000")
    assert info.status == "ok" and info.body_len == int(
        info.metadata["Content-Length"]) and info.metadata["X-Timestamp"] == "0000000002.00000"
    info.close()
    assert ec_archive.open_pending(dev, PART, HASH, "0000000001.00000").status == "missing"
    # Phase 2.
    res, md = ec_archive.make_durable(dev, PART, HASH, "0000000002.00000", fsync=False)
    assert res is not None and md["X-Object-Sysmeta-Ec-Content-Length"] == "9000"
    assert _current(dev) == "0000000002.00000"
    assert digests.get_digests(dev, PART) != before
    assert not ec_archive.pending_archives(dev, PART, HASH)
    hdir = fileformat.hash_dir(dev, PART, HASH)
    assert sorted(os.listdir(hdir)) == ["0000000002.00000.data"]  # the old .data removed
    # Repeating it changes nothing.
    assert ec_archive.make_durable(dev, PART, HASH, "0000000002.00000", fsync=False)[0] is None
    with pytest.raises(ec_archive.PendingMissing):
        ec_archive.make_durable(dev, PART, HASH, "0000000003.00000", fsync=False)
    # An older write's commit, after a newer one removed its pending archive, lost the race.
    with pytest.raises(Conflict):
        ec_archive.make_durable(dev, PART, HASH, "0000000001.50000", fsync=False)


def test_a_pending_archive_older_than_the_object_never_becomes_it(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    _put(dev, "0000000002.00000", b"a" * 100, ec_archive.PENDING)
    writing.write_marker(dev, PART, HASH, "0000000003.00000", "ts", {"name": "/a/c/o"},
                         fsync=False)
    with pytest.raises(Conflict):
        ec_archive.make_durable(dev, PART, HASH, "0000000002.00000", fsync=False)
    assert not ec_archive.pending_archives(dev, PART, HASH)
    assert reading.open_object(dev, PART, HASH).status == "deleted"


def test_listing_size_and_etag_are_the_objects():
    _, _, enc = encoded(b"z" * 10000)
    md = {"Content-Length": "2900", "ETag": "f" * 32, **enc.archive_info(1).to_metadata()}
    assert ec_archive.listing_size_etag(md) == ("10000", enc.etag)
    assert ec_archive.listing_size_etag({"Content-Length": "5", "ETag": "e"}) == ("5", "e")


def test_pending_archives_are_marked_until_committed(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    _put(dev, "0000000001.00000", b"a" * 5000, ec_archive.PENDING)
    _put(dev, "0000000002.00000", b"b" * 5000, ec_archive.PENDING)
    assert sorted(pending_marks.marks(dev)) == [f"1.7.{HASH}.0000000001.00000",
                                                f"1.7.{HASH}.0000000002.00000"]
    ec_archive.make_durable(dev, PART, HASH, "0000000002.00000", fsync=False)
    # The commit removed its own mark and (as before) the older pending archive; that one's
    # mark stays until a sweep finds nothing left of it.
    assert pending_marks.marks(dev) == [f"1.7.{HASH}.0000000001.00000"]
    assert ec_archive.pending_archives(dev, PART, HASH) == []
    assert pending_marks.sweep(dev, 60, now=1.0 + 61) == (0, 1)
    assert pending_marks.marks(dev) == []
    # A whole archive (a replica's .data, a rebuilt archive) is never marked.
    _put(dev, "0000000003.00000", b"c" * 5000, "data")
    assert pending_marks.marks(dev) == []


def test_a_sweep_removes_only_pending_archives_older_than_reclaim_age(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    _put(dev, "0000000001.00000", b"old" * 3000, "data")
    _put(dev, "0000001000.00000", b"abandoned" * 500, ec_archive.PENDING)
    _put(dev, "0000005000.00000", b"in flight" * 500, ec_archive.PENDING)
    before = digests.get_digests(dev, PART)
    # At t=4000 with a reclaim age of 2000: the write of t=1000 was abandoned, the one of
    # t=5000 (a clock ahead, or still in flight) is not touched.
    assert pending_marks.sweep(dev, 2000, now=4000.0) == (1, 1)
    assert ec_archive.pending_archives(dev, PART, HASH) == ["0000005000.00000.pend"]
    assert pending_marks.marks(dev) == [f"1.7.{HASH}.0000005000.00000"]
    assert _current(dev) == "0000000001.00000"
    assert digests.get_digests(dev, PART) == before
    # The one left is still committed as ever.
    ec_archive.make_durable(dev, PART, HASH, "0000005000.00000", fsync=False)
    assert _current(dev) == "0000005000.00000" and pending_marks.marks(dev) == []
    # A mark whose hash dir is gone (the partition moved) is just dropped.
    pending_marks.note(dev, fileformat.policy_part(9, 1), "f" * 32, "0000000100.00000")
    assert pending_marks.sweep(dev, 2000, now=4000.0) == (0, 1)
    assert not os.path.exists(fileformat.part_dir(dev, fileformat.policy_part(9, 1)))
