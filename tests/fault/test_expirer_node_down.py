"""Expiry with a node down: the nodes that are up take the object out of the listing, the
node expires its own replica when it returns, and a restart between PUT and expiry loses no
queue entry (the queue is on the node's disks)."""

from __future__ import annotations

import time

import pytest

from swiftlite.common.timestamp import Timestamp
from tests.integration.test_expirer import names_in, replicas, status, wait_past

pytestmark = pytest.mark.slow


def test_node_down_at_expiry_and_restarted_before_it(three_nodes):
    c = three_nodes
    conn = c.connection()
    conn.put_container("exp")
    t = int(time.time()) + 3
    conn.put_object("exp", "o", b"expiring", headers={"X-Delete-At": str(t)})
    conn.put_object("exp", "stay", b"s")
    where = replicas_by_node(c, "exp/o")
    assert sorted(where) == [0, 1, 2]  # one replica per node (one zone each)
    # Node 2's object server crashes and restarts between the PUT and the expiry.
    c.kill_node(2, roles=["object"])
    c.start_node(2, roles=["object"])
    # Node 1's is down when the object expires.
    c.kill_node(1, roles=["object"])
    wait_past(conn, "exp", "o", t)
    tomb = f"{Timestamp.parse(str(t)).internal}.ts"

    for n in (0, 2):
        c.run_daemon(n, "object-expirer")
        st = status(c, n)
        assert (st["expired"], st["failures"]) == (1, 0), st
    assert names_in(conn, "exp") == ["stay"]  # every container replica was told
    assert conn.head_container("exp")["x-container-object-count"] == "1"
    where = replicas_by_node(c, "exp/o")
    assert where[0] == where[2] == tomb  # node 2's entry survived its restart
    assert where[1].endswith(".data")  # the node that was down still has it

    c.start_node(1, roles=["object"])
    c.run_daemon(1, "object-expirer")
    assert status(c, 1)["expired"] == 1
    # Every replica holds the same tombstone: converged without replication.
    assert replicas_by_node(c, "exp/o") == {0: tomb, 1: tomb, 2: tomb}
    assert names_in(conn, "exp") == ["stay"]


def replicas_by_node(cluster, path: str) -> dict[int, str]:
    """node index -> current files of the object's replica on that node (one each here)."""
    found = replicas(cluster, path)
    out = {node: state for (node, _), state in found.items()}
    assert len(out) == len(found)
    return out
