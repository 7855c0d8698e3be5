"""The object-expirer against a real cluster: an expired object leaves disks and listings after
one pass; an overwrite, a POST to a later time and X-If-Delete-At keep what they should."""

from __future__ import annotations

import asyncio
import configparser
import glob
import os
import time

from swiftlite.common.config import load_config
from swiftlite.common.runtime.daemon import new_stats, read_status
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import expiring, fileformat
from swiftlite.obj.expirer import Expirer
from tests.fault.nemesis.cluster import cluster_hashing
from tests.helpers import http_request, wait_for


def hash_dirs(cluster, path: str) -> dict[tuple[int, str], str]:
    """(node index, device) -> hash dir of /AUTH_test/<path>, found on disk by the name
    every object file carries (no ring, no hash affixes)."""
    out = {}
    for i, node in enumerate(cluster.nodes):
        for hdir in glob.glob(os.path.join(node["devices_root"], "*", "objects", "*", "*",
                                           "*")):
            main, _ = fileformat.current_files(os.listdir(hdir))
            if main is None:
                continue
            md, _ = fileformat.read_file_metadata(os.path.join(hdir, main))
            if md.get("name") == f"/AUTH_test/{path}":
                out[i, hdir.split(os.sep)[-5]] = hdir
    return out


def replicas(cluster, path: str) -> dict[tuple[int, str], str]:
    """(node index, device) -> the current files ("<ts>.data", "<ts>.ts", ...) of
    /AUTH_test/<path> there."""
    return {k: fileformat.state_of(os.listdir(h)) for k, h in hash_dirs(cluster, path).items()}


def affixes(cluster) -> tuple[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(cluster.etc_dir, "swiftlite.conf"))
    return parser.get("hash", "hash_path_prefix"), parser.get("hash", "hash_path_suffix")


async def expirer_pass(cluster, node: int = 0, now: float | None = None,
                       delay_reaping: float = 0.0) -> dict:
    """One pass of node `node`'s expirer in this process, as if the clock read `now`."""
    with cluster_hashing(*affixes(cluster)):
        conf = load_config(cluster.nodes[node]["conf"], "object-expirer")
        exp = Expirer(conf)
        exp.delay_reaping = delay_reaping
        if now is not None:
            exp.clock = lambda: now
        stats = new_stats()
        await exp.setup()
        try:
            await exp.run_pass(stats)
        finally:
            await exp.teardown()
    return stats


def await_pass(cluster, now: float) -> dict:
    return asyncio.run(expirer_pass(cluster, now=now))


def status(cluster, node: int = 0) -> dict:
    """The node's object-expirer status file (its last pass)."""
    with cluster_hashing(*affixes(cluster)):  # load_config sets the process's affixes
        conf = load_config(cluster.nodes[node]["conf"], "object-expirer")
    st = read_status(conf, "object-expirer")
    assert st is not None
    return st


def names_in(conn, container: str) -> list[str]:
    return [o["name"] for o in conn.get_container(container)[1]]


def wait_past(conn, container: str, name: str, delete_at: int) -> None:
    """Until the clock is past `delete_at` and readers get 404 (no expirer needed)."""
    from swiftclient import ClientException

    def gone() -> bool:
        if time.time() < delete_at:
            return False
        try:
            conn.head_object(container, name)
        except ClientException as exc:
            return exc.http_status == 404
        return False

    wait_for(gone, 30, 0.1, f"{name} to expire")


def test_one_pass_expires_every_replica_and_the_listing(cluster, conn):
    conn.put_container("exp")
    t = int(time.time()) + 2
    conn.put_object("exp", "gone", b"x" * 10, headers={"X-Delete-At": str(t)})
    # Overwritten before its time without X-Delete-At: its queued entries go stale.
    conn.put_object("exp", "kept", b"old", headers={"X-Delete-At": str(t)})
    conn.put_object("exp", "kept", b"new!")
    # Moved to a later time by a POST.
    later = t + 3600
    conn.put_object("exp", "moved", b"mm", headers={"X-Delete-At": str(t)})
    conn.post_object("exp", "moved", headers={"X-Delete-At": str(later)})
    conn.put_object("exp", "plain", b"p")
    assert len(replicas(cluster, "exp/gone")) == 3
    wait_past(conn, "exp", "gone", t)  # 404 at once, before any expirer
    assert "gone" in names_in(conn, "exp")  # still listed until the expirer runs

    cluster.run_daemon(0, "object-expirer")  # `swiftlite daemon object-expirer --once`

    assert names_in(conn, "exp") == ["kept", "moved", "plain"]
    head = conn.head_container("exp")
    assert head["x-container-object-count"] == "3"
    assert head["x-container-bytes-used"] == str(4 + 2 + 1)
    ts = Timestamp.parse(str(t)).internal
    assert replicas(cluster, "exp/gone") == {d: f"{ts}.ts"
                                            for d in replicas(cluster, "exp/gone")}
    assert len(replicas(cluster, "exp/gone")) == 3
    assert conn.get_object("exp", "kept")[1] == b"new!"
    assert conn.head_object("exp", "moved")["x-delete-at"] == str(later)
    st = status(cluster)
    assert (st["expired"], st["skipped"], st["failures"], st["deferred"]) == (3, 6, 0, 0)
    assert st["queued"] == 3  # the moved object's new time, one per replica

    # The moved object stays until its new time, and goes then.
    early = await_pass(cluster, later - 1)
    assert early["expired"] == 0 and "moved" in names_in(conn, "exp")
    late = await_pass(cluster, later)
    assert late["expired"] == 3 and late["queued"] == 0
    assert names_in(conn, "exp") == ["kept", "plain"]
    later_ts = Timestamp.parse(str(later)).internal
    assert set(replicas(cluster, "exp/moved").values()) == {f"{later_ts}.ts"}


def object_server(cluster) -> str:
    return f"http://{cluster.nodes[0]['ip']}:{cluster.nodes[0]['servers']['object']['port']}"


def test_if_delete_at_on_the_object_server(cluster):
    base = object_server(cluster)
    path = "/d1/0/AUTH_test/direct/o"
    ts = Timestamp.now()

    def req(method, t, **headers):
        return http_request(base, method, path, {"X-Timestamp": t.internal, **headers},
                            b"abc" if method == "PUT" else None)[0]

    # No object at all: 404, and nothing written.
    assert req("DELETE", ts, **{"X-If-Delete-At": "9999999999"}) == 404
    assert hash_dirs(cluster, "direct/o") == {}
    t1 = Timestamp(ts.ticks + 1)
    delete_at = int(time.time()) + 100
    assert req("PUT", t1, **{"X-Delete-At": str(delete_at), "Content-Length": "3"}) == 201
    t2 = Timestamp(t1.ticks + 1)
    assert req("DELETE", t2, **{"X-If-Delete-At": "soon"}) == 400
    assert req("DELETE", t2, **{"X-If-Delete-At": str(delete_at + 1)}) == 412
    assert req("DELETE", t1, **{"X-If-Delete-At": str(delete_at)}) == 409  # not newer
    assert http_request(base, "HEAD", path)[0] == 200  # still there
    assert req("DELETE", t2, **{"X-If-Delete-At": str(delete_at)}) == 204
    assert http_request(base, "HEAD", path)[0] == 404
    # Deleted: the tombstone carries no X-Delete-At.
    assert req("DELETE", Timestamp(t2.ticks + 1), **{"X-If-Delete-At": str(delete_at)}) == 412


def test_the_put_is_queued_on_each_replica_device(cluster, conn):
    conn.put_container("q")
    t = int(time.time()) + 600
    conn.put_object("q", "o", b"abc", headers={"X-Delete-After": "600"})
    devices = replicas(cluster, "q/o")
    assert len(devices) == 3
    for node, d in devices:
        q = expiring.Queue(os.path.join(cluster.nodes[node]["devices_root"], d))
        try:
            q.fold()
            mine = [e for e in q.entries() if e.name == "/AUTH_test/q/o"]
        finally:
            q.close()
        assert len(mine) == 1 and abs(mine[0].delete_at - t) <= 2
    # `swiftlite up` configured the daemon it starts on every node.
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cluster.nodes[0]["conf"])
    assert parser.get("object-expirer", "interval") == "30"


def test_a_stale_replica_does_not_expire_a_newer_version(cluster, conn):
    """The caveat: a replica that missed an overwrite must not tombstone it at the old
    time. Its peers hold the newer version (no X-Delete-At): it waits for replication."""
    conn.put_container("stale")
    t = int(time.time()) + 600
    conn.put_object("stale", "o", b"old", headers={"X-Delete-At": str(t)})
    dirs = hash_dirs(cluster, "stale/o")
    assert len(dirs) == 3
    (node, stale_dev), *fresh = sorted(dirs)
    part = dirs[node, stale_dev].split(os.sep)[-3]
    # The overwrite reaches two replicas only (straight to their object server).
    ts = Timestamp.now().internal
    for _, dev in fresh:
        assert http_request(object_server(cluster), "PUT", f"/{dev}/{part}/AUTH_test/stale/o",
                            {"X-Timestamp": ts, "Content-Length": "3",
                             "Content-Type": "x/y"}, b"new")[0] == 201

    st = asyncio.run(expirer_pass(cluster, now=t))  # other tests' entries are due too
    assert (st["deferred"], st["failures"]) == (1, 0)
    states = replicas(cluster, "stale/o")
    assert states[node, stale_dev].endswith(".data") and states[node, stale_dev] < ts
    assert all(states[k] == f"{ts}.data" for k in fresh)
    # The entry stays for the next pass (replication will have replaced the old copy).
    q = expiring.Queue(os.path.join(cluster.nodes[node]["devices_root"], stale_dev))
    try:
        assert [e.delete_at for e in q.entries() if e.name == "/AUTH_test/stale/o"] == [t]
    finally:
        q.close()


def test_delay_reaping_keeps_an_expired_object_until_it_has_passed(cluster, conn):
    """delay_reaping: an object past its X-Delete-At stays on disk (readable with
    X-Open-Expired) until the delay has passed too; then the pass expires it."""
    conn.put_container("late")
    t = int(time.time()) + 900
    conn.put_object("late", "o", b"kept a while", headers={"X-Delete-At": str(t)})
    assert all(s.endswith(".data") for s in replicas(cluster, "late/o").values())
    asyncio.run(expirer_pass(cluster, now=t + 50, delay_reaping=60))
    states = replicas(cluster, "late/o")
    assert len(states) == 3 and all(s.endswith(".data") for s in states.values())
    asyncio.run(expirer_pass(cluster, now=t + 61, delay_reaping=60))
    states = replicas(cluster, "late/o")
    assert len(states) == 3 and all(s.endswith(".ts") for s in states.values()), states
