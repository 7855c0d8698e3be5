"""Finding files: tree walk and manifest, names relative to SRC_DIR under the prefix."""

from __future__ import annotations

import os

from swiftlite.migrate.walker import read_manifest, walk_tree


def make_tree(root):
    (root / "a" / "b").mkdir(parents=True)
    (root / "top.jpg").write_bytes(b"1")
    (root / "a" / "b" / "deep.png").write_bytes(b"22")
    os.mkfifo(root / "pipe")
    return root


def test_walk_tree_names_and_failures(tmp_path):
    src = make_tree(tmp_path / "src")
    items, failures = walk_tree(str(src), "pfx/")
    assert sorted((it.name, it.size) for it in items) == [("pfx/a/b/deep.png", 2),
                                                          ("pfx/top.jpg", 1)]
    assert [os.path.basename(f.path) for f in failures] == ["pipe"]
    assert all(os.path.isabs(it.path) for it in items)


def test_manifest(tmp_path):
    src = make_tree(tmp_path / "src")
    lines = ["top.jpg\n", "\n", f"{src}/a/b/deep.png\n", "missing.jpg\n", "../escape\n",
             "top.jpg\n"]
    items, failures = read_manifest(str(src), lines)
    assert sorted(it.name for it in items) == ["a/b/deep.png", "top.jpg"]
    reasons = sorted(f.reason.split(":")[0] for f in failures)
    assert reasons == ["outside SRC_DIR", "unreadable"]
