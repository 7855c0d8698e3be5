"""Object files: format, current-file rules, durable writes, refusals, reads, quarantine."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys

import pytest

from swiftlite.obj.engine import fileformat, hashdir, reading, writing

H = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "sda"
    d.mkdir()
    return str(d)


def put(dev, ts, body=b"hello", part=0, h=H, **md):
    w = writing.DataWriter(dev, part, h)
    return w.put([body], {"name": "/a/c/o", "Content-Type": "text/plain", **md}, ts)


def test_trailer_roundtrip():
    md = {"X-Timestamp": "1.00000", "X-Object-Meta-K": "v\u00e9"}
    blob = b"body" + fileformat.pack_trailer(md)
    assert fileformat.parse_tail(blob, len(blob)) == (md, 4)
    # A short tail asks for the bytes it needs.
    need = fileformat.parse_tail(blob[-10:], len(blob))
    assert need == len(blob) - 4
    with pytest.raises(fileformat.CorruptFile):
        fileformat.parse_tail(b"garbage-garbage", 15)


@pytest.mark.parametrize("names,state", [
    ([], ""),
    (["1.00000.data"], "1.00000.data"),
    (["1.00000.data", "2.00000.meta"], "1.00000.data|2.00000.meta"),
    (["3.00000.data", "2.00000.meta"], "3.00000.data"),
    (["1.00000.data", "2.00000.ts", "3.00000.meta"], "2.00000.ts"),
    (["2.00000.data", "2.00000.ts"], "2.00000.ts"),
    (["5.00000.meta", "4.00000.meta"], "5.00000.meta"),
    (["1.00000.data", "1.00000_0000000000000001.ts"], "1.00000_0000000000000001.ts"),
    (["1.00000.data", ".lock", "junk"], "1.00000.data"),
])
def test_state_rules(names, state):
    assert fileformat.state_of(names) == state


def test_put_writes_one_file_with_metadata_and_no_temp(dev):
    res = put(dev, "0000000001.00000", b"abc", **{"X-Object-Meta-Color": "red"})
    assert res.new_state == "0000000001.00000.data" and res.old_state == ""
    hdir = fileformat.hash_dir(dev, 0, H)
    assert os.listdir(hdir) == ["0000000001.00000.data"]
    md, blen = fileformat.read_file_metadata(os.path.join(hdir, "0000000001.00000.data"))
    assert blen == 3
    assert md["ETag"] == hashlib.md5(b"abc").hexdigest()
    assert md["Content-Length"] == "3" and md["X-Object-Meta-Color"] == "red"
    assert md["X-Timestamp"] == "0000000001.00000" and md["name"] == "/a/c/o"
    assert os.listdir(os.path.join(dev, "tmp")) == []
    # A newer PUT replaces the old file.
    put(dev, "0000000002.00000", b"new")
    assert os.listdir(hdir) == ["0000000002.00000.data"]


def test_put_refusals_leave_no_temp(dev):
    put(dev, "0000000005.00000")
    for ts in ("0000000005.00000", "0000000004.00000"):
        with pytest.raises(hashdir.Conflict) as ei:
            put(dev, ts)
        assert ei.value.stored == "0000000005.00000"
    w = writing.DataWriter(dev, 0, H)
    with pytest.raises(writing.ETagMismatch):
        w.put([b"abc"], {}, "0000000009.00000", expected_etag='"' + "0" * 32 + '"')
    assert os.listdir(os.path.join(dev, "tmp")) == []
    assert os.listdir(fileformat.hash_dir(dev, 0, H)) == ["0000000005.00000.data"]


def test_multi_batch_write_and_read(dev):
    w = writing.DataWriter(dev, 0, H)
    w.write([b"a" * 1000, b"b" * 1000])
    w.write([b"c" * 10])
    res = w.put([b"tail"], {"Content-Type": "x/y"}, "0000000001.00000")
    body = b"a" * 1000 + b"b" * 1000 + b"c" * 10 + b"tail"
    assert res.metadata["ETag"] == hashlib.md5(body).hexdigest()
    small = reading.open_object(dev, 0, H, read_whole=1 << 20, verify=True)
    assert small.status == "ok" and small.body == body and small.etag_ok is True
    big = reading.open_object(dev, 0, H, read_whole=100)
    try:
        assert big.body is None and big.fd >= 0 and big.body_len == len(body)
        assert reading.read_chunk(big.fd, 1995, 19) == b"b" * 5 + b"c" * 10 + b"tail"
    finally:
        big.close()


def test_markers_and_merge(dev):
    with pytest.raises(writing.NotFound) as ei:
        writing.write_marker(dev, 0, H, "0000000001.00000", "meta", {})
    assert ei.value.tombstone is None
    put(dev, "0000000002.00000", b"x", **{"X-Object-Meta-A": "1", "X-Delete-At": "9999999999"})
    with pytest.raises(hashdir.Conflict):
        writing.write_marker(dev, 0, H, "0000000002.00000", "meta", {})
    writing.write_marker(dev, 0, H, "0000000003.00000", "meta",
                         {"X-Object-Meta-B": "2", "Content-Type": "new/type"})
    info = reading.open_object(dev, 0, H, read_whole=100)
    assert info.metadata["X-Object-Meta-B"] == "2"
    assert "X-Object-Meta-A" not in info.metadata and "X-Delete-At" not in info.metadata
    assert info.metadata["Content-Type"] == "new/type"
    assert info.metadata["X-Timestamp"] == "0000000002.00000"
    assert info.meta_timestamp == "0000000003.00000"
    res = writing.write_marker(dev, 0, H, "0000000004.00000", "ts", {"name": "/a/c/o"})
    assert res.existed
    assert os.listdir(fileformat.hash_dir(dev, 0, H)) == ["0000000004.00000.ts"]
    info = reading.open_object(dev, 0, H)
    assert info.status == "deleted" and info.timestamp == "0000000004.00000"
    with pytest.raises(writing.NotFound) as ei:
        writing.write_marker(dev, 0, H, "0000000005.00000", "meta", {})
    assert ei.value.tombstone == "0000000004.00000"
    res = writing.write_marker(dev, 0, H, "0000000006.00000", "ts", {})
    assert not res.existed


def test_expired_object_counts_as_absent_for_delete(dev):
    put(dev, "0000000002.00000", b"x", **{"X-Delete-At": "3"})
    assert fileformat.is_expired(reading.open_object(dev, 0, H).metadata)
    assert not writing.write_marker(dev, 0, H, "0000000004.00000", "ts", {}).existed


def test_missing_device(tmp_path):
    gone = str(tmp_path / "nope")
    with pytest.raises(hashdir.DeviceMissing):
        put(gone, "0000000001.00000")
    with pytest.raises(hashdir.DeviceMissing):
        reading.open_object(gone, 0, H)
    with pytest.raises(hashdir.DeviceMissing):
        writing.write_marker(gone, 0, H, "0000000001.00000", "ts", {})
    assert not os.path.exists(gone)


def test_corrupt_trailer_is_quarantined_on_open(dev):
    put(dev, "0000000001.00000", b"abc")
    path = os.path.join(fileformat.hash_dir(dev, 0, H), "0000000001.00000.data")
    with open(path, "r+b") as f:
        f.seek(-2, os.SEEK_END)
        f.write(b"!!")
    assert reading.open_object(dev, 0, H, read_whole=100).status == "missing"
    assert not os.path.exists(fileformat.hash_dir(dev, 0, H))
    qdir = os.path.join(dev, "quarantined", "objects")
    assert os.listdir(qdir)[0].startswith(H)


def copy_from_peer(dev, tmp_path, ts, body):
    """Commit on `dev` the file a peer device holds for `body` at `ts`, as replication does."""
    other = str(tmp_path / "sdb")
    os.makedirs(other, exist_ok=True)
    put(other, ts, body)
    (src,) = reading.current_paths(other, 0, H)
    w = writing.DataWriter(dev, 0, H)
    w.write([open(src, "rb").read()], hash_body=False)
    w.commit_raw(os.path.basename(src))


def test_commit_raw_copies_a_peer_file(dev, tmp_path):
    copy_from_peer(dev, tmp_path, "0000000007.00000", b"replica")
    info = reading.open_object(dev, 0, H, read_whole=1 << 20, verify=True)
    assert info.body == b"replica" and info.etag_ok
    w = writing.DataWriter(dev, 0, H)
    w.write([b"old"], hash_body=False)
    with pytest.raises(hashdir.Conflict):
        w.commit_raw("0000000006.00000.data")
    assert os.listdir(os.path.join(dev, "tmp")) == []


def test_clean_tmp_removes_dead_writers_only(dev):
    tdir = os.path.join(dev, "tmp")
    os.makedirs(tdir)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    open(os.path.join(tdir, f"obj-{dead}-aa"), "wb").close()
    live = f"obj-{os.getppid()}-bb"
    open(os.path.join(tdir, live), "wb").close()
    assert hashdir.clean_tmp(dev) == 1
    assert os.listdir(tdir) == [live]


def test_enospc_leaves_no_temp_file(dev, monkeypatch):
    # A full disk cannot be made without root; fail the write the way the kernel would.
    put(dev, "0000000001.00000", b"old")

    def full(fd, chunks):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writing, "_write_all", full)
    with pytest.raises(OSError) as ei:
        put(dev, "0000000002.00000", b"new")
    assert hashdir.is_enospc(ei.value)
    assert os.listdir(os.path.join(dev, "tmp")) == []
    assert os.listdir(fileformat.hash_dir(dev, 0, H)) == ["0000000001.00000.data"]


def test_refuse_existing(dev):
    w = writing.DataWriter(dev, 0, H, refuse_existing=True)
    w.put([b"a"], {}, "0000000001.00000")
    with pytest.raises(writing.Exists):
        writing.DataWriter(dev, 0, H, refuse_existing=True).put([b"b"], {}, "0000000002.00000")
    writing.write_marker(dev, 0, H, "0000000003.00000", "ts", {})
    writing.DataWriter(dev, 0, H, refuse_existing=True).put([b"c"], {}, "0000000004.00000")


def test_if_match(dev):
    """A PUT with if_match commits only over a current .data of that ETag (or of that value
    in the named metadata key), judged under the object's lock."""
    md5 = hashlib.md5
    etag_a = md5(b"a").hexdigest()
    with pytest.raises(writing.Exists):  # nothing to match
        writing.DataWriter(dev, 0, H, if_match=(etag_a, "")).put([b"x"], {}, "0000000001.00000")
    writing.DataWriter(dev, 0, H).put([b"a"], {"X-Object-Sysmeta-S3api-Etag": "abc-2"},
                                      "0000000002.00000")
    with pytest.raises(writing.Exists):  # another ETag
        writing.DataWriter(dev, 0, H, if_match=(md5(b"z").hexdigest(), "")).put(
            [b"x"], {}, "0000000003.00000")
    with pytest.raises(writing.Exists):  # the key's value is what counts when it is there
        writing.DataWriter(dev, 0, H, if_match=(etag_a, "X-Object-Sysmeta-S3api-Etag")).put(
            [b"x"], {}, "0000000003.00000")
    writing.DataWriter(dev, 0, H, if_match=('"abc-2"', "X-Object-Sysmeta-S3api-Etag")).put(
        [b"b"], {}, "0000000004.00000")
    writing.DataWriter(dev, 0, H, if_match=(md5(b"b").hexdigest(), "")).put(
        [b"c"], {}, "0000000005.00000")
    writing.write_marker(dev, 0, H, "0000000006.00000", "ts", {})
    with pytest.raises(writing.Exists):  # deleted: nothing to match
        writing.DataWriter(dev, 0, H, if_match=(md5(b"c").hexdigest(), "")).put(
            [b"d"], {}, "0000000007.00000")


def test_abort_waits_for_a_write_in_flight_and_stops_later_ones(tmp_path):
    """A request cancelled while its write is in a pool thread aborts from another thread:
    the abort must not miss the temp file that write is creating, and no write may start
    after it (or the temp file would leak until the next restart)."""
    import threading

    dev = tmp_path / "sda"
    dev.mkdir()
    w = writing.DataWriter(str(dev), 1, "a" * 32)
    started, release = threading.Event(), threading.Event()

    class SlowChunks(list):
        def __iter__(self):  # hashing iterates the chunks: hold the write there
            started.set()
            release.wait(10)
            return super().__iter__()

    t = threading.Thread(target=w.write, args=(SlowChunks([b"x" * 100]),))
    t.start()
    assert started.wait(10)
    aborter = threading.Thread(target=w.abort)
    aborter.start()
    release.set()
    t.join(10)
    aborter.join(10)
    assert os.listdir(dev / "tmp") == []
    with pytest.raises(OSError):
        w.write([b"late"])
    assert os.listdir(dev / "tmp") == []


def test_a_body_in_more_pieces_than_one_writev_takes_is_written_in_order(dev):
    pieces = [bytes([i % 251]) * (i % 5) for i in range(3000)]  # empty ones among them
    body = b"".join(pieces)
    w = writing.DataWriter(dev, 0, H)
    w.put(pieces, {"name": "/a/c/o", "Content-Type": "x/y"}, "1700000000.00000")
    info = reading.open_object(dev, 0, H, 1 << 20, True)
    assert info.body == body and info.etag_ok
    info.close()


@pytest.mark.parametrize("pieces", [[], [b""], [b"", b""]])
def test_an_empty_body_in_any_pieces_is_written(dev, pieces):
    """A zero-byte PUT whose body came as one empty chunk must not spin in writev."""
    w = writing.DataWriter(dev, 0, H)
    w.put(pieces, {"name": "/a/c/o", "Content-Type": "x/y"}, "1700000000.00000")
    info = reading.open_object(dev, 0, H, 1 << 20, True)
    assert info.body == b"" and info.etag_ok
    info.close()


def _xattrs_refused(path) -> bool:
    try:
        os.setxattr(path, "user.probe", b"1")
        os.removexattr(path, "user.probe")
        return False
    except OSError:
        return True


def _hint(dev, h=H):
    try:
        return os.getxattr(fileformat.hash_dir(dev, 0, h), fileformat.HINT_XATTR).decode()
    except OSError:
        return None


def test_every_write_keeps_the_state_hint_that_reads_follow(dev, tmp_path):
    """A read opens the files the hash dir's hint names instead of listing the dir, so every
    kind of write (PUT, POST, DELETE, a replica's file) must leave the hint naming exactly the
    current files."""
    if _xattrs_refused(dev):
        pytest.skip("no user xattrs on this filesystem")
    put(dev, "0000000001.00000", b"one")
    assert _hint(dev) == "0000000001.00000.data"
    put(dev, "0000000002.00000", b"two")
    assert _hint(dev) == "0000000002.00000.data"
    assert reading.open_object(dev, 0, H, read_whole=4096).body == b"two"
    writing.write_marker(dev, 0, H, "0000000003.00000", "meta", {"X-Object-Meta-K": "v"})
    assert _hint(dev) == "0000000002.00000.data|0000000003.00000.meta"
    info = reading.open_object(dev, 0, H, read_whole=4096)
    assert info.body == b"two" and info.metadata["X-Object-Meta-K"] == "v"
    writing.write_marker(dev, 0, H, "0000000004.00000", "ts", {})
    assert _hint(dev) == "0000000004.00000.ts"
    assert reading.open_object(dev, 0, H).status == "deleted"
    # A peer's newer file (replication) goes through the same rename.
    copy_from_peer(dev, tmp_path, "0000000005.00000", b"five")
    assert _hint(dev) == "0000000005.00000.data"
    assert reading.open_object(dev, 0, H, read_whole=4096).body == b"five"


@pytest.mark.parametrize("hint", [
    "0000000009.00000.data",  # ahead of its file: a crash between the hint and the rename
    "0000000001.00000.data|0000000009.00000.meta",  # a .meta gone since
    "../../0000000001.00000.data", "x|y|z", "", "\udcff",  # not a hint this code writes
])
def test_a_hint_that_does_not_fit_sends_the_read_to_a_listing(dev, hint):
    if _xattrs_refused(dev):
        pytest.skip("no user xattrs on this filesystem")
    put(dev, "0000000001.00000", b"one")
    os.setxattr(fileformat.hash_dir(dev, 0, H), fileformat.HINT_XATTR,
                hint.encode(errors="surrogateescape"))
    info = reading.open_object(dev, 0, H, read_whole=4096)
    assert info.status == "ok" and info.body == b"one" and info.meta_timestamp is None
    info = reading.open_object(dev, 0, H)  # the body left to stream
    assert info.status == "ok" and info.fd >= 0 and info.body_len == 3
    info.close()


def test_a_hint_that_cannot_be_set_is_removed_or_the_write_fails(dev, monkeypatch):
    """Where the new hint does not fit (the dir's xattr space is full), the old one must not
    stay behind naming a file older than the new one."""
    if _xattrs_refused(dev):
        pytest.skip("no user xattrs on this filesystem")
    put(dev, "0000000001.00000", b"one")
    hdir = fileformat.hash_dir(dev, 0, H)
    filled = 0
    for size in (1024, 256, 64, 16, 4, 1):  # fill the xattr space to the byte
        while filled < 10_000:
            try:
                os.setxattr(hdir, f"user.filler{filled}", b"x" * size)
            except OSError as exc:
                assert exc.errno in (errno.ENOSPC, errno.E2BIG)
                break
            filled += 1
    if filled >= 10_000:
        pytest.skip("this filesystem's xattr space did not fill")
    # The .meta makes the state (and its hint) longer than the one that fits.
    writing.write_marker(dev, 0, H, "0000000002.00000", "meta", {"X-Object-Meta-K": "v"})
    assert _hint(dev) is None
    info = reading.open_object(dev, 0, H, read_whole=4096)
    assert info.body == b"one" and info.metadata["X-Object-Meta-K"] == "v"
    # And where even the removal fails (I/O errors, injected), the write fails.
    def broken(*a, **kw):
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "setxattr", broken)
    monkeypatch.setattr(os, "removexattr", broken)
    with pytest.raises(OSError):
        writing.write_marker(dev, 0, H, "0000000003.00000", "meta", {"X-Object-Meta-K": "w"})
    monkeypatch.undo()
    info = reading.open_object(dev, 0, H, read_whole=4096)
    assert info.metadata["X-Object-Meta-K"] == "v"


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_a_whole_read_around_its_first_reads_size_gets_every_byte(dev, delta):
    # A file of exactly FIRST_READ bytes must not be taken as short, and one a byte longer
    # must get its last byte from the second read.
    def data_size(ts: str) -> int:
        return os.path.getsize(os.path.join(fileformat.hash_dir(dev, 0, H), ts + ".data"))

    probe = reading.FIRST_READ - 1000
    put(dev, "0000000001.00000", os.urandom(probe))
    overhead = data_size("0000000001.00000") - probe  # the trailer: metadata and footer
    body = os.urandom(reading.FIRST_READ - overhead + delta)
    put(dev, "0000000002.00000", body)
    assert data_size("0000000002.00000") == reading.FIRST_READ + delta
    info = reading.open_object(dev, 0, H, read_whole=1 << 20, verify=True)
    assert info.body == body and info.etag_ok is True and info.fd == -1
    # Too big to read whole: metadata only, and the file stays open for streaming.
    info = reading.open_object(dev, 0, H, read_whole=len(body) - 1)
    try:
        assert info.body is None and info.fd >= 0 and info.body_len == len(body)
    finally:
        info.close()


def test_mutable_sysmeta_patch_and_carry_forward(dev):
    """A POST of mutable sysmeta changes those keys only (an empty value removes one) and
    keeps the user metadata; a plain POST replaces the user metadata and keeps them."""
    tags, hold = "X-Object-Sysmeta-Mutable-S3-Tagging", "X-Object-Sysmeta-Mutable-Legal-Hold"
    fixed = "X-Object-Sysmeta-Fixed"
    put(dev, "0000000001.00000", b"x", **{"X-Object-Meta-A": "1", tags: "a=1", fixed: "f",
                                          "X-Delete-At": "9999999999"})

    def current() -> dict[str, str]:
        return reading.open_object(dev, 0, H, read_whole=100).metadata

    writing.write_marker(dev, 0, H, "0000000002.00000", "meta", {hold: "ON", fixed: "no"})
    md = current()
    assert md[hold] == "ON" and md[tags] == "a=1" and md["X-Object-Meta-A"] == "1"
    assert md["X-Delete-At"] == "9999999999" and md[fixed] == "f"
    writing.write_marker(dev, 0, H, "0000000003.00000", "meta", {"X-Object-Meta-B": "2"})
    md = current()
    assert md[hold] == "ON" and md[tags] == "a=1" and md["X-Object-Meta-B"] == "2"
    assert "X-Object-Meta-A" not in md and "X-Delete-At" not in md
    writing.write_marker(dev, 0, H, "0000000004.00000", "meta", {tags: ""})
    md = current()
    assert tags not in md and md[hold] == "ON" and md["X-Object-Meta-B"] == "2"
