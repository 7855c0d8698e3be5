"""The object reconstructor on a real cluster: `swiftlite up --nodes 4 --devices 2 --ec 4+2`.

Eight devices, six primaries per partition: every object has two handoffs to spare. Passes
are the daemon's `--once` runs, one per node (in parallel, as the daemons would run); what a
pass did is read back from its status file (the counters `/metrics` and `swiftlite status`
show).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from typing import Any

import pytest

from swiftlite.common import hashing
from swiftlite.common.config import load_sections
from swiftlite.common.runtime import daemon
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.auditor import Auditor
from swiftlite.obj.engine import ec_rebuild, fileformat, pending_marks
from swiftlite.obj.reconstructor import NAME, ObjectReconstructor
from swiftlite.ring import Ring
from tests.cluster import start_cluster
from tests.integration.test_ec_objects import (
    _api,
    _flip,
    body_of,
    durable,
    frag_index,
    node_gone,
)
from tests.integration.test_metrics import samples

pytestmark = pytest.mark.slow
SEG = 4096
K, M = 4, 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("ec-recon")), nodes=4, devices=2,
                      replicas=3, part_power=4,
                      extra_args=["--ec", f"{K}+{M}", "--ec-segment-size", str(SEG)])
    yield c
    c.stop()


@pytest.fixture(scope="module")
def api(cluster):
    return _api(cluster)


def run_passes(cluster, kind: type = ObjectReconstructor, name: str = NAME,
               nodes: list[int] | None = None) -> dict[str, int]:
    """One `--once` pass of a daemon (in this process, as the daemon loop runs it) on each
    node, all at once; their status files' counters summed."""
    idx = list(range(len(cluster.nodes))) if nodes is None else nodes
    confs = [load_sections(cluster.nodes[i]["conf"])[name] for i in idx]
    for conf in confs:
        # Four daemons share this one loop and thread pool: on a loaded 2-core runner their
        # own stalls outlast the 0.5 s default connect timeout (seen in CI: 12 MERGE digests
        # "timed out" to idle peers). These tests are about what a pass moves, not timeouts.
        conf["conn_timeout"] = "10"

    async def passes() -> None:
        ds = [kind(conf) for conf in confs]
        await asyncio.gather(*(daemon.run_loop(conf, name, d.run_pass, True,
                                               getattr(d, "setup", None),
                                               getattr(d, "teardown", None))
                               for conf, d in zip(confs, ds, strict=True)))

    asyncio.run(passes())
    total: dict[str, int] = {}
    for conf in confs:
        status = daemon.read_status(conf, name)
        assert status is not None
        for k, v in status.items():
            if isinstance(v, int) and not isinstance(v, bool) and k != "pid":
                total[k] = total.get(k, 0) + v
    return total


def placement(cluster, account: str, name: str) -> tuple[list[tuple[str, int]], list[str]]:
    """(fragment index held by each primary in order, as (kind, index): ("data", i),
    ("ts", -1) or ("none", -1)), and the files found on non-primary devices."""
    load_sections(cluster.nodes[0]["conf"])  # the cluster's [hash] affixes
    ring = Ring.load(os.path.join(cluster.etc_dir, "object-1.ring.gz"))
    part, primaries = ring.get_nodes(account, "ec", name)
    h = hashing.hash_path(account, "ec", name)
    roots = {n["servers"]["object"]["port"]: n["devices_root"] for n in cluster.nodes}

    def files(port: int, device: str) -> list[str]:
        d = os.path.join(roots[port], device, "objects-1", str(part), h[-3:], h)
        try:
            return sorted(os.path.join(d, f) for f in os.listdir(d)
                          if not f.startswith("."))
        except FileNotFoundError:
            return []

    held: list[tuple[str, int]] = []
    for p in primaries:
        fs = files(p["port"], p["device"])
        datas = [f for f in fs if f.endswith(".data")]
        if datas:
            held.append(("data", frag_index(datas[-1])))
        elif any(f.endswith(".ts") for f in fs):
            held.append(("ts", -1))
        else:
            held.append(("none", -1))
    ours = {(p["port"], p["device"]) for p in primaries}
    others = [f for port, root in roots.items() for dev in os.listdir(root)
              if (port, dev) not in ours for f in files(port, dev)]
    return held, others


def whole(cluster, account: str, name: str) -> bool:
    held, others = placement(cluster, account, name)
    return held == [("data", i) for i in range(K + M)] and not others


REBUILT: dict[str, bytes] = {}  # objects whose lost archives the first test rebuilt


def test_lost_devices_are_rebuilt_and_a_second_pass_moves_nothing(cluster, api):
    bodies = {f"r{i}": body_of(SEG * i + 17 * i, 40 + i) for i in range(8)}
    for name, body in bodies.items():
        assert api("PUT", f"/ec/{name}", data=body).status_code == 201
    assert all(whole(cluster, api.account, n) for n in bodies)
    # Two devices of two nodes lose every archive they held (their partitions gone whole).
    lost = [(0, "d1"), (1, "d2")]
    for node, dev in lost:
        root = cluster.nodes[node]["devices_root"]
        assert dev in os.listdir(root), os.listdir(root)
        shutil.rmtree(os.path.join(root, dev, "objects-1"))
    missing = sum(placement(cluster, api.account, n)[0].count(("none", -1)) for n in bodies)
    assert missing > 0
    stats = run_passes(cluster)
    assert stats["fragments_rebuilt"] == missing, stats
    assert stats["rebuild_failures"] == 0 and stats["failures"] == 0, stats
    # The node's object server shows its daemons' passes on /metrics (node 0 lost d1).
    port = cluster.nodes[0]["servers"]["object"]["port"]
    shown = samples(port, "swiftlite_daemon_last_pass_items", daemon=NAME,
                    counter="fragments_rebuilt")
    assert shown and shown[0][1] > 0, shown
    for name in bodies:
        assert whole(cluster, api.account, name), placement(cluster, api.account, name)
    again = run_passes(cluster)
    assert again["fragments_rebuilt"] == 0 and again["suffixes_listed"] == 0, again
    assert again["index_checks"] == 0, again
    assert again["failures"] == 0 and again["primary_partitions"] > 0, again
    REBUILT.update(bodies)


def test_corrupt_archive_is_quarantined_then_rebuilt(cluster, api):
    body = body_of(3 * SEG + 5, 70)
    assert api("PUT", "/ec/bad", data=body).status_code == 201
    durable(cluster, api.account, "ec", "bad")
    held, _ = placement(cluster, api.account, "bad")
    load_sections(cluster.nodes[0]["conf"])
    h = hashing.hash_path(api.account, "ec", "bad")
    paths = [os.path.join(r, f) for n in cluster.nodes
             for r, _, fs in os.walk(n["devices_root"]) for f in fs
             if f.endswith(".data") and os.path.basename(r) == h]
    victim = next(p for p in paths if frag_index(p) == 2)
    node = next(i for i, n in enumerate(cluster.nodes)
                if victim.startswith(n["devices_root"] + os.sep))
    _flip(victim, 50)
    audit = run_passes(cluster, Auditor, "object-auditor", [node])
    assert audit["quarantined"] >= 1, audit
    assert not os.path.exists(victim)
    stats = run_passes(cluster, nodes=[node])
    assert stats["fragments_rebuilt"] >= 1, stats
    assert whole(cluster, api.account, "bad")
    assert frag_index(victim) == 2
    assert api("GET", "/ec/bad").content == body


def test_an_archive_of_another_index_is_handed_over_and_ours_rebuilt(cluster, api):
    """What a rebalance that moves a device to another index of a partition leaves: the
    device holds archives of its old index. Same versions, so the same digests: the once-per
    (partition, index) check finds them (here: the marker of the check removed)."""
    body = body_of(2 * SEG + 9, 75)
    assert api("PUT", "/ec/moved", data=body).status_code == 201
    durable(cluster, api.account, "ec", "moved")
    load_sections(cluster.nodes[0]["conf"])
    h = hashing.hash_path(api.account, "ec", "moved")
    paths = {frag_index(os.path.join(r, f)): os.path.join(r, f) for n in cluster.nodes
             for r, _, fs in os.walk(n["devices_root"]) for f in fs
             if f.endswith(".data") and os.path.basename(r) == h}
    shutil.copyfile(paths[1], paths[0])  # primary 0 now holds archive 1
    part_dir = os.path.dirname(os.path.dirname(os.path.dirname(paths[0])))
    with contextlib.suppress(FileNotFoundError):  # absent if no pass saw the partition yet
        os.unlink(os.path.join(part_dir, ec_rebuild.INDEX_MARK))
    stats = run_passes(cluster)
    assert stats["index_checks"] >= 1 and stats["fragments_rebuilt"] >= 1, stats
    assert whole(cluster, api.account, "moved"), placement(cluster, api.account, "moved")
    assert frag_index(paths[0]) == 0
    assert api("GET", "/ec/moved").content == body


def test_handoff_archives_revert_to_their_primary(cluster, api):
    bodies = {f"h{i}": body_of(2 * SEG + i, 60 + i) for i in range(6)}
    with node_gone(cluster, 3):
        for name, body in bodies.items():
            assert api("PUT", f"/ec/{name}", data=body).status_code == 201, name
    on_handoffs = sum(len(placement(cluster, api.account, n)[1]) for n in bodies)
    assert on_handoffs  # the dead node's share went to handoffs
    stats = run_passes(cluster)
    assert stats["reverted"] >= on_handoffs and stats["handoff_removed"] >= on_handoffs, stats
    for name, body in bodies.items():
        assert whole(cluster, api.account, name), placement(cluster, api.account, name)
        assert api("GET", f"/ec/{name}").content == body


def test_tombstones_reach_every_primary(cluster, api):
    names = [f"t{i}" for i in range(4)]
    for name in names:
        assert api("PUT", f"/ec/{name}", data=body_of(SEG + 1, 80)).status_code == 201
    with node_gone(cluster, 3):  # the node the proxy may still error-limit (above)
        for name in names:
            assert api("DELETE", f"/ec/{name}").status_code == 204
    stats: dict[str, Any] = run_passes(cluster)
    assert stats["tombstones_sent"] + stats["handoff_removed"] > 0, stats
    for name in names:
        held, others = placement(cluster, api.account, name)
        assert held == [("ts", -1)] * (K + M) and not others, (name, held, others)
        assert api("GET", f"/ec/{name}").status_code == 404


def test_rebuilt_archives_serve_reads_with_two_other_devices_gone(cluster, api):
    """Node 3 (two devices, neither of those that lost their archives) out of reach: the
    rebuilt archives are among the k read, and every object reads byte for byte. (Node 3,
    as the proxy error-limits a node gone for a while: a second would leave too few.)"""
    assert REBUILT
    with node_gone(cluster, 3):
        for name, body in REBUILT.items():
            r = api("GET", f"/ec/{name}")
            assert r.status_code == 200 and r.content == body, name


def test_abandoned_pending_archives_are_reclaimed_after_reclaim_age(cluster, api):
    """What a proxy that died between an EC PUT's two phases leaves: `.pend` archives, never
    read and never in a digest. A pass removes those written over `reclaim_age` (7 days) ago,
    found by their marks, and leaves a younger one (its commit may still come)."""
    body = body_of(2 * SEG + 3, 90)
    assert api("PUT", "/ec/abandoned", data=body).status_code == 201
    load_sections(cluster.nodes[0]["conf"])
    h = hashing.hash_path(api.account, "ec", "abandoned")
    ring = Ring.load(os.path.join(cluster.etc_dir, "object-1.ring.gz"))
    part, primaries = ring.get_nodes(api.account, "ec", "abandoned")
    # A primary's archive (a handoff's hash dir goes whole once its archive is handed over;
    # a node the proxy still error-limits from an earlier test left its primaries' to one).
    roots = {n["servers"]["object"]["port"]: n["devices_root"] for n in cluster.nodes}
    device_path, hdir, data = next(
        (dp, hd, os.path.join(hd, f))
        for p in primaries
        for dp in [os.path.join(roots[p["port"]], p["device"])]
        for hd in [fileformat.hash_dir(dp, fileformat.policy_part(part, 1), h)]
        if os.path.isdir(hd) for f in os.listdir(hd) if f.endswith(".data"))
    old, young = (Timestamp.parse(time.time() - age).internal for age in (8 * 86400, 60))
    for ts in (old, young):  # the first phase's file and its mark
        shutil.copyfile(data, os.path.join(hdir, f"{ts}.pend"))
        pending_marks.note(device_path, fileformat.policy_part(part, 1), h, ts)
    stats = run_passes(cluster)
    assert stats["pending_reclaimed"] == 1, stats
    assert sorted(f for f in os.listdir(hdir) if f.endswith(".pend")) == [f"{young}.pend"]
    assert [m for m in pending_marks.marks(device_path) if h in m] == \
        [f"1.{part}.{h}.{young}"]
    assert whole(cluster, api.account, "abandoned")
    assert api("GET", "/ec/abandoned").content == body
