"""A stored body's sums: the ETag (MD5) and the fast check a GET verifies instead."""

from __future__ import annotations

import hashlib
import os

import pytest

from swiftlite.obj.engine import bodysum, reading, writing

H = "a" * 29 + "abc"


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "sda"
    d.mkdir()
    return str(d)


def test_put_records_both_sums_and_a_full_read_verifies_the_fast_one(dev):
    body = os.urandom(300_000)
    w = writing.DataWriter(dev, 0, H)
    res = w.put([body[:100_000], body[100_000:]], {"Content-Type": "x/y"}, "1700000000.00000")
    md = res.metadata
    assert md["ETag"] == hashlib.md5(body).hexdigest()
    assert md[bodysum.CHECK_KEY].startswith("xxh3-64:")
    info = reading.open_object(dev, 0, H, read_whole=1 << 20, verify=True)
    assert info.etag_ok is True and info.metadata[bodysum.CHECK_KEY] == md[bodysum.CHECK_KEY]
    info.close()
    (path,) = reading.current_paths(dev, 0, H)
    with open(path, "r+b") as f:  # bit rot in the body: the fast check sees it
        f.seek(5)
        f.write(bytes([body[5] ^ 1]))
    info = reading.open_object(dev, 0, H, read_whole=1 << 20, verify=True)
    assert info.etag_ok is False
    info.close()


@pytest.mark.parametrize("with_check", [True, False])
def test_verifier_uses_the_check_else_the_etag(with_check):
    body = b"x" * 70_000
    sums = bodysum.Summer().feed([body])
    md = {"ETag": sums.etag}
    if with_check:
        md[bodysum.CHECK_KEY] = sums.check
    assert bodysum.body_ok(body, md) and bodysum.all_ok(sums, md)
    assert not bodysum.body_ok(body[:-1] + b"y", md)
    bad = bodysum.Summer().feed([b"y" + body[1:]])
    assert not bodysum.all_ok(bad, md)
    # Files written before the check existed: verified by their MD5 alone.
    assert bodysum.body_ok(body, {"ETag": sums.etag})
    assert not bodysum.body_ok(body, {"ETag": sums.etag, bodysum.CHECK_KEY: bad.check})
