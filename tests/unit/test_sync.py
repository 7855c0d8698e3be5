"""Object sync rules: which files a peer lacks, when a handoff copy may go, frame checks."""

from __future__ import annotations

import hashlib
import os
import time

from swiftlite.common.timestamp import Timestamp
from swiftlite.obj import sync
from swiftlite.obj.engine import digests, fileformat

T1, T2, T3 = "0000000001.00000", "0000000002.00000", "0000000003.00000"


def test_files_to_send():
    assert sync.files_to_send(f"{T1}.data", None) == [f"{T1}.data"]
    assert sync.files_to_send(f"{T2}.data", f"{T1}.data") == [f"{T2}.data"]
    assert sync.files_to_send(f"{T1}.data", f"{T2}.ts") == []  # peer is newer
    assert sync.files_to_send(f"{T1}.ts", f"{T1}.data") == [f"{T1}.ts"]  # a .ts wins a tie
    assert sync.files_to_send(f"{T1}.data|{T2}.meta", f"{T1}.data") == [f"{T2}.meta"]
    assert sync.files_to_send(f"{T1}.data|{T2}.meta", None) == [f"{T1}.data", f"{T2}.meta"]
    # A .meta older than the peer's newer .data (or under a .ts) is obsolete there.
    assert sync.files_to_send(f"{T1}.data|{T2}.meta", f"{T3}.data") == []
    assert sync.files_to_send(f"{T1}.data|{T3}.meta", f"{T2}.ts") == []
    assert sync.covered(f"{T1}.data|{T2}.meta", f"{T1}.data|{T2}.meta")
    assert not sync.covered(f"{T1}.data", "")


def test_tombstone_expired():
    old = Timestamp.parse(time.time() - 100).internal
    assert sync.tombstone_expired(f"{old}.ts", 50)
    assert not sync.tombstone_expired(f"{old}.ts", 500)
    assert not sync.tombstone_expired(f"{old}.data", 50)


def _data_file(body: bytes, ts: str) -> bytes:
    md = {"ETag": hashlib.md5(body).hexdigest(), "Content-Length": str(len(body)),
          "X-Timestamp": ts, "name": "/a/c/o", "Content-Type": "x/y"}
    return body + fileformat.pack_trailer(md)


def test_store_whole_refuses_corrupt_and_stale(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    h = "0" * 29 + "abc"
    good = _data_file(b"hello", T2)
    bad = bytearray(good)
    bad[0] ^= 1
    assert sync.store_whole(dev, 0, h, f"{T2}.data", bytes(bad), False) == "bad"
    assert sync.store_whole(dev, 0, h, f"{T2}.data", good, False) == "stored"
    assert sync.store_whole(dev, 0, h, f"{T1}.data", _data_file(b"old", T1), False) == "stale"
    assert digests.get_digests(dev, 0) == digests.recompute(dev, 0) != {}
    assert os.listdir(fileformat.hash_dir(dev, 0, h)) == [f"{T2}.data"]


def test_remove_if_unchanged_keeps_digest_exact(tmp_path):
    dev = str(tmp_path / "d1")
    os.makedirs(dev)
    h = "1" * 29 + "abc"
    sync.store_whole(dev, 0, h, f"{T1}.data", _data_file(b"x", T1), False)
    assert not sync.remove_if_unchanged(dev, 0, h, f"{T2}.data")  # state moved on: kept
    assert sync.remove_if_unchanged(dev, 0, h, f"{T1}.data")
    assert digests.get_digests(dev, 0) == {} == digests.recompute(dev, 0)
    assert not os.path.exists(fileformat.hash_dir(dev, 0, h))


def test_frame_roundtrip():
    f = sync.frame("a" * 32, f"{T1}.data", 5)
    (n,) = sync.FRAME_HEAD.unpack(f[:4])
    assert len(f) == 4 + n
