"""No tenant can hurt another through the proxy (a real cluster on loopback).

Hostile requests that make every replica fail must not error-limit the nodes for everyone;
non-ASCII header values are stored or refused, never a 5xx or a traceback; owner-only
headers stay hidden from readers; statuses say what happened (503 when nothing could be
reached, 409 for a lost race); tokens and request ids from clients are taken only exactly.

Tests run in file order on one cluster: the last ones swap and kill its object server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
import swiftclient

from tests.cluster import Cluster, start_cluster
from tests.helpers import (
    cluster_logs,
    free_port,
    healthy,
    log_tracebacks,
    start_proxy_variant,
    wait_for,
)

A = "/v1/AUTH_test"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    """What the object servers answer is judged here (a failing one must not be error
    limited for a hostile request; none reachable is a 503), so reads go through them, as
    from a proxy on another host: the proxy does not read the devices itself."""
    c = start_cluster(str(tmp_path_factory.mktemp("isolation")), nodes=1, devices=4,
                      replicas=3, part_power=6, extra_args=["--no-local-reads"])
    yield c
    c.stop()


class Raw:
    """Requests with exact header bytes (http.client would refuse or re-encode them), on
    one keep-alive connection."""

    def __init__(self, cluster, url: str | None = None) -> None:
        u = urllib.parse.urlsplit(url or cluster.proxy_url)
        self.addr = (u.hostname, u.port)
        self.sock: socket.socket | None = None

    def __call__(self, method: str, path: str, headers: dict | None = None,
                 body: bytes = b"") -> tuple[int, dict[str, bytes], bytes]:
        for attempt in (0, 1):
            if self.sock is None:
                self.sock = socket.create_connection(self.addr, timeout=30)
            try:
                return self._exchange(method, path, headers or {}, body)
            except (ConnectionError, EOFError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _exchange(self, method, path, headers, body):
        lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: t",
                 b"Content-Length: %d" % len(body)]
        for k, v in headers.items():
            lines.append(k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()))
        self.sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        f = self.sock.makefile("rb")
        status_line = f.readline()
        if not status_line:
            raise EOFError
        status = int(status_line.split()[1])
        hdrs: dict[str, bytes] = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            k, _, v = line.partition(b":")
            hdrs[k.decode().lower()] = v.strip()
        if method == "HEAD" or status in (204, 304):
            data = b""
        elif "content-length" in hdrs:
            data = f.read(int(hdrs["content-length"]))
        elif hdrs.get("transfer-encoding", b"").lower() == b"chunked":
            data = b""
            while (size := int(f.readline().strip(), 16)):
                data += f.read(size)
                f.readline()
            f.readline()
        else:
            data = f.read()
            self.close()
        if hdrs.get("connection", b"").lower() == b"close":
            self.close()
        return status, hdrs, data

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def token(cluster, user="test:tester", key="testing") -> str:
    return swiftclient.get_auth(cluster.auth_url, user, key)[1]


def log_text(cluster) -> str:
    return cluster_logs(cluster.root)


# ---- 4: non-ASCII header values ------------------------------------------------------------

HEADERS = ["X-Object-Meta-T", "X-Container-Meta-T", "X-Account-Meta-T", "Content-Type",
           "Content-Disposition", "Content-Encoding", "X-Container-Read", "X-Container-Write",
           "Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since",
           "Accept", "X-Trans-Id", "X-Trans-Id-Extra", "Destination", "Destination-Account",
           "X-Copy-From", "X-Copy-From-Account", "Origin", "Referer", "X-Delete-At",
           "X-Delete-After", "X-If-Delete-At", "X-Auth-Token", "X-Service-Token",
           "X-Container-Sync-To", "X-Container-Sync-Key", "X-Object-Manifest",
           "X-Account-Access-Control", "X-Storage-Policy", "X-Timestamp", "X-Newest", "ETag",
           "Access-Control-Request-Method"]
# UTF-8 (€, ü), bytes that are not UTF-8, a digit str.isdigit() takes but int() refuses.
VALUES = ["\u20ac\u00fc".encode(), b"\xff\xfe", "bytes=0-\u00b2".encode()]
METHODS = ["GET", "HEAD", "PUT", "POST", "DELETE", "COPY", "OPTIONS"]


def test_non_ascii_header_values_never_5xx(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    assert raw("PUT", f"{A}/nonascii", {"X-Auth-Token": tok})[0] in (201, 202)
    assert raw("PUT", f"{A}/nonascii/o", {"X-Auth-Token": tok}, b"hello")[0] == 201
    paths = [A, f"{A}/nonascii", f"{A}/nonascii/o", f"{A}/nonascii/new"]

    def run(header: str) -> list:
        r = Raw(cluster)
        bad = []
        for value in VALUES:
            for method in METHODS:
                for path in paths:
                    headers = {} if header == "X-Auth-Token" else {"X-Auth-Token": tok}
                    headers[header] = value
                    if method == "OPTIONS":
                        headers.setdefault("Origin", "http://example.com")
                    body = b"data" if method == "PUT" and path.count("/") == 4 else b""
                    status, _, data = r(method, path, headers, body)
                    if status >= 500:
                        bad.append((header, value, method, path, status, data[:200]))
        r.close()
        return bad

    with ThreadPoolExecutor(4) as pool:
        bad = [b for found in pool.map(run, HEADERS) for b in found]
    assert not bad, bad[:20]
    assert "Traceback" not in log_text(cluster)


def test_utf8_values_stored_and_returned(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    euro = "\u20ac\u00fc".encode()
    raw("PUT", f"{A}/utf8hdr", {"X-Auth-Token": tok})
    status, _, _ = raw("PUT", f"{A}/utf8hdr/o", {
        "X-Auth-Token": tok, "X-Object-Meta-Name": euro,
        "Content-Disposition": b"attachment; filename=" + euro}, b"x")
    assert status == 201
    status, headers, _ = raw("HEAD", f"{A}/utf8hdr/o", {"X-Auth-Token": tok})
    assert status == 200
    assert headers["x-object-meta-name"] == euro
    assert headers["content-disposition"] == b"attachment; filename=" + euro
    # Bytes that are not UTF-8 in stored metadata: refused, nothing stored.
    status, _, _ = raw("POST", f"{A}/utf8hdr/o", {"X-Auth-Token": tok,
                                                    "X-Object-Meta-Name": b"\xff"})
    assert status == 400
    assert raw("HEAD", f"{A}/utf8hdr/o", {"X-Auth-Token": tok})[1]["x-object-meta-name"] == euro


# ---- 5: owner-only headers -----------------------------------------------------------------

OWNER_ONLY = ("x-container-sync-key", "x-container-sync-to", "x-container-read",
              "x-container-write")


def test_owner_only_headers_hidden_from_readers(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    status, _, _ = raw("PUT", f"{A}/shared", {
        "X-Auth-Token": tok, "X-Container-Read": ".r:*,.rlistings,test:tester3",
        "X-Container-Write": "test:tester3", "X-Container-Sync-Key": "s3cret",
        "X-Container-Sync-To": "//realm/cluster/AUTH_test/backup"})
    assert status in (201, 202)
    raw("PUT", f"{A}/shared/o", {"X-Auth-Token": tok}, b"x")
    for method in ("GET", "HEAD"):
        status, headers, _ = raw(method, f"{A}/shared", {"X-Auth-Token": tok})
        assert status in (200, 204) and all(h in headers for h in OWNER_ONLY), headers
        reader = token(cluster, "test:tester3", "testing3")
        for who in ({"X-Auth-Token": reader}, {}):  # ACL reader, anonymous .rlistings
            status, headers, _ = raw(method, f"{A}/shared", who)
            assert status in (200, 204)
            assert not [h for h in OWNER_ONLY if h in headers], (who, headers)


# ---- 7: statuses, tokens, request ids --------------------------------------------------------

FUTURE_PROXY = """
import sys, time
from swiftlite.common import timestamp
# A proxy whose clock runs an hour ahead: its writes win every race with the real one.
timestamp.Timestamp.now = classmethod(lambda cls: cls(int((time.time() + 3600) * 100000)))
from swiftlite.cli import main
main(["server", "proxy", "-c", sys.argv[1], "--port", sys.argv[2]])
"""


def test_delete_that_lost_the_race_is_409(cluster):
    conf = cluster.info["proxy"]["cmd"][cluster.info["proxy"]["cmd"].index("-c") + 1]
    port = free_port()
    with open(os.path.join(cluster.root, "logs", "future-proxy.log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", FUTURE_PROXY, conf, str(port)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    cluster.extra.append(proc)
    wait_for(lambda: healthy(port), 30, what="the second proxy")
    tok = token(cluster)
    raw = Raw(cluster)
    raw("PUT", f"{A}/race", {"X-Auth-Token": tok})
    future = Raw(cluster)
    future.addr = ("127.0.0.1", port)
    assert future("PUT", f"{A}/race/o", {"X-Auth-Token": tok}, b"x")[0] == 201
    status, _, _ = raw("DELETE", f"{A}/race/o", {"X-Auth-Token": tok})
    assert status == 409
    assert raw("GET", f"{A}/race/o", {"X-Auth-Token": tok})[0] == 200
    future.close()
    os.killpg(proc.pid, 15)
    proc.wait(10)


def test_unparsable_referer_is_not_500(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    raw("PUT", f"{A}/pub", {"X-Auth-Token": tok, "X-Container-Read": ".r:.example.com"})
    raw("PUT", f"{A}/pub/o", {"X-Auth-Token": tok}, b"x")
    for referer in ("http://[::1", "http://[bad]/", "http://a.example.com:99999999/"):
        status, _, _ = raw("GET", f"{A}/pub/o", {"Referer": referer})
        assert status in (200, 401, 403), referer
    assert raw("GET", f"{A}/pub/o", {"Referer": "http://www.example.com/"})[0] == 200


def test_dot_containers_refused(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    for name in (".", "..", "%2E", "%2e%2E"):
        status, _, _ = raw("PUT", f"{A}/{name}", {"X-Auth-Token": tok})
        assert status == 400, name
    assert raw("PUT", f"{A}/.hidden-ok", {"X-Auth-Token": tok})[0] in (201, 202)


def test_token_with_junk_appended_is_refused(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    assert raw("HEAD", A, {"X-Auth-Token": tok})[0] == 204
    for junk in ("=", "==", "!", "*", "A"):
        assert raw("HEAD", A, {"X-Auth-Token": tok + junk})[0] == 401, junk


def test_client_trans_id_cannot_forge_log_lines(cluster):
    raw = Raw(cluster)
    forged = b"x 200 0 0.0010 -\t2026-01-01 00:00:00,000 proxy-server.access INFO GET /forged"
    status, headers, _ = raw("GET", "/info", {"X-Trans-Id": forged})
    assert status == 200
    assert headers["x-trans-id"].startswith(b"tx") and b" " not in headers["x-trans-id"]
    status, headers, _ = raw("GET", "/info", {"X-Trans-Id": "a" * 400})
    assert len(headers["x-trans-id"]) < 200
    # A harmless one is kept (logs correlate), and X-Trans-Id-Extra is a quoted suffix.
    assert raw("GET", "/info", {"X-Trans-Id": "client-id_1.2"})[1]["x-trans-id"] == \
        b"client-id_1.2"
    tx = raw("GET", "/info", {"X-Trans-Id-Extra": "my job/\u20ac"})[1]["x-trans-id"]
    assert tx.startswith(b"tx") and tx.endswith(b"-my%20job%2F%E2%82%AC")
    wait_for(lambda: "client-id_1.2" in log_text(cluster), 10, what="the access line")
    assert "/forged" not in log_text(cluster)


# ---- 1: hostile 5xx bursts do not take the cluster offline -----------------------------------

def _other_tenant_works(cluster, tag: str) -> None:
    conn = cluster.connection("test2:tester2", "testing2")
    conn.put_container(f"victim-{tag}")
    for i in range(12):  # enough objects to land on every device
        conn.put_object(f"victim-{tag}", f"o{i}", b"precious %d" % i)
    for i in range(12):
        assert conn.get_object(f"victim-{tag}", f"o{i}")[1] == b"precious %d" % i


def _burst(cluster, requests: list[tuple[str, str, dict]]) -> list[int]:
    def run(chunk):
        raw = Raw(cluster)
        out = [raw(m, p, h)[0] for m, p, h in chunk]
        raw.close()
        return out
    chunks = [requests[i::4] for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        return [s for got in pool.map(run, chunks) for s in got]


def _seed(raw, tok: str, container: str, count: int, body: bytes) -> list[str]:
    """A container of `count` objects o0, o1, ... holding `body`; their names."""
    raw("PUT", f"{A}/{container}", {"X-Auth-Token": tok})
    names = [f"o{i}" for i in range(count)]
    for n in names:
        assert raw("PUT", f"{A}/{container}/{n}", {"X-Auth-Token": tok}, body)[0] == 201
    return names


def test_huge_range_is_a_big_number_and_harms_nobody(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    names = _seed(raw, tok, "ranges", 8, b"hello")
    huge = "9" * 5000
    statuses = _burst(cluster, [("GET", f"{A}/ranges/{n}",
                                 {"X-Auth-Token": tok, "Range": f"bytes=0-{huge}"})
                                for n in names for _ in range(6)])
    _other_tenant_works(cluster, "range")
    assert set(statuses) == {206}
    status, headers, body = raw("GET", f"{A}/ranges/o0",
                                {"X-Auth-Token": tok, "Range": f"bytes=0-{huge}"})
    assert (status, headers.get("content-range"), body) == (206, b"bytes 0-4/5", b"hello")
    assert raw("GET", f"{A}/ranges/o0", {"X-Auth-Token": tok,
                                          "Range": f"bytes={huge}-"})[0] == 416


# ---- connection floods ----------------------------------------------------------------------

def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _closed_by_peer(sock: socket.socket) -> bool:
    """The server closed it (whatever answer it sent before is read and dropped)."""
    sock.settimeout(0.05)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_connection_flood_never_error_limits_the_nodes(cluster):
    """A client holding every descriptor of a proxy (here a proxy limited to 160 and no
    max_clients) makes its backend connects fail: that is this process's fault, never the
    nodes'. Once the flood ends, the next write is stored at once (before: every object
    server was error-limited for a minute, for every tenant)."""
    tok = token(cluster)
    _seed(Raw(cluster), tok, "flood", 1, b"still here")
    proxy = start_proxy_variant(cluster, "starved", {"max_clients": "0",
                                                     "backend_connections_per_host": "0"},
                                nofile=160)
    url = f"http://127.0.0.1:{proxy.port}"
    raw = Raw(cluster, url)  # one keep-alive connection, made before the flood
    flood: list[socket.socket] = []
    refused = []

    def starved_reads() -> bool:
        """Top the flood up to every descriptor, then read: True once a dozen reads found
        no replica (more than error_suppression_limit faults per server)."""
        for _ in range(50):  # (bounded: the wait's deadline must hold)
            if _open_fds(proxy.proc.pid) >= 160:
                break
            flood.append(socket.create_connection(("127.0.0.1", proxy.port)))
        status = raw("GET", f"{A}/flood/o0", {"X-Auth-Token": tok})[0]
        assert status in (200, 503), status
        refused.extend([status] if status == 503 else [])
        return len(refused) >= 12

    try:
        try:
            assert raw("GET", f"{A}/flood/o0", {"X-Auth-Token": tok})[0] == 200
            wait_for(starved_reads, 60, what="reads failing for want of descriptors")
        finally:
            for s in flood:
                s.close()
        wait_for(lambda: _open_fds(proxy.proc.pid) < 100, 30, what="the flood's sockets closed")
        # A write skips error-limited nodes (a read would still try one as a last resort).
        assert raw("PUT", f"{A}/flood/after", {"X-Auth-Token": tok}, b"new")[0] == 201
        status, _, body = raw("GET", f"{A}/flood/o0", {"X-Auth-Token": tok})
        assert (status, body) == (200, b"still here")
        assert "error limited" not in proxy.log_text()
        assert "not counted against it" in proxy.log_text()
    finally:
        raw.close()
        proxy.stop()


def test_max_clients_sheds_idle_connections_first_then_refuses(cluster):
    tok = token(cluster)
    _seed(Raw(cluster), tok, "capped", 1, b"x")
    proxy = start_proxy_variant(cluster, "capped", {"max_clients": "4"})
    addr = ("127.0.0.1", proxy.port)
    url = f"http://127.0.0.1:{proxy.port}"
    socks: list[socket.socket] = []
    try:
        # Four uploads in progress: each waits for its body once the proxy said continue.
        for i in range(4):
            s = socket.create_connection(addr, timeout=10)
            s.sendall(f"PUT {A}/capped/up{i} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {tok}\r\n"
                      "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n".encode())
            assert s.recv(100).startswith(b"HTTP/1.1 100"), i
            socks.append(s)
        # Every connection is busy: a newcomer is told so, and nothing else is cut.
        status, headers, body = Raw(cluster, url)("GET", f"{A}/capped/o0",
                                                  {"X-Auth-Token": tok})
        assert status == 503 and b"Too many connections" in body
        for i, s in enumerate(socks):
            s.sendall(b"hello")
            assert s.recv(100).startswith(b"HTTP/1.1 201"), i
        # Now they are idle keep-alives: the oldest gives way to each newcomer.
        assert Raw(cluster, url)("GET", f"{A}/capped/o0", {"X-Auth-Token": tok})[0] == 200
        wait_for(lambda: _closed_by_peer(socks[0]), 10, what="the oldest idle one closed")
        assert not any(_closed_by_peer(s) for s in socks[2:])
        # A client that holds connections open without a request loses them the same way.
        idle = []
        for _ in range(4):
            s = socket.create_connection(addr, timeout=10)
            s.sendall(b"GET /v1/AUTH_test HTTP/1.1\r\n")  # and never the rest
            idle.append(s)
        for _ in range(3):
            assert Raw(cluster, url)("GET", f"{A}/capped/o0", {"X-Auth-Token": tok})[0] == 200
        socks += idle
        wait_for(lambda: _closed_by_peer(idle[0]), 10, what="a head-trickler shed")
        assert "max_clients (4) reached" in proxy.log_text()
    finally:
        for s in socks:
            s.close()
        proxy.stop()


def test_no_traceback_before_the_faults(cluster):
    """Every request so far was a client's doing (hostile headers, ranges, referers, tokens,
    connection floods): none left a traceback in any log. (Checked here, in file order:
    the tests below make an object server fail and die on purpose.)"""
    found = log_tracebacks(cluster.root)
    assert not found, "\n\n".join(found[:10])


FAILING_OBJECT_SERVER = """
import sys
from aiohttp import web
from swiftlite.common.config import load_config
from swiftlite.common.runtime.server import serve
from swiftlite.obj import server as objserver

async def factory(conf):
    app = await objserver.create_app(conf)

    @web.middleware
    async def explode(request, handler):
        if "explode" in request.headers.get("If-None-Match", ""):
            raise RuntimeError("this object server is built to fail this request")
        return await handler(request)

    app.middlewares.insert(1, explode)  # inside base_middleware: logged, answered 500
    return app

serve(factory, load_config(sys.argv[1], "object-server"), "object-server", "1")
"""


def _swap_object_server(cluster, script: str | None) -> None:
    """Replace node 1's object server by `script` (None: the real one) on its port."""
    srv = cluster.nodes[0]["servers"]["object"]
    conf = srv["cmd"][srv["cmd"].index("-c") + 1]
    os.killpg(srv["pid"], 9)
    wait_for(lambda: not healthy(srv["port"]), 10, what="object server to stop")
    cmd = [sys.executable, "-c", script, conf] if script else srv["cmd"]
    with open(os.path.join(cluster.root, "logs", "failing-object.log"), "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=os.getcwd())
    cluster.extra.append(proc)
    srv["pid"] = proc.pid
    wait_for(lambda: healthy(srv["port"]), 30, what="replacement object server")


def test_requests_every_replica_fails_do_not_error_limit_nodes(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    names = _seed(raw, tok, "hostile", 10, b"x")
    _swap_object_server(cluster, FAILING_OBJECT_SERVER)
    assert raw("GET", f"{A}/hostile/o0", {"X-Auth-Token": tok})[0] == 200
    statuses = _burst(cluster, [("GET", f"{A}/hostile/{n}",
                                 {"X-Auth-Token": tok, "If-None-Match": "explode"})
                                for n in names for _ in range(6)])
    _other_tenant_works(cluster, "explode")
    assert set(statuses) == {503}  # every replica failed: not a 404
    assert raw("GET", f"{A}/hostile/o1", {"X-Auth-Token": tok})[0] == 200


def test_object_get_with_no_replica_reachable_is_503(cluster):
    tok = token(cluster)
    raw = Raw(cluster)
    raw("PUT", f"{A}/down", {"X-Auth-Token": tok})
    assert raw("PUT", f"{A}/down/o", {"X-Auth-Token": tok}, b"x")[0] == 201
    srv = cluster.nodes[0]["servers"]["object"]
    os.killpg(srv["pid"], 9)
    wait_for(lambda: not healthy(srv["port"]), 10, what="object server to stop")
    for method in ("GET", "HEAD"):
        assert raw(method, f"{A}/down/o", {"X-Auth-Token": tok})[0] == 503
