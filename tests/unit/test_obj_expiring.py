"""The per-device queue of expiring objects: journal, fold, DB, and every write that feeds it."""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading

import pytest

from swiftlite.obj import auditor, sync
from swiftlite.obj.engine import durability, expiring, fileformat, hashdir, writing
from swiftlite.obj.engine.batch_commit import put_many

H = "0123456789abcdef0123456789abcdef"
H2 = "f" * 32
T1, T2, T3 = "0000000001.00000", "0000000002.00000", "0000000003.00000"


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "sda"
    d.mkdir()
    return str(d)


def queued(dev):
    q = expiring.Queue(dev)
    try:
        q.fold()
        return q.entries()
    finally:
        q.close()


def put(dev, ts, part=0, h=H, name="/a/c/o", **md):
    w = writing.DataWriter(dev, part, h, fsync=False)
    return w.put([b"body"], {"name": name, "Content-Type": "x/y", **md}, ts)


def test_entry_for():
    assert expiring.entry_for(3, H, {"X-Delete-At": "100", "name": "/a/c/o"}) == \
        expiring.Entry(100, 3, H, "/a/c/o")
    e = expiring.entry_for("3", H, {"X-Delete-At": "100"}, {"name": "/a/c/x"})
    assert e is not None and e.name == "/a/c/x" and e.part == 3
    assert expiring.entry_for(3, H, {}) is None
    assert expiring.entry_for(3, H, {"X-Delete-At": "soon"}) is None


def test_append_fold_due_remove_and_paging(dev):
    entries = [expiring.Entry(d, p, h, f"/a/c/{d}-{p}")
               for d in (30, 10, 20) for p, h in ((1, H), (0, H2))]
    expiring.append(dev, entries[:3])
    expiring.append(dev, entries[3:])
    q = expiring.Queue(dev)
    assert q.fold() == (6, 0)
    assert not os.path.exists(os.path.join(dev, expiring.JOURNAL))
    assert q.count() == 6
    assert q.fold() == (0, 0)  # nothing new
    due = q.due(20)
    assert [e.key for e in due] == [(10, 0, H2), (10, 1, H), (20, 0, H2), (20, 1, H)]
    assert due[0].name == "/a/c/10-0"
    # Keyset paging: past an entry left in the queue (a failure), not stuck on it.
    page1 = q.due(30, None, 3)
    page2 = q.due(30, page1[-1], 3)
    assert [e.key for e in page1 + page2] == sorted(e.key for e in entries)
    q.remove(due[:2])
    assert q.count() == 4 and q.due(10) == []
    q.close()


def test_duplicates_collapse_and_a_name_fills_in(dev):
    expiring.append(dev, [expiring.Entry(5, 1, H, "")])
    expiring.append(dev, [expiring.Entry(5, 1, H, "/a/c/o"), expiring.Entry(5, 1, H, "")])
    assert queued(dev) == [expiring.Entry(5, 1, H)]
    assert queued(dev)[0].name == "/a/c/o"


def test_torn_records_are_skipped_without_losing_the_next(dev):
    good = [expiring.Entry(1, 0, H, "/a/c/\u00e9\n"), expiring.Entry(2, 0, H2, "/a/c/p")]
    expiring.append(dev, good[:1])
    with open(os.path.join(dev, expiring.JOURNAL), "ab") as f:
        f.write(b'\n[3,0,"abc')  # a crash mid-record
        f.write(b"\0" * 16)  # pages never written
    expiring.append(dev, good[1:])
    q = expiring.Queue(dev)
    assert q.fold() == (2, 1)
    assert q.entries() == good and q.entries()[0].name == "/a/c/\u00e9\n"
    q.close()


def test_a_taken_journal_left_by_a_crashed_fold_is_folded(dev):
    expiring.append(dev, [expiring.Entry(7, 0, H)])
    os.rename(os.path.join(dev, expiring.JOURNAL),
              os.path.join(dev, expiring.TAKEN + "123-abcd"))
    expiring.append(dev, [expiring.Entry(8, 0, H)])
    assert [e.delete_at for e in queued(dev)] == [7, 8]
    assert [n for n in os.listdir(dev) if n.startswith(expiring.JOURNAL)] == []


def test_an_append_waiting_on_a_fold_goes_to_the_next_journal(dev):
    expiring.append(dev, [expiring.Entry(1, 0, H)])
    path = os.path.join(dev, expiring.JOURNAL)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a fold holding the journal
    t = threading.Thread(target=expiring.append, args=(dev, [expiring.Entry(2, 0, H)]))
    t.start()
    t.join(0.2)
    assert t.is_alive()  # waiting for the lock
    taken = os.path.join(dev, expiring.TAKEN + "x")
    os.rename(path, taken)
    os.close(fd)
    t.join(10)
    with open(taken, "rb") as f:
        assert [e.delete_at for e in expiring.parse_records(f.read())[0]] == [1]
    with open(path, "rb") as f:
        assert [e.delete_at for e in expiring.parse_records(f.read())[0]] == [2]
    assert [e.delete_at for e in queued(dev)] == [1, 2]


def test_an_unreadable_db_is_set_aside(dev):
    with open(os.path.join(dev, expiring.DB), "wb") as f:
        f.write(b"not a database" * 100)
    expiring.append(dev, [expiring.Entry(1, 0, H)])
    assert [e.delete_at for e in queued(dev)] == [1]
    assert any(n.startswith(expiring.DB + ".corrupt-") for n in os.listdir(dev))


def test_has_queue(dev, tmp_path):
    assert not expiring.has_queue(dev)
    assert not expiring.has_queue(str(tmp_path / "missing"))
    expiring.append(dev, [expiring.Entry(1, 0, H)])
    assert expiring.has_queue(dev)


# ---- the writes that feed it -----------------------------------------------------------------

def test_put_without_delete_at_writes_no_journal(dev):
    put(dev, T1)
    writing.write_marker(dev, 0, H, T2, "meta", {"X-Object-Meta-A": "b"}, fsync=False)
    writing.write_marker(dev, 0, H, T3, "ts", {"name": "/a/c/o"}, fsync=False)
    assert not expiring.has_queue(dev)


def test_put_and_post_queue_their_delete_at(dev):
    put(dev, T1, part=4, **{"X-Delete-At": "100"})
    # A POST's .meta has no name: it comes from the object it joins.
    writing.write_marker(dev, 4, H, T2, "meta", {"X-Delete-At": "200"}, fsync=False,
                         open_expired=True)
    assert queued(dev) == [expiring.Entry(100, 4, H), expiring.Entry(200, 4, H)]
    assert {e.name for e in queued(dev)} == {"/a/c/o"}


def test_file_mode_fsyncs_the_record(dev, monkeypatch):
    durability.configure("file")
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    try:
        w = writing.DataWriter(dev, 0, H, fsync=True)
        w.put([b"x"], {"name": "/a/c/o", "X-Delete-At": "100"}, T1)
    finally:
        durability.configure("batch")
    assert queued(dev) == [expiring.Entry(100, 0, H)]
    assert len(synced) >= 3  # the data file, the hash dir, and the journal record


def test_batch_put_queues_each_device(tmp_path):
    assert durability.configure("batch") == "batch"
    devs = []
    for d in ("d1", "d2"):
        (tmp_path / d).mkdir()
        devs.append(str(tmp_path / d))
    writers = [writing.DataWriter(d, 9, H) for d in devs]
    _, out = put_many(writers, [b"x"], {"name": "/a/c/o", "X-Delete-At": "50"}, T1)
    assert all(isinstance(r, hashdir.CommitResult) for r in out)
    for d in devs:
        assert queued(d) == [expiring.Entry(50, 9, H)]


def _file(ts: str, md: dict, body: bytes = b"") -> bytes:
    md = {"X-Timestamp": ts, **md}
    if body or md.get("name"):
        md.update(ETag=hashlib.md5(body).hexdigest(), **{"Content-Length": str(len(body))})
    return body + fileformat.pack_trailer(md)


def test_replicated_files_are_queued(dev):
    # Whole files (the trailer parsed once by the receiver)...
    data = _file(T1, {"name": "/a/c/o", "X-Delete-At": "70"}, b"abc")
    assert sync.store_whole(dev, 2, H, f"{T1}.data", data, False) == "stored"
    assert sync.store_whole(dev, 2, H, f"{T2}.meta", _file(T2, {"X-Delete-At": "80"}),
                            False) == "stored"
    # ...and a streamed one, whose trailer is read back from its temp file.
    w = writing.DataWriter(dev, 2, H2, fsync=False)
    w.write([_file(T1, {"name": "/a/c/big", "X-Delete-At": "90"}, b"x" * 100)], False)
    w.commit_raw(f"{T1}.data")
    assert [(e.delete_at, e.hash, e.name) for e in queued(dev)] == [
        (70, H, "/a/c/o"), (80, H, ""), (90, H2, "/a/c/big")]


# ---- X-If-Delete-At ------------------------------------------------------------------------

def test_if_delete_at_checks_under_the_lock(dev):
    with pytest.raises(writing.NotFound):  # no object at all: nothing written
        writing.write_marker(dev, 0, H, T3, "ts", {}, False, if_delete_at=100)
    assert not os.path.exists(fileformat.hash_dir(dev, 0, H))
    put(dev, T1, **{"X-Delete-At": "100"})
    with pytest.raises(writing.DeleteAtMismatch):
        writing.write_marker(dev, 0, H, T3, "ts", {}, False, if_delete_at=99)
    # A POST that moved the time wins over the .data's.
    writing.write_marker(dev, 0, H, T2, "meta", {"X-Delete-At": "200"}, fsync=False,
                         open_expired=True)
    with pytest.raises(writing.DeleteAtMismatch):
        writing.write_marker(dev, 0, H, T3, "ts", {}, False, if_delete_at=100)
    with pytest.raises(hashdir.Conflict):  # not newer than the stored object
        writing.write_marker(dev, 0, H, T1, "ts", {}, False, if_delete_at=200)
    res = writing.write_marker(dev, 0, H, T3, "ts", {}, False, if_delete_at=200)
    assert res.new_state == f"{T3}.ts" and not res.existed  # it had expired (times are old)
    # Deleted: no X-Delete-At any more.
    with pytest.raises(writing.DeleteAtMismatch):
        writing.write_marker(dev, 0, H, "0000000004.00000", "ts", {}, False, if_delete_at=200)


# ---- the auditor's safety net ---------------------------------------------------------------

def test_auditor_requeues_objects_with_delete_at(dev):
    put(dev, T1, part=1, **{"X-Delete-At": "100"})
    put(dev, T1, part=1, h=H2, name="/a/c/p")  # no X-Delete-At
    writing.write_marker(dev, 1, H2, T2, "meta", {"X-Delete-At": "300"}, fsync=False)
    q = expiring.Queue(dev)
    q.fold()
    q.remove(q.entries())  # as if lost in a crash
    assert q.count() == 0
    out = {}
    for s in {H[-3:], H2[-3:]}:
        for k, v in auditor.audit_suffix(dev, "1", s, 86400).items():
            out[k] = out.get(k, 0) + v
    assert out["expiring"] == 2 and out["quarantined"] == 0
    q.fold()
    assert [(e.delete_at, e.hash, e.name) for e in q.entries()] == [
        (100, H, "/a/c/o"), (300, H2, "/a/c/p")]
    q.close()
