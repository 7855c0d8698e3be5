"""A node of three killed: writes still reach a quorum (plus a handoff), reads still work."""

from __future__ import annotations

import hashlib

import pytest

pytestmark = pytest.mark.slow


def test_kill_one_node_put_and_get(three_nodes):
    c = three_nodes
    conn = c.connection()
    conn.put_container("imgs")
    before = {f"before-{i}": hashlib.sha256(str(i).encode()).digest() * 100 for i in range(20)}
    for n, data in before.items():
        conn.put_object("imgs", n, data)
    c.kill_node(1)
    after = {f"after-{i}": hashlib.sha1(str(i).encode()).digest() * 100 for i in range(20)}
    for n, data in after.items():
        etag = conn.put_object("imgs", n, data)
        assert etag == hashlib.md5(data).hexdigest()
    for n, data in {**before, **after}.items():
        assert conn.get_object("imgs", n)[1] == data
    # The container listing survives too (two of three container replicas are up).
    _, listing = conn.get_container("imgs")
    assert len(listing) >= len(before)
