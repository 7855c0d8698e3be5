"""The plain-read short cut (swiftlite/proxy/plain_reads.py): a GET or HEAD of an object with
no query string, Range or condition skips the pipeline features that leave it alone, and a
client cannot tell. Every answer here matches, byte for byte, what a proxy with the short cut
off (`plain_read_shortcut = false`) gives on the same storage: owners, anonymous callers,
container ACLs and referrers, SLO, DLO, symlinks, versioned containers, staticweb error
pages, CORS and reserved headers sent by a client. ACL changes bind the very next read.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
import uuid

import pytest
import swiftclient

from swiftlite.proxy.pipeline import HOOKS, PASS, Middleware
from swiftlite.proxy.plain_reads import PlainReads
from tests.cluster import Cluster, start_cluster
from tests.helpers import start_proxy_variant, wait_for
from tests.integration.test_local_reads import comparable, request
from tests.integration.test_metrics import total


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c: Cluster = start_cluster(str(tmp_path_factory.mktemp("plainreads")), nodes=1,
                               devices=3, replicas=3, part_power=4)
    full = start_proxy_variant(c, "full", {"plain_read_shortcut": "false"})
    tokens = {}
    for user, key in (("test:tester", "testing"), ("test:tester3", "testing3"),
                      ("test2:tester2", "testing2")):
        url, token = swiftclient.get_auth(c.auth_url, user, key)
        tokens[user] = (urllib.parse.urlsplit(url).path, {"X-Auth-Token": token})
    yield c, c.info["proxy"]["port"], full.port, tokens
    full.stop()
    c.stop()


def _same(short: int, full: int, method: str, path: str, headers: dict,
          expect: int) -> tuple:
    here = comparable(request(short, method, path, headers))
    there = comparable(request(full, method, path, headers))
    assert here == there, (method, path, headers)
    assert here[0] == expect, (method, path, headers, here[0])
    return here


def test_answers_match_the_full_pipeline(env):
    c, short, full, tokens = env
    acct, auth = tokens["test:tester"]
    _, reader = tokens["test:tester3"]  # in the account, not an admin: ACLs decide
    _, stranger = tokens["test2:tester2"]
    tag = uuid.uuid4().hex[:8]
    put = lambda path, body=b"", **h: request(short, "PUT", path, {**auth, **h}, body)[0]  # noqa: E731
    plain, private, public = (f"{acct}/{n}-{tag}" for n in ("plain", "private", "public"))
    assert put(plain) == 201
    assert put(private) == 201
    assert put(public, **{"X-Container-Read": ".r:*",
                          "X-Container-Meta-Access-Control-Allow-Origin": "http://a.example",
                          "X-Container-Meta-Web-Error": "error.html"}) == 201
    referred = f"{acct}/referred-{tag}"
    assert put(referred, **{"X-Container-Read": ".r:img.example"}) == 201
    assert put(f"{plain}/cat.jpg", b"meow" * 1000, **{"Content-Type": "image/jpeg",
                                                     "X-Object-Meta-Farbe": "grün".encode()}) == 201
    assert put(f"{private}/secret", b"hidden") == 201
    assert put(f"{public}/open", b"for everyone") == 201
    assert put(f"{public}/404error.html", b"nothing here", **{"Content-Type": "text/html"}) \
        == 201
    assert put(f"{referred}/pic", b"linked") == 201
    # Large objects and links: the short cut reads them, sees whose they are, and declines.
    assert put(f"{plain}/seg1", b"a" * 100) == 201
    assert put(f"{plain}/seg2", b"b" * 50) == 201
    manifest = json.dumps([{"path": f"/plain-{tag}/seg1"}, {"path": f"/plain-{tag}/seg2"}])
    conn = http.client.HTTPConnection("127.0.0.1", short, timeout=30)
    conn.request("PUT", f"{plain}/slo?multipart-manifest=put", manifest.encode(), auth)
    assert conn.getresponse().status == 201
    conn.close()
    assert put(f"{plain}/dlo", **{"X-Object-Manifest": f"plain-{tag}/seg"}) == 201
    assert put(f"{plain}/link", **{"X-Symlink-Target": f"plain-{tag}/cat.jpg"}) == 201
    versioned = f"{acct}/versioned-{tag}"
    assert put(versioned, **{"X-Versions-Enabled": "true"}) == 201
    assert put(f"{versioned}/img", b"first") == 201
    assert put(f"{versioned}/img", b"second") == 201

    cases = [
        (plain + "/cat.jpg", auth, 200), (plain + "/missing", auth, 404),
        (plain + "/cat.jpg", {}, 401), (plain + "/cat.jpg", reader, 403),
        (plain + "/cat.jpg", stranger, 403),
        (plain + "/cat.jpg", {"X-Auth-Token": "AUTH_tk" + "0" * 32}, 401),
        (private + "/secret", {}, 401), (private + "/secret", reader, 403),
        (public + "/open", {}, 200), (public + "/open", reader, 200),
        (public + "/absent", {}, 404),  # staticweb's error page, for anonymous readers
        (public + "/open", {"Origin": "http://a.example"}, 200),  # CORS decorates it
        (referred + "/pic", {}, 401), (referred + "/pic", {"Referer": "http://img.example/x"}, 200),
        (plain + "/slo", auth, 200), (plain + "/dlo", auth, 200), (plain + "/link", auth, 200),
        (plain + "/link", auth, 200),  # the link again: from the link cache this time
        (versioned + "/img", auth, 200),
        # Headers only the cluster may send are dropped, as on the full path.
        (plain + "/cat.jpg", {**auth, "X-Backend-Replication": "true",
                              "X-Object-Sysmeta-Symlink-Target": f"private-{tag}/secret"}, 200),
        # What a feature declares (plain_refused_by...) is found in any case of the name.
        (plain + "/cat.jpg", {**auth, "x-backend-replication": "true"}, 200),
        (public + "/open", {"origin": "http://a.example"}, 200),
        (public + "/absent", {**reader, "X-Web-Mode": "true"}, 404),
        (public + "/open", {"Authorization": "Bearer not-s3"}, 200),
    ]
    for path, headers, expect in cases:
        for method in ("GET", "HEAD"):
            _same(short, full, method, path, headers, expect)
    bodies = {path: _same(short, full, "GET", path, auth, 200)[2]
              for path in (plain + "/slo", plain + "/dlo", plain + "/link", versioned + "/img")}
    assert bodies == {plain + "/slo": b"a" * 100 + b"b" * 50,
                      plain + "/dlo": b"a" * 100 + b"b" * 50,
                      plain + "/link": b"meow" * 1000, versioned + "/img": b"second"}
    assert _same(short, full, "GET", public + "/absent", {}, 404)[2] == b"nothing here"
    cors = _same(short, full, "GET", public + "/open", {"Origin": "http://a.example"}, 200)
    assert cors[1]["access-control-allow-origin"] == "http://a.example"
    assert not any(k.startswith(("x-object-sysmeta-", "x-backend-"))
                   for k in _same(short, full, "GET", plain + "/link", auth, 200)[1])

    # Both routes were taken on the short-cut proxy (counted within a second); none on the
    # other, which has it off.
    wait_for(lambda: min(routes(short)) > 0, 10, what="plain reads counted")
    assert routes(full) == (0, 0)


def routes(port: int) -> tuple[float, float]:
    """Plain reads the proxy on `port` counted: (short cut, declined)."""
    return (total(port, "swiftlite_proxy_plain_reads_total", route="shortcut"),
            total(port, "swiftlite_proxy_plain_reads_total", route="declined"))


def settled_routes(port: int) -> tuple[float, float]:
    """`routes` once the counts flushed once a second have stopped moving."""
    return _settled(lambda: routes(port))


def _settled(read):
    """What `read()` gives once it has stopped moving (counts are flushed once a second)."""
    seen = {"value": read(), "since": time.monotonic()}

    def still() -> bool:
        now = read()
        if now != seen["value"]:
            seen.update(value=now, since=time.monotonic())
        return time.monotonic() - seen["since"] > 1.5  # over a sampler interval unchanged

    wait_for(still, 15, what="counts settled")
    return seen["value"]


def test_a_declined_manifest_is_fetched_once(env):
    """SLO and DLO decline a plain read of their manifest. The full pipeline then gets the
    answer the short cut already read, not a second fetch: one replica read for the manifest
    and one per segment (it was one more per read)."""
    c, short, _, tokens = env
    acct, auth = tokens["test:tester"]
    tag = uuid.uuid4().hex[:8]
    cont = f"{acct}/large-{tag}"
    assert request(short, "PUT", cont, auth)[0] == 201
    assert request(short, "PUT", f"{cont}/seg1", auth, b"a" * 100)[0] == 201
    assert request(short, "PUT", f"{cont}/seg2", auth, b"b" * 50)[0] == 201
    manifest = json.dumps([{"path": f"/large-{tag}/seg1"}, {"path": f"/large-{tag}/seg2"}])
    conn = http.client.HTTPConnection("127.0.0.1", short, timeout=30)  # a query: not quoted
    conn.request("PUT", f"{cont}/slo?multipart-manifest=put", manifest.encode(), auth)
    assert conn.getresponse().status == 201
    conn.close()
    assert request(short, "PUT", f"{cont}/dlo", {**auth, "X-Object-Manifest":
                                                  f"large-{tag}/seg"})[0] == 201
    # One worker, and no second replica asked after concurrency_timeout: exact counts.
    proxy = start_proxy_variant(c, "counted", {"concurrent_gets": "false"})
    try:
        def reads() -> float:
            return total(proxy.port, "swiftlite_proxy_replica_reads_total")

        for name, method, expect in (("slo", "GET", 3), ("slo", "HEAD", 1),
                                     ("dlo", "GET", 3), ("dlo", "HEAD", 1)):
            before = _settled(reads)
            status, _, body = request(proxy.port, method, f"{cont}/{name}", auth)
            assert status == 200 and body == (b"a" * 100 + b"b" * 50 if method == "GET"
                                              else b""), (name, method)
            assert _settled(reads) - before == expect, (name, method)
    finally:
        proxy.stop()


def test_an_error_from_the_core_is_answered_once(env):
    """The core's refusal (a reader the container does not admit) is the answer, as on the
    full path: the read is not declined and judged a second time by the whole pipeline."""
    _, short, full, tokens = env
    acct, auth = tokens["test:tester"]
    _, reader = tokens["test:tester3"]
    cont = f"{acct}/err-{uuid.uuid4().hex[:8]}"
    assert request(short, "PUT", cont, auth)[0] == 201
    assert request(short, "PUT", f"{cont}/img", auth, b"pixels")[0] == 201
    shortcut, declined = settled_routes(short)
    for _ in range(5):
        _same(short, full, "GET", f"{cont}/img", reader, 403)
    wait_for(lambda: routes(short)[0] >= shortcut + 5, 10, what="five short-cut reads")
    assert settled_routes(short) == (shortcut + 5, declined)


def test_an_acl_change_binds_the_next_read(env):
    _, short, _, tokens = env
    acct, auth = tokens["test:tester"]
    _, reader = tokens["test:tester3"]
    cont = f"{acct}/acl-{uuid.uuid4().hex[:8]}"
    assert request(short, "PUT", cont, {**auth, "X-Container-Read": "test:tester3"})[0] == 201
    assert request(short, "PUT", f"{cont}/img", auth, b"pixels")[0] == 201
    for _ in range(3):
        assert request(short, "GET", f"{cont}/img", reader)[::2] == (200, b"pixels")
    assert request(short, "POST", cont, {**auth, "X-Container-Read": ""})[0] == 204
    assert request(short, "GET", f"{cont}/img", reader)[0] == 403
    assert request(short, "HEAD", f"{cont}/img", reader)[0] == 403


class _Unknown(Middleware):
    name = "unknown"  # says nothing about plain reads


class _Passing(Middleware):
    name = "passing"
    plain_reads = PASS


class _Hooked(Middleware):
    name = "hooked"
    plain_reads = HOOKS

    def accept_plain(self, request, path, resp) -> bool:
        return True


def test_a_feature_that_says_nothing_keeps_every_read_on_the_full_path():
    async def core(request):
        return None

    passing, hooked = _Passing(core, None, {}), _Hooked(core, None, {})
    lane = PlainReads.build([passing, hooked], core, passing)
    assert lane is not None and lane.admitters == [] and lane.acceptors == [(None, hooked)]
    assert PlainReads.build([passing, _Unknown(core, None, {}), hooked], core, passing) is None
