"""The resume log: acknowledged names are skipped, a torn tail is ignored and cut off."""

from __future__ import annotations

import json
import os

import pytest

from swiftlite.migrate.state import StateLog, StateMismatch, default_state_path, read_state


def test_records_survive_reopen(tmp_path):
    p = str(tmp_path / "s")
    log = StateLog(p, "c", "")
    for i in range(600):  # more than one batch
        log.record(f"o{i}", i, "e")
    log.close()
    log2 = StateLog(p, "c", "")
    assert log2.is_done("o0", 0) and log2.is_done("o599", 599)
    assert not log2.is_done("o600", 600)
    assert not log2.is_done("o5", 6)  # the file changed size: upload again
    log2.close()


def test_unflushed_records_are_not_on_disk(tmp_path):
    p = str(tmp_path / "s")
    log = StateLog(p, "c", "", batch=1000, interval=3600)
    log.flush()
    log.record("a", 1, "e")
    assert not log.due()
    _, done, _ = read_state(p)
    assert done == {}  # recorded only in memory until the batch is written
    log.close()
    assert read_state(p)[1] == {"a": 1}


def test_torn_last_line_ignored_and_truncated(tmp_path):
    p = str(tmp_path / "s")
    log = StateLog(p, "c", "")
    log.record("a", 1, "e1")
    log.record("b/ü\nx", 2, "e2")  # names with newlines and non-ASCII are safe
    log.close()
    with open(p, "ab") as f:
        f.write(b'{"n": "torn", "s": 3')  # a crash mid-write
    log = StateLog(p, "c", "")
    assert log.is_done("a", 1) and log.is_done("b/ü\nx", 2)
    assert not log.is_done("torn", 3)
    log.record("c", 4, "e3")
    log.close()
    with open(p, "rb") as f:
        lines = f.read().splitlines()
    assert all(json.loads(line) for line in lines)  # the torn bytes were cut off
    assert read_state(p)[1] == {"a": 1, "b/ü\nx": 2, "c": 4}


def test_damaged_middle_line_skipped(tmp_path):
    p = str(tmp_path / "s")
    log = StateLog(p, "c", "")
    log.record("a", 1, "e")
    log.close()
    with open(p, "ab") as f:
        f.write(b"\x00garbage\n" + json.dumps({"n": "b", "s": 2}).encode() + b"\n")
    assert read_state(p)[1] == {"a": 1, "b": 2}


def test_other_destination_refused(tmp_path):
    p = str(tmp_path / "s")
    StateLog(p, "c", "").close()
    with pytest.raises(StateMismatch):
        StateLog(p, "other", "")
    with pytest.raises(StateMismatch):
        StateLog(p, "c", "pfx/")


def test_default_path_depends_on_destination(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = default_state_path("/data/images", "c", "")
    assert os.path.dirname(a) == str(tmp_path) and "images" in os.path.basename(a)
    assert a == default_state_path("/data/images/", "c", "")
    assert a != default_state_path("/data/images", "c2", "")
