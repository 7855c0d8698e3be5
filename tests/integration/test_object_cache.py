"""The proxy's hot-object cache (object_cache_size): hits cost no backend read; a write
through any worker of the host is seen by the very next GET on every worker; a write
through another proxy is seen within object_cache_ttl; ACLs are judged on every hit.

A proxy with three workers and the cache on runs beside the cluster's own proxy (which
stands in for another proxy host: it shares no memory with the first). Requests go on fresh
connections, so SO_REUSEPORT spreads them over the workers.
"""

from __future__ import annotations

import glob
import http.client
import os
import time
import urllib.parse
import uuid

import pytest
import swiftclient

from tests.cluster import Cluster, start_cluster
from tests.helpers import start_proxy_variant, wait_for

WORKERS = 3
PROBES = 24  # all on one worker of three: (1/3)**23
TTL = 4.0
MAX_OBJECT = 64 * 1024


def request(port: int, method: str, path: str, headers: dict | None = None,
            body: bytes | None = None) -> tuple[int, bytes, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, urllib.parse.quote(path), body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()


def answers(port: int, path: str, headers: dict | None = None) -> set[tuple[int, bytes]]:
    return {request(port, "GET", path, headers)[:2] for _ in range(PROBES)}


def object_gets(root: str, name: str) -> int:
    n = 0
    for log in glob.glob(os.path.join(root, "logs", "*-object.log")):
        with open(log, errors="replace") as f:
            n += sum(1 for line in f if " GET /" in line and f"/{name} " in line)
    return n


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c: Cluster = start_cluster(str(tmp_path_factory.mktemp("objcache")), nodes=1, devices=3,
                               replicas=3, part_power=4)
    # Reads through the object servers (no local reads), whose log lines count the
    # backend reads a hit must not make.
    proxy = start_proxy_variant(c, "cache", {
        "local_object_devices": "",
        "workers": str(WORKERS), "object_cache_size": "8388608",
        "object_cache_max_object": str(MAX_OBJECT), "object_cache_ttl": str(TTL)})
    url, token = swiftclient.get_auth(c.auth_url, "test:tester", "testing")
    acct = urllib.parse.urlsplit(url).path
    yield c, proxy.port, acct, {"X-Auth-Token": token}
    proxy.stop()
    c.stop()


def _container(port: int, acct: str, auth: dict, **headers: str) -> str:
    path = f"{acct}/hot-{uuid.uuid4().hex[:8]}"
    assert request(port, "PUT", path, {**auth, **headers})[0] in (201, 202)
    return path


def test_hits_cost_no_backend_read(env):
    c, port, acct, auth = env
    path = _container(port, acct, auth)
    name = f"cat-{uuid.uuid4().hex[:6]}.jpg"
    assert request(port, "PUT", f"{path}/{name}", auth, b"meow" * 1000)[0] == 201
    for _ in range(3):
        assert answers(port, f"{path}/{name}", auth) == {(200, b"meow" * 1000)}
    # 72 GETs: one backend read per worker at most (a late log line only lowers the count).
    assert 1 <= object_gets(c.root, name) <= WORKERS
    status, body, headers = request(port, "HEAD", f"{path}/{name}", auth)
    assert (status, body, headers["content-length"]) == (200, b"", "4000")


def test_write_through_any_worker_is_seen_at_once(env):
    _, port, acct, auth = env
    path = _container(port, acct, auth)
    for i in range(3):
        assert request(port, "PUT", f"{path}/img", auth, f"v{i}".encode())[0] == 201
        assert answers(port, f"{path}/img", auth) == {(200, f"v{i}".encode())}
    assert request(port, "POST", f"{path}/img", {**auth, "X-Object-Meta-Color": "red"})[0] \
        == 202
    metas = {request(port, "GET", f"{path}/img", auth)[2].get("x-object-meta-color")
             for _ in range(PROBES)}
    assert metas == {"red"}
    assert request(port, "DELETE", f"{path}/img", auth)[0] == 204
    assert {s for s, _ in answers(port, f"{path}/img", auth)} == {404}


def test_write_through_another_proxy_is_seen_within_the_ttl(env):
    c, port, acct, auth = env
    other = c.info["proxy"]["port"]
    path = _container(port, acct, auth)
    assert request(other, "PUT", f"{path}/img", auth, b"old")[0] == 201
    assert answers(port, f"{path}/img", auth) == {(200, b"old")}
    assert request(other, "PUT", f"{path}/img", auth, b"new")[0] == 201
    t0 = time.monotonic()
    wait_for(lambda: answers(port, f"{path}/img", auth) == {(200, b"new")}, TTL + 5,
             what="the overwrite seen through the caching proxy")
    assert time.monotonic() - t0 < TTL + 1.5


def test_acls_are_judged_on_every_hit(env):
    _, port, acct, auth = env
    path = _container(port, acct, auth)
    assert request(port, "PUT", f"{path}/private.jpg", auth, b"secret")[0] == 201
    assert answers(port, f"{path}/private.jpg", auth) == {(200, b"secret")}  # cached
    assert {s for s, _ in answers(port, f"{path}/private.jpg")} == {401}
    assert request(port, "POST", path, {**auth, "X-Container-Read": ".r:*"})[0] == 204
    assert answers(port, f"{path}/private.jpg") == {(200, b"secret")}
    assert request(port, "POST", path, {**auth, "X-Container-Read": ""})[0] == 204
    assert {s for s, _ in answers(port, f"{path}/private.jpg")} == {401}


def test_big_objects_ranges_and_conditions_go_to_the_object_servers(env):
    c, port, acct, auth = env
    path = _container(port, acct, auth)
    big = f"big-{uuid.uuid4().hex[:6]}"
    data = os.urandom(MAX_OBJECT + 1)
    assert request(port, "PUT", f"{path}/{big}", auth, data)[0] == 201
    for _ in range(5):
        assert request(port, "GET", f"{path}/{big}", auth)[:2] == (200, data)
    wait_for(lambda: object_gets(c.root, big) >= 5, 5, what="every big GET read from disk")
    small = b"0123456789" * 10
    assert request(port, "PUT", f"{path}/small", auth, small)[0] == 201
    for _ in range(PROBES):  # cached on every worker
        assert request(port, "GET", f"{path}/small", auth)[:2] == (200, small)
    status, body, _ = request(port, "GET", f"{path}/small", {**auth, "Range": "bytes=5-9"})
    assert (status, body) == (206, small[5:10])
    etag = request(port, "HEAD", f"{path}/small", auth)[2]["etag"]
    assert request(port, "GET", f"{path}/small", {**auth, "If-None-Match": etag})[0] == 304


def test_expired_object_is_not_served(env):
    _, port, acct, auth = env
    path = _container(port, acct, auth)
    at = int(time.time()) + 2
    assert request(port, "PUT", f"{path}/brief", {**auth, "X-Delete-At": str(at)}, b"x")[0] \
        == 201
    assert answers(port, f"{path}/brief", auth) == {(200, b"x")}
    wait_for(lambda: {s for s, _ in answers(port, f"{path}/brief", auth)} == {404},
             at - time.time() + 1.5, what="the expired object gone on every worker")


# ---- several proxy hosts sharing their writes through memcached (write_log) -----------------

LONG_TTL = 120.0  # so only the write log can explain a fresh answer
BOUND = 1.0 + 0.25 + 1.0  # max_lag + interval + the publisher's batching and slack


@pytest.fixture(scope="module")
def hosts(env):
    """Two caching proxies (two "hosts": no memory shared) and one without a cache, all
    with one memcached; entries live LONG_TTL."""
    from tests.helpers import start_memcached

    c, _, acct, auth = env
    mport, mproc = start_memcached()
    opts = {"local_object_devices": "",  # backend reads counted in the object logs
            "memcache_servers": f"127.0.0.1:{mport}", "object_cache_ttl": str(LONG_TTL),
            "object_cache_max_object": str(MAX_OBJECT)}
    a = start_proxy_variant(c, "host-a", {**opts, "object_cache_size": "8388608"})
    b = start_proxy_variant(c, "host-b", {**opts, "object_cache_size": "8388608",
                                          "workers": str(WORKERS)})
    plain = start_proxy_variant(c, "host-plain", opts)  # no cache: it still publishes
    yield c, a.port, b.port, plain.port, acct, auth, mproc
    for p in (a, b, plain):
        p.stop()
    if mproc.poll() is None:
        mproc.terminate()
        mproc.wait(10)


def _seen_within(port: int, path: str, auth: dict, want: set, bound: float) -> float:
    """Seconds until every probe through `port` answers one of `want` (status, body[:3])."""
    t0 = time.monotonic()
    wait_for(lambda: {(s, b[:3]) for s, b in answers(port, path, auth)} == want, bound + 10,
             what=f"{want} through the other proxy")
    return time.monotonic() - t0


def test_overwrite_and_delete_through_another_host_are_seen_within_the_bound(hosts):
    c, a, b, plain, acct, auth, _ = hosts
    path = _container(a, acct, auth)
    for writer in (a, plain):  # a caching proxy, and one without a cache
        obj = f"img-{writer}-{uuid.uuid4().hex[:6]}"
        name = f"{path}/{obj}"
        assert request(writer, "PUT", name, auth, b"old")[0] == 201
        for _ in range(3):  # cached on every worker of b, then served from memory
            assert answers(b, name, auth) == {(200, b"old")}
        # 72 GETs, most from memory. Not one per worker exactly: the PUT, heard from the log
        # a moment after a worker cached the object, voids that entry once (b cannot order
        # the two), and a worker whose polls lag (a loaded machine) drops its entries.
        assert 1 <= object_gets(c.root, obj) <= PROBES
        assert request(writer, "PUT", name, auth, b"new")[0] == 201
        assert _seen_within(b, name, auth, {(200, b"new")}, BOUND) < BOUND
        assert request(writer, "DELETE", name, auth)[0] == 204
        assert _seen_within(b, name, auth, {(404, b"Not")}, BOUND) < BOUND


def test_without_memcached_no_worker_serves_from_its_cache(hosts):
    """A host that cannot hear the others' writes must not trust its entries: after at most
    max_lag every read goes to the object servers (and sees a write nobody published)."""
    _, a, b, _, acct, auth, mproc = hosts
    path = _container(a, acct, auth)
    assert request(a, "PUT", f"{path}/img", auth, b"old")[0] == 201
    assert answers(b, f"{path}/img", auth) == {(200, b"old")}
    mproc.terminate()
    mproc.wait(10)
    assert request(a, "PUT", f"{path}/img", auth, b"unpublished")[0] == 201
    assert _seen_within(b, f"{path}/img", auth, {(200, b"unp")}, BOUND) < BOUND


def _version_ids(port: int, path: str, auth: dict) -> set[str | None]:
    return {request(port, "GET", path, auth)[2].get("x-object-version-id")
            for _ in range(PROBES)}


def test_versioning_turned_on_through_another_host_is_seen_within_the_bound(hosts):
    """A plain read's "is this container versioned?" is kept in the worker while the write
    log vouches for it (info.SyncedInfo): a container write through another host must still
    reach every worker within the bound, and one through this host at once."""
    _, a, b, _, acct, auth, _ = hosts
    for writer in (a, b):  # another host, then this one
        path = _container(a, acct, auth)
        assert request(a, "PUT", f"{path}/img", auth, b"pre")[0] == 201
        assert _version_ids(b, f"{path}/img", auth) == {None}  # kept: not versioned
        assert request(writer, "POST", path, {**auth, "X-Versions-Enabled": "true"})[0] == 204
        if writer == b:
            assert _version_ids(b, f"{path}/img", auth) == {"null"}
            continue
        t0 = time.monotonic()
        name = f"{path}/img"
        wait_for(lambda: _version_ids(b, name, auth) == {"null"}, BOUND + 10,  # noqa: B023
                 what="versioning seen through the other host")
        assert time.monotonic() - t0 < BOUND
