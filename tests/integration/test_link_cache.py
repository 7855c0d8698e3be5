"""The proxy's link cache: a GET through a symlink or of a versioned object reads only the
target once the link is known, and a change of the link through any worker of the host is
seen by the very next request on every worker.

Requests go on fresh connections, so SO_REUSEPORT spreads them over the proxy's workers.
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import time
import urllib.parse
import uuid

import pytest
import swiftclient

from tests.cluster import Cluster, start_cluster
from tests.helpers import wait_for

WORKERS = 3
PROBES = 24  # fresh connections per check: all on one worker of three is (1/3)**23


def request(base_url: str, method: str, path: str, headers: dict | None = None,
            body: bytes | None = None) -> tuple[int, bytes]:
    u = urllib.parse.urlsplit(base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request(method, urllib.parse.quote(path, safe="/?=&"), body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def answers(base_url: str, path: str, headers: dict | None = None) -> set[tuple[int, bytes]]:
    """What PROBES GETs on fresh connections got: one element when every worker agrees."""
    return {request(base_url, "GET", path, headers) for _ in range(PROBES)}


def object_reads(root: str, cont: str, name: str) -> int:
    """Object-server GETs and HEADs of /<dev>/<part>/<account>/cont/name so far."""
    n = 0
    for log in glob.glob(os.path.join(root, "logs", "*-object.log")):
        with open(log, errors="replace") as f:
            n += sum(1 for line in f
                     if (" GET /" in line or " HEAD /" in line) and f"/{cont}/{name} " in line)
    return n


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Cluster:
    # Reads through the object servers (no local reads): their log lines count the reads.
    c = start_cluster(str(tmp_path_factory.mktemp("linkcache")), nodes=1, devices=3,
                      replicas=3, part_power=4, workers=WORKERS,
                      extra_args=["--no-local-reads"])
    wait_for(lambda: request(c.proxy_url, "GET", "/healthcheck")[0] == 200, 30, what="proxy")
    yield c
    c.stop()
    with open(os.path.join(c.root, "logs", "proxy.log"), errors="replace") as f:
        assert "was never awaited" not in f.read()


@pytest.fixture(scope="module")
def owner(multi) -> tuple[str, dict[str, str]]:
    url, token = swiftclient.get_auth(multi.auth_url, "test:tester", "testing")
    return urllib.parse.urlsplit(url).path, {"X-Auth-Token": token}


def _container(multi, owner, **headers: str) -> str:
    acct, auth = owner
    path = f"{acct}/links-{uuid.uuid4().hex[:8]}"
    assert request(multi.proxy_url, "PUT", path, {**auth, **headers})[0] in (201, 202)
    return path


def test_link_read_once_per_worker(multi, owner):
    _, auth = owner
    path = _container(multi, owner)
    cont = path.rsplit("/", 1)[1]
    assert request(multi.proxy_url, "PUT", f"{path}/cat.jpg", auth, b"meow")[0] == 201
    assert request(multi.proxy_url, "PUT", f"{path}/alias", {
        **auth, "X-Symlink-Target": f"{cont}/cat.jpg"}, b"")[0] == 201
    for _ in range(3):
        assert answers(multi.proxy_url, f"{path}/alias", auth) == {(200, b"meow")}
    # 72 GETs through the link read it once per worker at most (uncached: 72 times). A log
    # line written late can only lower the count, never fail a working cache.
    assert 1 <= object_reads(multi.root, cont, "alias") <= WORKERS
    assert object_reads(multi.root, cont, "cat.jpg") >= 3 * PROBES - WORKERS


def test_retarget_and_delete_seen_by_every_worker(multi, owner):
    _, auth = owner
    path = _container(multi, owner)
    cont = path.rsplit("/", 1)[1]
    for i in range(3):
        assert request(multi.proxy_url, "PUT", f"{path}/o{i}", auth, f"body{i}".encode())[0] \
            == 201
    for i in range(3):
        assert request(multi.proxy_url, "PUT", f"{path}/link", {
            **auth, "X-Symlink-Target": f"{cont}/o{i}"}, b"")[0] == 201
        assert answers(multi.proxy_url, f"{path}/link", auth) == {(200, f"body{i}".encode())}
    # Overwritten by a plain object: its own bytes at once.
    assert request(multi.proxy_url, "PUT", f"{path}/link", auth, b"plain")[0] == 201
    assert answers(multi.proxy_url, f"{path}/link", auth) == {(200, b"plain")}
    assert request(multi.proxy_url, "PUT", f"{path}/link", {
        **auth, "X-Symlink-Target": f"{cont}/o0"}, b"")[0] == 201
    assert answers(multi.proxy_url, f"{path}/link", auth) == {(200, b"body0")}
    assert request(multi.proxy_url, "DELETE", f"{path}/link", auth)[0] == 204
    assert {s for s, _ in answers(multi.proxy_url, f"{path}/link", auth)} == {404}


def test_known_link_still_judges_the_caller(multi, owner):
    _, auth = owner
    links = _container(multi, owner)
    targets = _container(multi, owner)
    assert request(multi.proxy_url, "PUT", f"{targets}/secret.jpg", auth, b"secret")[0] == 201
    tname = targets.rsplit("/", 1)[1]
    assert request(multi.proxy_url, "PUT", f"{links}/l", {
        **auth, "X-Symlink-Target": f"{tname}/secret.jpg"}, b"")[0] == 201
    # The owner's reads teach every worker the link; strangers get nothing from that.
    assert answers(multi.proxy_url, f"{links}/l", auth) == {(200, b"secret")}
    assert {s for s, _ in answers(multi.proxy_url, f"{links}/l")} == {401}
    # The link's container public, the target's private: the target's ACL still holds.
    assert request(multi.proxy_url, "POST", links, {**auth, "X-Container-Read": ".r:*"})[0] \
        == 204
    assert {s for s, _ in answers(multi.proxy_url, f"{links}/l")} == {401}
    assert request(multi.proxy_url, "POST", targets, {**auth, "X-Container-Read": ".r:*"})[0] \
        == 204
    assert answers(multi.proxy_url, f"{links}/l") == {(200, b"secret")}
    # Revoking the link's container: refused at once, though every worker knows the link.
    assert request(multi.proxy_url, "POST", links, {**auth, "X-Container-Read": ""})[0] == 204
    assert {s for s, _ in answers(multi.proxy_url, f"{links}/l")} == {401}


def test_expired_link_is_gone_when_its_time_comes(multi, owner):
    _, auth = owner
    path = _container(multi, owner)
    cont = path.rsplit("/", 1)[1]
    assert request(multi.proxy_url, "PUT", f"{path}/o", auth, b"data")[0] == 201
    delete_at = int(time.time()) + 3
    assert request(multi.proxy_url, "PUT", f"{path}/l", {
        **auth, "X-Symlink-Target": f"{cont}/o", "X-Delete-At": str(delete_at)}, b"")[0] == 201
    assert answers(multi.proxy_url, f"{path}/l", auth) == {(200, b"data")}
    # Gone on every worker within a second of its time (the cache would keep it 10 s).
    wait_for(lambda: {s for s, _ in answers(multi.proxy_url, f"{path}/l", auth)} == {404},
             timeout=delete_at - time.time() + 1.5, what="expired link gone everywhere")


def test_new_version_delete_and_restore_seen_by_every_worker(multi, owner):
    _, auth = owner
    path = _container(multi, owner, **{"X-Versions-Enabled": "true"})
    for body in (b"v1", b"v2", b"v3"):
        assert request(multi.proxy_url, "PUT", f"{path}/img", auth, body)[0] == 201
        assert answers(multi.proxy_url, f"{path}/img", auth) == {(200, body)}
    assert request(multi.proxy_url, "DELETE", f"{path}/img", auth)[0] == 204
    assert {s for s, _ in answers(multi.proxy_url, f"{path}/img", auth)} == {404}
    # Restore the oldest version: a PUT of it by version id makes it current again.
    status, listing = request(multi.proxy_url, "GET", f"{path}?versions&format=json", auth)
    assert status == 200
    versions = [v for v in json.loads(listing) if v["name"] == "img"
                and v["content_type"] != "application/x-deleted;swift_versions_deleted=1"]
    oldest = min(versions, key=lambda v: v["version_id"])["version_id"]
    status, _ = request(multi.proxy_url, "PUT", f"{path}/img?version-id={oldest}", auth, b"")
    assert status == 201, status
    assert answers(multi.proxy_url, f"{path}/img", auth) == {(200, b"v1")}
