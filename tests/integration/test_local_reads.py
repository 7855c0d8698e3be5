"""Local reads (proxy local_object_devices): the proxy reads replicas on its own host's
devices itself, and a client cannot tell: every answer matches, byte for byte, what the
object servers give a proxy that reads through them. The object servers see no GET; a
device the proxy cannot read sends the read to its server; corrupt copies are never served
(tests/integration/test_proxy_api.py::test_corrupt_replica_is_never_served reads through
this path too, as every cluster `swiftlite up` makes does).
"""

from __future__ import annotations

import email.utils
import http.client
import os
import re
import shutil
import time
import urllib.parse
import uuid

import pytest
import swiftclient

from tests.cluster import Cluster, start_cluster
from tests.helpers import start_proxy_variant, wait_for
from tests.integration.test_metrics import total

IGNORED = {"date", "x-trans-id", "x-openstack-request-id"}


def request(port: int, method: str, path: str, headers: dict | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, urllib.parse.quote(path), body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def comparable(answer: tuple[int, dict[str, str], bytes]) -> tuple:
    """An answer without what differs per request (dates, ids, multipart boundaries)."""
    status, headers, body = answer
    bound = re.search(r"boundary=(\w+)", headers.get("content-type", ""))
    if bound:
        body = body.replace(bound.group(1).encode(), b"B")
    headers = {k: (re.sub(r"boundary=\w+", "boundary=B", v) if k == "content-type" else v)
               for k, v in headers.items() if k not in IGNORED}
    return status, headers, body


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c: Cluster = start_cluster(str(tmp_path_factory.mktemp("localreads")), nodes=1, devices=3,
                               replicas=3, part_power=4)
    # The same storage read through the object servers, as a proxy on another host would.
    remote = start_proxy_variant(c, "remote", {"local_object_devices": ""})
    url, token = swiftclient.get_auth(c.auth_url, "test:tester", "testing")
    acct = urllib.parse.urlsplit(url).path
    yield c, c.info["proxy"]["port"], remote.port, acct, {"X-Auth-Token": token}
    remote.stop()
    c.stop()


def test_answers_match_the_object_servers(env):
    _, local, remote, acct, auth = env
    cont = f"{acct}/lr-{uuid.uuid4().hex[:8]}"
    assert request(local, "PUT", cont, auth)[0] == 201
    small, big = b"0123456789" * 100, os.urandom(2 * 1024 * 1024 + 12345)
    meta = {"X-Object-Meta-Farbe": "grün".encode(), "Content-Disposition": "inline",
            "Content-Type": "image/jpeg"}
    assert request(local, "PUT", f"{cont}/small", {**auth, **meta}, small)[0] == 201
    assert request(local, "PUT", f"{cont}/big ☃", auth, big)[0] == 201
    assert request(local, "PUT", f"{cont}/gone", auth, b"x")[0] == 201
    assert request(local, "DELETE", f"{cont}/gone", auth)[0] == 204
    expiring = {**auth, "X-Delete-At": str(int(time.time()) + 4)}  # (not past by the PUT)
    assert request(local, "PUT", f"{cont}/expiring", expiring, b"soon")[0] == 201
    _, head, _ = request(local, "HEAD", f"{cont}/small", auth)
    etag, modified = head["etag"], head["last-modified"]
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    cases = [("GET", name, extra) for name in ("small", "big ☃") for extra in (
        {}, {"Range": "bytes=5-20"}, {"Range": "bytes=-7"}, {"Range": "bytes=3-5,900-"},
        {"Range": "bytes=99999999-"}, {"Range": "bytes=x-y"}, {"If-Match": '"nope"'},
        {"If-None-Match": etag}, {"If-Modified-Since": later},
        {"If-Unmodified-Since": modified})]
    cases += [("HEAD", "small", {}), ("HEAD", "big ☃", {}), ("GET", "gone", {}),
              ("HEAD", "gone", {}), ("GET", "never", {}), ("GET", "small", {"If-Match": etag})]
    for method, name, extra in cases:
        here = comparable(request(local, method, f"{cont}/{name}", {**auth, **extra}))
        there = comparable(request(remote, method, f"{cont}/{name}", {**auth, **extra}))
        assert here == there, (method, name, extra)
        assert here[0] in (200, 206, 304, 404, 412, 416), (method, name, extra)
    wait_for(lambda: request(local, "GET", f"{cont}/expiring", auth)[0] == 404, 15,
             what="the expired object hidden")
    for port in (local, remote):  # allow_open_expired, as `swiftlite up` sets it
        assert request(port, "GET", f"{cont}/expiring", auth)[0] == 404
        assert request(port, "GET", f"{cont}/expiring",
                       {**auth, "X-Open-Expired": "true"})[:3:2] == (200, b"soon")


def test_reads_skip_the_object_servers(env):
    c, local, _, acct, auth = env
    obj_port = c.nodes[0]["servers"]["object"]["port"]
    cont = f"{acct}/lr-{uuid.uuid4().hex[:8]}"
    assert request(local, "PUT", cont, auth)[0] == 201
    assert request(local, "PUT", f"{cont}/img", auth, b"jpeg" * 4000)[0] == 201

    def gets() -> float:
        return total(obj_port, "swiftlite_requests_total", server="object-server",
                     method="GET")

    def local_reads() -> float:
        return total(local, "swiftlite_proxy_replica_reads_total", via="local")

    before, served = gets(), local_reads()
    for _ in range(30):
        assert request(local, "GET", f"{cont}/img", auth)[::2] == (200, b"jpeg" * 4000)
    # Counted in the proxy once a second (metrics sampler).
    wait_for(lambda: local_reads() >= served + 30, 10, what="30 local reads counted")
    assert gets() == before


def test_a_device_the_proxy_cannot_read_goes_to_its_server(env):
    c, local, _, acct, auth = env
    cont = f"{acct}/lr-{uuid.uuid4().hex[:8]}"
    assert request(local, "PUT", cont, auth)[0] == 201
    assert request(local, "PUT", f"{cont}/img", auth, b"still here")[0] == 201
    root = c.nodes[0]["devices_root"]
    dev = os.path.join(root, "d1")
    os.rename(dev, dev + ".away")  # unmounted, as the proxy and its object server see it
    try:
        obj_port = c.nodes[0]["servers"]["object"]["port"]
        before = total(obj_port, "swiftlite_requests_total", server="object-server",
                       method="GET", status="507")
        for _ in range(40):  # d1 holds a replica of everything (3 devices, 3 replicas)
            assert request(local, "GET", f"{cont}/img", auth)[::2] == (200, b"still here")
        # The first read that picked d1 asked its server, which answered 507 (and the proxy
        # then left d1 alone). Its metrics reach /metrics within a second (the sampler).
        wait_for(lambda: total(obj_port, "swiftlite_requests_total", server="object-server",
                               method="GET", status="507") > before, timeout=10,
                 what="the object server's 507 counted")
    finally:
        if os.path.exists(dev):
            # A container update that landed while d1 was away made a new DB there (the
            # tests' servers skip the mount check); the device comes back as it left, and
            # the other replicas hold that update.
            shutil.rmtree(dev)
        os.rename(dev + ".away", dev)


def test_a_hung_replica_costs_a_timeout_not_a_hang(env):
    """A replica whose file blocks its reader (a FIFO stands in for a hung disk): the local
    read gives up after local_open_timeout, and the read goes on to the device's server
    and, hedged, to the next replica; every GET answers."""
    from tests.integration.test_proxy_api import _replica_files

    c, _, _, acct, auth = env
    proxy = start_proxy_variant(c, "hung", {"local_open_timeout": "0.3",
                                            "concurrency_timeout": "0.3"})
    cont = f"lr-{uuid.uuid4().hex[:8]}"
    data = None
    try:
        assert request(proxy.port, "PUT", f"{acct}/{cont}", auth)[0] == 201
        assert request(proxy.port, "PUT", f"{acct}/{cont}/img", auth, b"pixels")[0] == 201
        data = _replica_files(c, cont, "img", need=1)[0]  # any replica will do
        os.unlink(data)
        os.mkfifo(data)  # open() blocks until a writer comes: a read that never returns
        def logged() -> bool:
            with open(proxy.log_path) as f:
                return "took over 0.3s" in f.read()

        # The FIFO's replica is read first by a third of the GETs, at random: GET until one
        # has, and a few more after (a fixed 12 would all miss it once in 130 runs).
        after = 0
        for _ in range(60):
            t0 = time.monotonic()
            assert request(proxy.port, "GET", f"{acct}/{cont}/img", auth)[::2] == \
                (200, b"pixels")
            assert time.monotonic() - t0 < 5
            after += logged()
            if after > 3:
                break
        wait_for(logged, 5, what="the slow local read logged")
    finally:
        proxy.stop()
        try:  # let the blocked readers go (an empty file: quarantined, replaced later)
            if data is not None:
                os.close(os.open(data, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
