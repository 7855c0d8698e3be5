"""Container/account info caching stays coherent across proxy workers and proxy hosts.

A change answered 2xx must be seen by the very next request on every worker (one host: the
shared stamp table) and on every proxy host sharing a memcached. Requests go on fresh
connections so SO_REUSEPORT spreads them over the workers; nothing sleeps.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import urllib.parse
import uuid

import pytest
import swiftclient

from tests.cluster import Cluster, start_cluster
from tests.helpers import start_memcached, start_proxy_variant, wait_for

WORKERS = 3
PROBES = 24  # fresh connections per check: all on one worker of three is (1/3)**23


def request(base_url: str, method: str, path: str, headers: dict | None = None,
            body: bytes | None = None) -> int:
    """One request on a new connection (so the kernel may pick any worker)."""
    u = urllib.parse.urlsplit(base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def statuses(base_url: str, method: str, path: str, headers: dict | None = None,
             n: int = PROBES) -> list[int]:
    return [request(base_url, method, path, headers) for _ in range(n)]


def proxy_log(root: str) -> str:
    with open(os.path.join(root, "logs", "proxy.log"), errors="replace") as f:
        return f.read()


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("coherence")), nodes=1, devices=3,
                      replicas=3, part_power=4, workers=WORKERS)
    wait_for(lambda: request(c.proxy_url, "GET", "/healthcheck") == 200, 30, what="proxy")
    yield c
    c.stop()
    # A cache call someone forgot to await does nothing, silently: make it loud here.
    assert "was never awaited" not in proxy_log(c.root)


@pytest.fixture(scope="module")
def owner(multi) -> tuple[str, str]:
    url, token = swiftclient.get_auth(multi.auth_url, "test:tester", "testing")
    return urllib.parse.urlsplit(url).path, token


def test_acl_grant_and_revoke_seen_by_every_worker(multi, owner):
    acct_path, token = owner
    auth = {"X-Auth-Token": token}
    cont = f"photos-{uuid.uuid4().hex[:8]}"
    path = f"{acct_path}/{cont}"
    assert request(multi.proxy_url, "PUT", path, auth) in (201, 202)
    assert request(multi.proxy_url, "PUT", f"{path}/cat.jpg", auth, b"meow") == 201
    # Every worker caches the container as private.
    assert statuses(multi.proxy_url, "GET", f"{path}/cat.jpg") == [401] * PROBES
    for _ in range(3):
        assert request(multi.proxy_url, "POST", path, {**auth, "X-Container-Read": ".r:*"}) \
            == 204
        assert statuses(multi.proxy_url, "GET", f"{path}/cat.jpg") == [200] * PROBES
        # Revoking must take effect at once everywhere: a kept grant is a security hole.
        assert request(multi.proxy_url, "POST", path, {**auth, "X-Container-Read": ""}) == 204
        assert statuses(multi.proxy_url, "GET", f"{path}/cat.jpg") == [401] * PROBES


def test_container_delete_and_recreate_seen_by_every_worker(multi, owner):
    acct_path, token = owner
    auth = {"X-Auth-Token": token}
    cont = f"gone-{uuid.uuid4().hex[:8]}"
    path = f"{acct_path}/{cont}"
    assert request(multi.proxy_url, "PUT", path, {**auth, "X-Container-Read": ".r:*"}) == 201
    assert request(multi.proxy_url, "PUT", f"{path}/a.jpg", auth, b"a") == 201
    assert statuses(multi.proxy_url, "GET", f"{path}/a.jpg") == [200] * PROBES
    assert request(multi.proxy_url, "DELETE", f"{path}/a.jpg", auth) == 204
    assert request(multi.proxy_url, "DELETE", path, auth) == 204
    # No worker still believes the container exists: an owner's object PUT is refused.
    assert [request(multi.proxy_url, "PUT", f"{path}/b.jpg", auth, b"b")
            for _ in range(PROBES)] == [404] * PROBES
    # Re-created private: no worker serves it anonymously from the old entry. (The ACL is
    # set explicitly: what a re-created container inherits from its deleted DB is another
    # matter than caching.)
    assert request(multi.proxy_url, "PUT", path, {**auth, "X-Container-Read": "test:tester3"}) \
        == 201
    assert request(multi.proxy_url, "PUT", f"{path}/a.jpg", auth, b"a") == 201
    assert statuses(multi.proxy_url, "GET", f"{path}/a.jpg") == [401] * PROBES


def test_account_delete_seen_by_every_worker(multi):
    """After an account DELETE no worker skips auto-creating it on the next write."""
    _, token = swiftclient.get_auth(multi.auth_url, "admin:admin", "admin")
    auth = {"X-Auth-Token": token}
    acct = f"/v1/AUTH_coh{uuid.uuid4().hex[:8]}"

    def exists() -> bool:
        # A missing account answers 204 too (auto-create view) but without X-Timestamp.
        u = urllib.parse.urlsplit(multi.proxy_url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            c.request("HEAD", acct, headers=auth)
            r = c.getresponse()
            r.read()
            return r.getheader("X-Timestamp") is not None
        finally:
            c.close()

    for i in range(8):
        # Account POSTs on many connections: every worker caches "the account exists".
        assert statuses(multi.proxy_url, "POST", acct, {**auth, "X-Account-Meta-I": str(i)},
                        n=12) == [204] * 12
        assert exists()
        assert request(multi.proxy_url, "DELETE", acct, auth) == 204
        assert not exists()
        # The first write after the DELETE, wherever it lands, must re-create the account.
        assert request(multi.proxy_url, "PUT", f"{acct}/c{i}", auth) in (201, 202)
        assert exists()
        assert request(multi.proxy_url, "DELETE", f"{acct}/c{i}", auth) == 204


# ---- several proxy hosts sharing one memcached -----------------------------------------------


@pytest.fixture(scope="module")
def memcached_port(tmp_path_factory):
    port, proc = start_memcached()
    try:
        yield port, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory, memcached_port):
    """Proxies A and B on their own ports sharing rings, storage and memcached, as two
    hosts would (one worker each, so only memcached can carry a change between them)."""
    port, _ = memcached_port
    c = start_cluster(str(tmp_path_factory.mktemp("twohosts")), nodes=1, devices=3,
                      replicas=3, part_power=4, workers=1)
    wait_for(lambda: request(c.proxy_url, "GET", "/healthcheck") == 200, 30, what="proxy")
    procs = [start_proxy_variant(c, name, {"memcache_servers": f"127.0.0.1:{port}"})
             for name in ("a", "b")]
    yield c, [f"http://127.0.0.1:{p.port}" for p in procs], procs
    for p in procs:
        p.stop()
    c.stop()
    for p in procs:
        assert "was never awaited" not in p.log_text()


def mc_stats(port: int) -> dict[str, int]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            assert chunk, "memcached closed the connection"
            data += chunk
    out = {}
    for line in data.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT" and parts[2].isdigit():
            out[parts[1]] = int(parts[2])
    return out


def test_change_through_one_host_seen_at_once_through_the_other(two_hosts, memcached_port):
    c, (a, b), _ = two_hosts
    hits_before = mc_stats(memcached_port[0])["get_hits"]
    url, token = swiftclient.get_auth(a + "/auth/v1.0", "test:tester", "testing")
    path = urllib.parse.urlsplit(url).path + f"/shared-{uuid.uuid4().hex[:8]}"
    auth = {"X-Auth-Token": token}
    assert request(a, "PUT", path, auth) == 201
    assert request(a, "PUT", f"{path}/x.jpg", auth, b"x") == 201
    for _ in range(3):
        # Both hosts have read (and cached) the private container.
        assert statuses(a, "GET", f"{path}/x.jpg", n=4) == [401] * 4
        assert statuses(b, "GET", f"{path}/x.jpg", n=4) == [401] * 4
        assert request(a, "POST", path, {**auth, "X-Container-Read": ".r:*"}) == 204
        assert statuses(b, "GET", f"{path}/x.jpg", n=4) == [200] * 4
        assert statuses(a, "GET", f"{path}/x.jpg", n=4) == [200] * 4
        assert request(b, "POST", path, {**auth, "X-Container-Read": ""}) == 204
        assert statuses(a, "GET", f"{path}/x.jpg", n=4) == [401] * 4
        assert statuses(b, "GET", f"{path}/x.jpg", n=4) == [401] * 4
    # The info really came from memcached (not only from the storage servers every time).
    assert mc_stats(memcached_port[0])["get_hits"] >= hits_before + 12
    # Deleted through B: A refuses the owner's object PUT at once.
    assert request(b, "DELETE", f"{path}/x.jpg", auth) == 204
    assert request(b, "DELETE", path, auth) == 204
    assert request(a, "PUT", f"{path}/y.jpg", auth, b"y") == 404


def test_a_read_asks_memcached_for_its_container_once(two_hosts, memcached_port):
    """staticweb, object versioning and the ACL check each want the container's info for
    an anonymous read of a public container: the request looks it up once and they share
    it (the count is memcached's own)."""
    c, (a, b), _ = two_hosts
    url, token = swiftclient.get_auth(a + "/auth/v1.0", "test:tester", "testing")
    path = urllib.parse.urlsplit(url).path + f"/memo-{uuid.uuid4().hex[:8]}"
    auth = {"X-Auth-Token": token}
    assert request(a, "PUT", path, {**auth, "X-Container-Read": ".r:*"}) == 201
    assert request(a, "PUT", f"{path}/x.jpg", auth, b"x") == 201
    assert request(b, "GET", f"{path}/x.jpg") == 200  # B's info of it is in memcached now
    before = mc_stats(memcached_port[0])
    assert statuses(b, "GET", f"{path}/x.jpg", n=10) == [200] * 10
    after = mc_stats(memcached_port[0])
    assert after["cmd_get"] - before["cmd_get"] == 10
    assert after["get_hits"] - before["get_hits"] == 10


def test_memcached_down_does_not_fail_requests(two_hosts, memcached_port):
    c, (a, b), procs = two_hosts
    _, mc = memcached_port
    url, token = swiftclient.get_auth(a + "/auth/v1.0", "test:tester", "testing")
    path = urllib.parse.urlsplit(url).path + f"/nomc-{uuid.uuid4().hex[:8]}"
    auth = {"X-Auth-Token": token}
    assert request(a, "PUT", path, auth) == 201
    os.killpg(mc.pid, signal.SIGKILL)
    mc.wait(timeout=10)
    assert request(b, "PUT", f"{path}/z.jpg", auth, b"z") == 201
    assert statuses(a, "GET", f"{path}/z.jpg", n=4) == [401] * 4
    assert request(a, "POST", path, {**auth, "X-Container-Read": ".r:*"}) == 204
    # Without memcached nothing is cached across hosts, so B sees the grant at once too.
    assert statuses(b, "GET", f"{path}/z.jpg", n=4) == [200] * 4
    assert statuses(a, "GET", f"{path}/z.jpg", n=4) == [200] * 4
    assert request(b, "DELETE", f"{path}/z.jpg", auth) == 204
    assert request(b, "DELETE", path, auth) == 204
    for p in procs:
        assert "Traceback" not in p.log_text()
