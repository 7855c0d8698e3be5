"""Grouped replica writes: the primaries one object server holds get one request, and a
device that fails in the group still gets its replica written elsewhere."""

from __future__ import annotations

import glob
import hashlib
import os

import aiohttp
import pytest

from swiftlite.common.replica_groups import ALSO_DEVICES, ALSO_STATUSES
from swiftlite.obj.engine import fileformat
from tests.cluster import start_cluster
from tests.helpers import wait_for


def copies(cluster, name: str) -> list[str]:
    """Devices holding a .data file of /AUTH_test/<name> (found on disk, not via the ring)."""
    found = []
    for node in cluster.nodes:
        for path in glob.glob(os.path.join(node["devices_root"], "*", "objects", "*", "*",
                                           "*", "*.data")):
            md, _ = fileformat.read_file_metadata(path)
            if md.get("name") == f"/AUTH_test/{name}":
                found.append(path.split(os.sep)[-6])
    return sorted(found)


def object_log(cluster) -> str:
    with open(os.path.join(cluster.root, "logs", "node1-object.log")) as f:
        return f.read()


def test_replicas_on_one_server_take_one_request(cluster, conn):
    conn.put_container("grouped")
    data = hashlib.sha256(b"g").digest() * 2048
    for i in range(3):
        etag = conn.put_object("grouped", f"o{i}", data)
        assert etag == hashlib.md5(data).hexdigest()
        assert len(set(copies(cluster, f"grouped/o{i}"))) == 3  # three devices, one each
        # A HEAD after the PUT: once its line is in the (single-process) server's log, every
        # line of the PUT is there too. X-Newest asks every replica's server (a plain HEAD
        # is read from the devices by the proxy itself: local reads).
        conn.head_object("grouped", f"o{i}", headers={"X-Newest": "true"})
        path = f"/AUTH_test/grouped/o{i} "
        wait_for(lambda p=path: any("HEAD /d" in ln and p in ln
                                    for ln in object_log(cluster).splitlines()),
                 what="the HEAD's log line")
        puts = [ln for ln in object_log(cluster).splitlines() if "PUT /d" in ln and path in ln]
        assert len(puts) == 1, puts
    names = [o["name"] for o in conn.get_container("grouped")[1]]
    assert names == ["o0", "o1", "o2"]


async def test_object_server_reports_each_device(cluster):
    node = cluster.nodes[0]
    port = node["servers"]["object"]["port"]
    url = f"http://127.0.0.1:{port}/d1/3/AUTH_x/c/o"
    body = b"abc" * 1000
    async with aiohttp.ClientSession() as s:
        headers = {"X-Timestamp": "1700000000.00000", "Content-Type": "text/plain",
                   ALSO_DEVICES: "d2,nosuchdev"}
        async with s.put(url, data=body, headers=headers) as r:
            assert r.status == 201
            assert r.headers["ETag"] == hashlib.md5(body).hexdigest()
            assert r.headers[ALSO_STATUSES] == "201,507"
        # The same write again: every device has it, so every device says so (409).
        async with s.put(url, data=body, headers=headers) as r:
            assert r.status == 409
            assert r.headers[ALSO_STATUSES] == "409,507"
        async with s.put(url, data=body, headers={**headers, ALSO_DEVICES: "a;b"}) as r:
            assert r.status == 400
        # One device twice would be one hash dir locked twice by one thread: refused, and
        # the server still answers afterwards (no stuck committer).
        for also in ("d1", "d2,d2"):
            async with s.put(url, data=body, headers={**headers, ALSO_DEVICES: also,
                                                       "X-Timestamp": "1700000002.00000"}) as r:
                assert r.status == 400
                assert "named twice" in await r.text()
        async with s.put(url, data=body, headers={**headers, "ETag": "0" * 32,
                                                   "X-Timestamp": "1700000001.00000"}) as r:
            assert r.status == 422
    for dev in ("d1", "d2"):
        assert glob.glob(os.path.join(node["devices_root"], dev, "objects", "3", "*", "*",
                                      "1700000000.00000.data"))


@pytest.fixture
def lost_device_cluster(tmp_path):
    c = start_cluster(str(tmp_path / "c"), nodes=1, devices=4, replicas=3, part_power=4)
    yield c
    c.stop()


def test_failed_device_in_a_group_goes_to_a_handoff(lost_device_cluster):
    c = lost_device_cluster
    root = c.nodes[0]["devices_root"]
    conn = c.connection()
    conn.put_container("h")
    os.rename(os.path.join(root, "d1"), os.path.join(root, "gone"))  # a failed disk
    for i in range(8):
        conn.put_object("h", f"o{i}", b"x" * (1000 + i))
        # Three copies, none on the lost disk: whatever primary it was replaced by a handoff.
        assert copies(c, f"h/o{i}") == ["d2", "d3", "d4"]


def test_streamed_put_replaces_a_failed_device_with_a_handoff(lost_device_cluster):
    """The same through the streamed fan-out (a chunked body: no length to buffer it by).
    The first write the lost disk answers (507) learns of it after its body started, and is
    stored on the other two primaries, a quorum (the replicator mends it); that 507
    error-limits the disk, and every later write's replica goes to a handoff at once."""
    c = lost_device_cluster
    root = c.nodes[0]["devices_root"]
    conn = c.connection()
    conn.put_container("s")
    os.rename(os.path.join(root, "d1"), os.path.join(root, "gone"))
    for i in range(12):
        body = b"y" * (200_000 + i)
        chunks = (body[j:j + 65536] for j in range(0, len(body), 65536))
        etag = conn.put_object("s", f"o{i}", chunks)  # a generator: sent chunked
        assert etag == hashlib.md5(body).hexdigest()
        assert conn.get_object("s", f"o{i}")[1] == body
    lines = [ln for ln in object_log(c).splitlines() if "PUT /d1/" in ln and " 507 " in ln]
    refused = [i for i in range(12) if any(f"/s/o{i} 507" in ln for ln in lines)]
    assert len(refused) <= 1, refused
    for i in range(12):
        if i not in refused:  # the PUT answers on a quorum; the last replica lands just after
            wait_for(lambda n=f"s/o{i}": len(copies(c, n)) == 3, what=f"3 copies of o{i}")
            assert copies(c, f"s/o{i}") == ["d2", "d3", "d4"]
