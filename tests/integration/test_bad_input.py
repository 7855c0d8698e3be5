"""Bad input never leaves a traceback (a real cluster on loopback).

A client's mistake is one access-log line with its 4xx: malformed names, framing, sizes,
metadata, ranges, conditionals, queries and feature headers, sent through the proxy and to
the storage servers directly, each answered in bounded time with a 4xx (or the 2xx/3xx Swift
gives), never a 5xx. Then the exhaustion part: many and huge headers, long URLs, heads and
bodies cut off mid-way. The module's last test reads every server log: no line may say
"Traceback" (a traceback is our bug, whatever the client sent).

Tests run in file order on one cluster.
"""

from __future__ import annotations

import io
import socket
import tarfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
import swiftclient

from tests.backend_signing import raw_signature
from tests.cluster import Cluster, start_cluster
from tests.helpers import log_tracebacks, start_proxy_variant, wait_for

A = "/v1/AUTH_test"
BODY = b"0123456789"
# Every answer must come within this many seconds (a server that hangs on bad input fails).
BOUND = 10.0
C4 = range(400, 500)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    c = start_cluster(str(tmp_path_factory.mktemp("bad-input")), nodes=1, devices=4,
                      replicas=3, part_power=6)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def tok(cluster) -> str:
    return swiftclient.get_auth(cluster.auth_url, cluster.user, cluster.key)[1]


def _read_answer(sock: socket.socket, method: str) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer from `sock`; (0, {}, b"") when the server closed without one."""
    f = sock.makefile("rb")
    status_line = f.readline()
    if not status_line:
        return 0, {}, b""
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        k, _, v = line.partition(b":")
        headers[k.decode("latin-1").strip().lower()] = v.strip().decode("latin-1")
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while (size := int(f.readline().strip() or b"0", 16)):
            body += f.read(size)
            f.readline()
        f.readline()
    else:
        body = f.read()
    return status, headers, body


def exchange(addr: tuple[str, int], data: bytes, method: str = "GET",
             half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    """`data` as sent on a fresh connection, and the one answer read back (or 0 for none).
    `half_close`: then shut our side, as a client that gave up on its body would."""
    with socket.create_connection(addr, timeout=BOUND) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        try:
            return _read_answer(sock, method)
        except ConnectionResetError:
            return 0, {}, b""


def request_bytes(method: str, path: str | bytes, headers: dict | None = None,
                  body: bytes = b"") -> bytes:
    """A request with exactly these bytes in its path and header values (and a length)."""
    target = path if isinstance(path, bytes) else path.encode()
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: t",
             b"Content-Length: %d" % len(body)]
    for k, v in (headers or {}).items():
        lines.append(k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class Battery:
    """Requests sent and judged, on one keep-alive connection (or a fresh one each): every
    status not allowed (4xx unless said otherwise), every answer missing or slower than
    BOUND, is collected and reported together by `done()` (the `proxy` fixture calls it
    at teardown), not one failure at a time."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.addr = addr
        self.sock: socket.socket | None = None
        self.bad: list[str] = []
        self.count = 0

    def __call__(self, method: str, path: str | bytes, headers: dict | None = None,
                 body: bytes = b"", allowed=C4, fresh: bool = False, label: object = "") -> int:
        data = request_bytes(method, path, headers, body)
        shown = {k: v if "token" not in k.lower() or len(v) < 16 else v[:12] + "..."
                 for k, v in (headers or {}).items()}
        return self.send(data, method, allowed,
                         label=f"{method} {path!r} {shown or ''} {label or ''}",
                         fresh=fresh)

    def send(self, data: bytes, method: str = "GET", allowed=C4, label: str = "",
             fresh: bool = True, half_close: bool = False) -> int:
        self.count += 1
        start = time.monotonic()
        try:
            if fresh or half_close:
                status, _, body = exchange(self.addr, data, method, half_close)
            else:
                status, _, body = self._keepalive(data, method)
        except OSError as exc:  # a timeout included: no answer in BOUND seconds
            status, body = -1, repr(exc).encode()
        took = time.monotonic() - start
        label = label or repr(data[:120])
        if status not in allowed:
            self.bad.append(f"{label[:300]} -> {status} {body[:160]!r}")
        elif took > BOUND:
            self.bad.append(f"{label[:300]} took {took:.1f}s")
        return status

    def _keepalive(self, data: bytes, method: str) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            if self.sock is None:
                self.sock = socket.create_connection(self.addr, timeout=BOUND)
            try:
                self.sock.sendall(data)
                status, headers, body = _read_answer(self.sock, method)
                if status == 0:
                    raise ConnectionResetError("closed before an answer")
                if headers.get("connection", "").lower() == "close":
                    self.close()
                return status, headers, body
            except (ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def done(self) -> None:
        self.close()
        assert not self.bad, f"{len(self.bad)} of {self.count} answers wrong:\n" + \
            "\n".join(self.bad[:60])


SENT: list[int] = []  # requests sent by the whole module (reported by the log check)


@pytest.fixture
def proxy(cluster):
    u = urllib.parse.urlsplit(cluster.proxy_url)
    b = Battery((u.hostname, u.port))
    yield b
    SENT.append(b.count)
    b.done()


@pytest.fixture(scope="module")
def seeded(cluster, tok) -> str:
    """Container `bi` holding `o` (BODY) and `seg1` (an SLO segment); an account
    temp-url key. The token."""
    u = urllib.parse.urlsplit(cluster.proxy_url)
    b = Battery((u.hostname, u.port))
    auth = {"X-Auth-Token": tok}
    b("PUT", f"{A}/bi", auth, allowed=(201, 202))
    b("PUT", f"{A}/bi/o", auth, BODY, allowed=(201,))
    b("PUT", f"{A}/bi/seg1", auth, b"abc", allowed=(201,))
    b("POST", A, {**auth, "X-Account-Meta-Temp-URL-Key": "k"}, allowed=(204,))
    b.done()
    return tok


def backend_addr(cluster, role: str) -> tuple[str, int]:
    node = cluster.nodes[0]
    return node["ip"], node["servers"][role]["port"]


# ---- names ---------------------------------------------------------------------------------

LONG = "x" * 1100
BAD_SEGMENTS = ["%ff", "%c3%28", "%ed%a0%80", "%f4%90%80%80", "%c0%af", "%00", "a%00b"]


def test_bad_names(proxy, seeded):
    auth = {"X-Auth-Token": seeded}
    paths = [
        f"{A}/bi/..", f"{A}/bi/.", f"{A}/bi/a/../b", f"{A}/bi/a/./b", f"{A}/bi/%2e%2e",
        f"{A}/..", f"{A}/.", f"{A}/%2E", "/v1/..", "/v1/.", "/v1/../AUTH_test/bi",
        f"{A}/{'c' * 257}", f"{A}/bi/{LONG}", f"/v1/AUTH_{'a' * 300}",
        f"/v1/AUTH_{'a' * 300}/bi", f"{A}/{'c' * 300}/o",
        f"{A}/bi/{'%ff' * 10}", f"{A}/%ff/o", "/v1/AUTH_%ff", "/v1/%ff",
    ] + [f"{A}/bi/{s}" for s in BAD_SEGMENTS] + [f"{A}/{s}" for s in BAD_SEGMENTS] + \
        [f"/v1/{s}" for s in BAD_SEGMENTS]
    for method in ("PUT", "GET", "HEAD", "POST", "DELETE", "COPY"):
        for path in paths:
            headers = dict(auth)
            if method == "COPY":
                headers["Destination"] = "bi/copied"
            proxy(method, path, headers, b"x" if method == "PUT" else b"")
    # Control characters (percent-encoded: raw ones break the request line) are names
    # Swift takes; never a 5xx, and what is stored reads back.
    for ch in ("%01", "%0a", "%0d", "%7f", "%1b", "%09"):
        proxy("PUT", f"{A}/bi/ctl{ch}x", auth, b"x", allowed=(201,))
        proxy("GET", f"{A}/bi/ctl{ch}x", auth, allowed=(200,))
        proxy("PUT", f"{A}/ctl{ch}c", auth, allowed=(201, 202))
        proxy("DELETE", f"{A}/ctl{ch}c", auth, allowed=(204,))
    # Raw bytes that are not UTF-8 in the request line itself.
    for raw in (b"/bi/\xff", b"/bi/\xc3\x28", b"/\xff/o", b"/bi/\xed\xa0\x80"):
        proxy("GET", A.encode() + raw, auth)
        proxy("PUT", A.encode() + raw, auth, b"x")
    # Empty segments: a leading slash in an object name is a name Swift takes.
    proxy("PUT", f"{A}/bi//o", auth, b"x", allowed=(201,))
    for path in ("/v1//bi/o", f"{A}//o", "//v1/AUTH_test", "/v1", "/v1/", "/v2/AUTH_test",
                 "/", "/v1//", "/v1.0/AUTH_test/bi//", "/auth/v1.0/x", "/info/x", "*",
                 "http://t/v1/AUTH_test", f"{A}/bi/o/..;/x", "/%ff"):
        for method in ("GET", "PUT", "DELETE", "HEAD"):
            proxy(method, path, auth, allowed=range(200, 500))
    # Methods Swift does not have.
    for method in ("FOO", "PATCH", "TRACE", "PROPFIND", "X" * 100):
        proxy(method, f"{A}/bi/o", auth)


# ---- framing -------------------------------------------------------------------------------

def _head(method: str, path: str, tok: str, *lines: str) -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {tok}\r\n"
            + "".join(line + "\r\n" for line in lines) + "\r\n").encode()


def test_framing(proxy, seeded):
    t = seeded
    o = f"{A}/bi/framed"
    cases = [
        _head("PUT", o, t, "Content-Length: 5", "Transfer-Encoding: chunked") + b"hello",
        _head("PUT", o, t, "Transfer-Encoding: chunked", "Content-Length: 5") + b"hello",
        _head("PUT", o, t, "Content-Length: -1"),
        _head("PUT", o, t, "Content-Length: abc"),
        _head("PUT", o, t, "Content-Length: 1e3"),
        _head("PUT", o, t, "Content-Length: +5") + b"hello",
        _head("PUT", o, t, "Content-Length: 0x5") + b"hello",
        _head("PUT", o, t, "Content-Length: 5, 5") + b"hello",
        _head("PUT", o, t, "Content-Length: 5", "Content-Length: 6") + b"hello!",
        _head("PUT", o, t, "Content-Length: " + "9" * 40),
        _head("PUT", o, t, "Content-Length: 18446744073709551616"),
        _head("PUT", o, t, "Content-Length:"),
        _head("PUT", o, t, "Transfer-Encoding: gzip") + b"hello",
        _head("PUT", o, t, "Transfer-Encoding: chunked, gzip") + b"5\r\nhello\r\n0\r\n\r\n",
        _head("PUT", o, t, "Transfer-Encoding: identity") + b"hello",
        _head("PUT", o, t),  # neither: Swift's 411
        _head("PUT", o, t, "Expect: 100-continue-please", "Content-Length: 5") + b"hello",
        _head("GET", f"{A}/bi/o", t, "Host: other"),
        b"GET /info HTTP/1.1\r\n\r\n",  # no Host
        b"GET /info HTTP/2.0\r\nHost: t\r\n\r\n",
        b"GET /info HTTP/1.9\r\nHost: t\r\n\r\n",
        b"GET /info HTTP/0.9\r\n\r\n",
        b"GET /info\r\n\r\n",
        b"GET\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(64)),  # a TLS hello
        b"GET /info HTTP/1.1\r\nHost: t\r\nX-Bad Name: v\r\n\r\n",
        b"GET /info HTTP/1.1\r\nHost: t\r\n: empty-name\r\n\r\n",
        b"GET /info HTTP/1.1\r\nHost: t\r\nNoColon\r\n\r\n",
        b"GET /info HTTP/1.1\r\nHost: t\r\n folded: v\r\n\r\n",
        b"GET /info HTTP/1.1\r\nHost: t\r\nX-A: v\x00w\r\n\r\n",
        b"GET /info HTTP/1.1\nHost: t\n\n",
        b"GET  /info  HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET /info?\x00 HTTP/1.1\r\nHost: t\r\n\r\n",
    ]
    for data in cases:
        # 2xx where the request is fine once read leniently (a bare LF, a Host of its own)
        proxy.send(data, data.split(b" ", 1)[0].decode("latin-1"), allowed=range(200, 500))
    # Empty lines before a request are allowed: the server waits for one, until we close.
    proxy.send(b"\r\n\r\n", allowed=(0, *C4), half_close=True)
    # A body shorter than its Content-Length, then the client closes: nothing stored, and
    # the next request is answered.
    for method, path in (("PUT", o), ("PUT", f"{A}/bi/framed?multipart-manifest=put"),
                         ("POST", f"{A}/bi/framed"), ("PUT", f"{A}/framed-c"),
                         ("POST", A)):
        proxy.send(_head(method, path, t, "Content-Length: 100") + b"short", method,
                   allowed=(0, *C4), half_close=True)
    proxy("HEAD", o, {"X-Auth-Token": t}, allowed=(404,))
    # A body longer than its Content-Length: the request is answered and stores what it
    # declared (the rest would be the next request's start).
    with socket.create_connection(proxy.addr, timeout=BOUND) as sock:
        sock.sendall(_head("PUT", o, t, "Content-Length: 5") + b"hello and more")
        f = sock.makefile("rb")
        first = f.readline()
        assert first.startswith(b"HTTP/1.1 201"), first
    status, _, body = exchange(proxy.addr, _head("GET", o, t))
    assert (status, body) == (200, b"hello")
    # An object too big for max_file_size is refused from its Content-Length alone.
    too_big = _head("PUT", f"{A}/bi/huge", t, f"Content-Length: {5 * 1024 ** 3 + 3}")
    proxy.send(too_big, "PUT", allowed=(413,))


# ---- sizes and metadata --------------------------------------------------------------------

def _meta_cases(prefix: str) -> list[dict[str, str]]:
    return [
        {f"{prefix}{i}": "v" for i in range(91)},
        {f"{prefix}{'n' * 129}": "v"},
        {f"{prefix}n": "v" * 257},
        {f"{prefix}{i}": "v" * 250 for i in range(20)},
        {prefix: "empty name"},
        {f"{prefix}n": "v" * 8000},
    ]


def test_metadata_and_sizes(proxy, seeded):
    auth = {"X-Auth-Token": seeded}
    targets = [("object", f"{A}/bi/meta", ("PUT", "POST")),
               ("container", f"{A}/bi-meta", ("PUT", "POST")),
               ("account", A, ("POST",))]
    proxy("PUT", f"{A}/bi/meta", auth, b"x", allowed=(201,))
    proxy("PUT", f"{A}/bi-meta", auth, allowed=(201, 202))
    for kind, path, methods in targets:
        for meta in _meta_cases(f"X-{kind.title()}-Meta-"):
            for method in methods:
                proxy(method, path, {**auth, **meta}, b"x" if kind == "object" else b"")
    # Odd but valid header names: stored or refused, never a 5xx.
    for kind, path, methods in targets:
        prefix = f"X-{kind.title()}-Meta-"
        for name in ("a.b_c~", "-", "--x--", "%ff", "a" * 128, "_", "!#$%&'*+^`|"):
            for method in methods:
                proxy(method, path, {**auth, prefix + name: "v"},
                      b"x" if kind == "object" else b"", allowed=range(200, 500))
    # Sysmeta and backend headers from a client are not the client's to set: dropped.
    proxy("PUT", f"{A}/bi/meta", {**auth, "X-Object-Sysmeta-A": "x",
                                  "X-Backend-Storage-Policy-Index": "7",
                                  "X-Timestamp": "garbage"}, b"x", allowed=(201,))
    o = f"{A}/bi/meta"
    # A time far in the future is a number like any other (Swift clamps it): 2xx or 400.
    for value in ("abc", "-1", "1", "1.5", "1e10", "9" * 40, "", " ", "0x10", "nan", "inf"):
        allowed = (201, 202, 400) if value == "9" * 40 else C4
        proxy("PUT", o, {**auth, "X-Delete-At": value}, b"x", allowed=allowed)
        proxy("POST", o, {**auth, "X-Delete-At": value}, allowed=allowed)
        proxy("PUT", f"{A}/bi/copyto", {**auth, "X-Delete-At": value, "X-Copy-From": "bi/o"},
              allowed=allowed)
    for value in ("-1", "abc", "1.5", "9" * 40, "", "1e3", "nan"):
        allowed = (201, 202, 400) if value == "9" * 40 else C4
        proxy("PUT", o, {**auth, "X-Delete-After": value}, b"x", allowed=allowed)
        proxy("POST", o, {**auth, "X-Delete-After": value}, allowed=allowed)
    for value in ("abc", "-1", "9" * 40):
        proxy("DELETE", f"{A}/bi/none", {**auth, "X-If-Delete-At": value})
    # Odd but valid: a client ETag that is not the body's MD5 is a 422, a bogus one too.
    for etag in ("nothex", "0" * 32, "x" * 300):
        proxy("PUT", o, {**auth, "ETag": etag}, b"x")
    # Content-Type and friends: odd values are stored as given, never a 5xx.
    for ctype in ("", "a" * 1000, "text/plain;;;", "text/plain; charset", "/", ";"):
        proxy("PUT", o, {**auth, "Content-Type": ctype}, b"x", allowed=(201, 400))
    proxy("POST", o, {**auth, "Content-Type": ""}, allowed=(202, 400))
    # Quotas: not numbers.
    for value in ("abc", "-1", "1.5", "9" * 40):
        proxy("POST", f"{A}/bi-meta", {**auth, "X-Container-Meta-Quota-Bytes": value},
              allowed=(204, 400))
        proxy("POST", f"{A}/bi-meta", {**auth, "X-Container-Meta-Quota-Count": value},
              allowed=(204, 400))
        proxy("POST", A, {**auth, "X-Account-Meta-Quota-Bytes": value}, allowed=(204, 400, 403))
    proxy("POST", f"{A}/bi-meta", {**auth, "X-Container-Meta-Quota-Bytes": ""},
          allowed=(204,))


# ---- ranges and conditionals ---------------------------------------------------------------

RANGES = ["bytes=5-2", "bytes=-0", "bytes=abc", "bytes=0-0,", "bytes=100-200", "bytes=-",
          "bytes=--1", "bytes=1-2-3", "items=0-1", "bytes=", "bytes= 0-1", ",,,",
          "bytes=-" + "9" * 40, "bytes=" + "9" * 40 + "-", "bytes=0-1," * 200,
          "bytes=" + ",".join(f"{i}-{i}" for i in range(101)), "bytes=0x1-2",
          "bytes=1.5-2", "bytes=\t0-1", "bytes=0-1;q=1", "bytes=-1-", "bytes=10-"]
DATES = ["garbage", "Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
         "Sat, 01 Jan 10000 00:00:00 GMT", "Mon, 01 Jan 0000 00:00:00 GMT",
         "Sun, 06 Nov 2994 08:49:37 GMT", "1", "-1", "9" * 40, "Sunday, 99-Nov-99 99:99:99 GMT",
         "Sun Nov  6 08:49:37 1994", "Thu, 32 Jan 2020 00:00:00 GMT", ""]


def test_ranges_and_conditionals(proxy, seeded):
    auth = {"X-Auth-Token": seeded}
    o = f"{A}/bi/o"
    for rng in RANGES:
        for method in ("GET", "HEAD"):
            proxy(method, o, {**auth, "Range": rng}, allowed=(200, 206, 416))
        proxy("GET", f"{A}/bi", {**auth, "Range": rng}, allowed=(200, 204, 206, 416))
    # A copy whose source read is refused answers with that refusal, in full (it hung).
    for rng in ("bytes=5-2", "bytes=-0", "bytes=100-200", "bytes=10-", "bytes=abc"):
        proxy("PUT", f"{A}/bi/rng", {**auth, "Range": rng, "X-Copy-From": "bi/o"},
              allowed=(201, 416))
    for header in ("If-Match", "If-None-Match"):
        for value in ("garbage", '"', '""', "*, x", "W/", '"x", ,', "x" * 2000):
            for method in ("GET", "HEAD"):
                proxy(method, o, {**auth, header: value}, allowed=(200, 304, 412))
            proxy("PUT", f"{A}/bi/cond", {**auth, header: value}, b"x",
                  allowed=(201, 400, 412))
        proxy("PUT", f"{A}/bi/cond", {**auth, header: "garbage", "X-Copy-From": "bi/o"},
              allowed=(201, 304, 412))
    for header in ("If-Modified-Since", "If-Unmodified-Since"):
        for value in DATES:
            for method in ("GET", "HEAD"):
                proxy(method, o, {**auth, header: value}, allowed=(200, 304, 412))
            proxy("GET", f"{A}/bi", {**auth, header: value}, allowed=(200, 204, 304, 412))
        for value in DATES[:4]:
            proxy("COPY", o, {**auth, header: value, "Destination": "bi/cond"},
                  allowed=(201, 304, 412))


# ---- queries -------------------------------------------------------------------------------

def test_bad_queries(proxy, seeded):
    auth = {"X-Auth-Token": seeded}
    listing = ["format=bogus", "limit=-1", "limit=abc", "limit=99999999999999999999",
               "limit=1e3", "limit=", "marker=%ff", "end_marker=%ff", "prefix=%ff",
               "delimiter=%ff", "delimiter=ab", "marker=%00", "prefix=" + "p" * 2000,
               "reverse=junk", "%ff=1", "a=%zz", "&&&", "format=json&format=xml",
               "path=%ff", "marker=" + "m" * 9000, "includes=%ff", "states=bogus"]
    for q in listing:
        for path in (A, f"{A}/bi"):
            proxy("GET", f"{path}?{q}", auth, allowed=range(200, 500))
    proxy("PUT", f"{A}/bi/q", auth, b"x", allowed=(201,))  # (a DELETE below may remove it)
    o = f"{A}/bi/slo"
    proxy("PUT", f"{o}?multipart-manifest=put", auth, b"[]", allowed=(201, 400))
    for body in (b"not json", b"{}", b"[{}]", b'[{"path": 5}]', b"[1, 2]",
                 b'[{"path": "/bi/seg1", "size_bytes": "x"}]',
                 b'[{"path": "/bi/seg1", "etag": 5}]',
                 b'[{"path": "/bi/seg1", "range": "abc"}]',
                 b'[{"path": "/%ff/x"}]', b'[{"path": "nolead"}]', b'[{"path": "/bi"}]',
                 b'[{"path": "/bi/slo"}]', b'[{"data": "%%%"}]', b'[{"data": 5}]',
                 b"[" * 5000 + b"]" * 5000, b"\xff\xfe", b'"string"', b"null",
                 b'[{"path": "/bi/seg1", "size_bytes": -1}]'):
        proxy("PUT", f"{o}?multipart-manifest=put", auth, body, label=body[:60])
    for q in ("multipart-manifest=bogus", "multipart-manifest=get&format=bogus",
              "multipart-manifest=delete", "symlink=bogus", "version-id=garbage",
              "version-id=%ff", "versions", "heartbeat=on&multipart-manifest=put"):
        for method in ("GET", "HEAD", "DELETE", "PUT"):
            proxy(method, f"{A}/bi/q?{q}", auth, b"x" if method == "PUT" else b"",
                  allowed=range(200, 500))
    # TempURLs with garbage: no token, so 401 (never a 5xx).
    for q in ("temp_url_sig=garbage&temp_url_expires=abc",
              "temp_url_sig=garbage&temp_url_expires=-1",
              "temp_url_sig=garbage&temp_url_expires=" + "9" * 40,
              "temp_url_sig=sha1:%ff&temp_url_expires=9999999999",
              "temp_url_sig=sha512:!!!&temp_url_expires=9999999999",
              "temp_url_sig=&temp_url_expires=",
              "temp_url_sig=x&temp_url_expires=9999999999&temp_url_prefix=%ff",
              "temp_url_sig=x&temp_url_expires=9999999999&temp_url_ip_range=garbage",
              "temp_url_sig=x&temp_url_expires=2020-01-01T00:00:00Z",
              "temp_url_sig=x&temp_url_expires=9999-99-99T99:99:99Z",
              "temp_url_sig=x&temp_url_sig=y&temp_url_expires=1"):
        for method in ("GET", "PUT", "HEAD"):
            proxy(method, f"{A}/bi/o?{q}", {}, b"x" if method == "PUT" else b"")
    # Bulk: a garbage body for bulk-delete and extract-archive.
    for q, body in (("bulk-delete", b"\xff\xfe/%ff\n" * 3),
                    ("bulk-delete", b"/" + b"x" * 9000),
                    ("extract-archive=tar", b"not a tar" * 100),
                    ("extract-archive=tar.gz", b"not gzip" * 100),
                    ("extract-archive=bogus", b"x")):
        method = "DELETE" if q == "bulk-delete" else "PUT"
        proxy(method, f"{A}?{q}", {**auth, "Accept": "application/json"}, body,
              allowed=range(200, 500))
        proxy("POST" if q == "bulk-delete" else "PUT", f"{A}/bi?{q}", auth, body,
              allowed=range(200, 500))


# ---- feature headers -----------------------------------------------------------------------

def test_bad_feature_headers(proxy, seeded):
    auth = {"X-Auth-Token": seeded}
    dests = ["", "/", "noslash", "bi", "/bi", "/bi/", "//o", "bi/..", "bi/%ff", "%ff/x",
             "bi/%00", f"bi/{LONG}", "bi/a/../b", "/v1/AUTH_test/bi/x"]
    for dest in dests:
        proxy("COPY", f"{A}/bi/o", {**auth, "Destination": dest})
        proxy("PUT", f"{A}/bi/cp", {**auth, "X-Copy-From": dest}, b"")
    for acct in ("", "%ff", "..", "AUTH_" + "a" * 300, "a/b"):
        proxy("COPY", f"{A}/bi/o", {**auth, "Destination": "bi/x",
                                    "Destination-Account": acct})
        proxy("PUT", f"{A}/bi/cp", {**auth, "X-Copy-From": "bi/o",
                                    "X-Copy-From-Account": acct}, b"")
    proxy("COPY", f"{A}/bi/o", auth)  # no Destination at all
    proxy("COPY", f"{A}/bi/missing", {**auth, "Destination": "bi/x"}, allowed=(404,))
    proxy("COPY", f"{A}/bi", {**auth, "Destination": "bi/x"}, allowed=range(400, 500))
    for manifest in ("", "noslash", "/", "bi/%ff", "%00/x", "../x", "bi", "/bi/",
                     "%ff", "a" * 2000 + "/x"):
        proxy("PUT", f"{A}/bi/dlo", {**auth, "X-Object-Manifest": manifest}, b"",
              allowed=(201, 400))
        proxy("GET", f"{A}/bi/dlo", auth, allowed=(200, 400, 404, 409, 412))
    # A leading slash is allowed, and an account's name needs none.
    for target in ("", "noslash", "/", "%ff/x", "bi/%00", "bi/..", "/bi/o", "bi/" + LONG):
        proxy("PUT", f"{A}/bi/sym", {**auth, "X-Symlink-Target": target}, b"",
              allowed=(201, *C4) if target == "/bi/o" else C4)
        proxy("GET", f"{A}/bi/sym", auth, allowed=range(200, 500))
        proxy("PUT", f"{A}/bi/sym", {**auth, "X-Symlink-Target": "bi/o",
                                     "X-Symlink-Target-Account": target}, b"",
              allowed=(201, *C4) if target == "noslash" else C4)
        proxy("GET", f"{A}/bi/sym", auth, allowed=range(200, 500))
    proxy("PUT", f"{A}/bi/sym", {**auth, "X-Symlink-Target": "bi/o",
                                 "X-Symlink-Target-Etag": "bogus"}, b"")
    c = f"{A}/bi-acl"
    proxy("PUT", c, auth, allowed=(201, 202))
    for acl in (".r:", ".r:*.", ".r:-", "a:b:c", ".rlistings,,", ".r:*,.r:-*", "a" * 5000,
                ",", ".r:-.", ".bogus", "*:*", ".r:*,.r:.,.r:-."):
        for header in ("X-Container-Read", "X-Container-Write"):
            proxy("POST", c, {**auth, header: acl}, allowed=(204, 400))
            proxy("PUT", c, {**auth, header: acl}, allowed=(202, 400))
    for value in ("not json", "[1]", '{"admin": "x"}', '{"bogus": []}', '{"admin": [1]}',
                  "{" * 3000, "[" * 3000 + "]" * 3000, '"str"', "null",
                  '{"read-only": [null]}', '{"admin": [' * 1000 + "]}" * 1000):
        proxy("POST", A, {**auth, "X-Account-Access-Control": value}, allowed=(204, 400))
    for header in ("X-Versions-Location", "X-History-Location"):
        for value in ("", "%ff", "a/b", "v" * 300, "%00", ".", ".."):
            proxy("POST", c, {**auth, header: value}, allowed=(204, 400, 412))
            proxy("PUT", f"{A}/bi-ver", {**auth, header: value}, allowed=(201, 202, 400, 412))
    proxy("POST", c, {**auth, "X-Versions-Location": "v1", "X-History-Location": "v2"})
    for value in ("maybe", "", "1", "tru"):
        proxy("POST", c, {**auth, "X-Versions-Enabled": value}, allowed=(204, 400))
    proxy("POST", c, {**auth, "X-Versions-Mode": "bogus"}, allowed=(204, 400))
    for value in ("garbage", "//realm", "http://[::1", "%ff"):
        proxy("POST", c, {**auth, "X-Container-Sync-To": value}, allowed=(204, 400))
    for value in ("bogus", "", "%ff", "a" * 300):
        proxy("PUT", f"{A}/bi-pol-{len(value)}", {**auth, "X-Storage-Policy": value},
              allowed=(201, *C4) if value == "" else C4)  # "": the default policy
        proxy("POST", c, {**auth, "X-Storage-Policy": value}, allowed=(204, 400, 409))
    # Formpost, staticweb and CORS with garbage.
    for ctype in ("multipart/form-data", "multipart/form-data; boundary=",
                  "multipart/form-data; boundary=x", "text/plain"):
        proxy("POST", f"{A}/bi", {"Content-Type": ctype}, b"--x\r\ngarbage\r\n--x--\r\n",
              allowed=range(400, 500))
    proxy("GET", f"{A}/bi/", {"X-Web-Mode": "true"}, allowed=range(200, 500))
    for acrm in ("", "GARBAGE", "G ET", "%ff"):
        proxy("OPTIONS", f"{A}/bi/o", {"Origin": "http://x", "Access-Control-Request-Method":
                                       acrm}, allowed=range(200, 500))
    proxy("OPTIONS", f"{A}/bi/o", {}, allowed=range(200, 500))
    for accept in ("application/json;q=abc", "*/*;q=2", "text/*;q=-1", ",,,", ";", "a" * 5000):
        proxy("GET", f"{A}/bi", {**auth, "Accept": accept}, allowed=range(200, 500))


def _tar(names: list[str], gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w",
                      format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            if name.endswith("-link"):
                info.type, info.linkname, info.size = tarfile.SYMTYPE, "../../etc/passwd", 0
            if name.endswith("-meta"):
                info.pax_headers = {"SCHILY.xattr.user.meta." + "m" * 200: "v" * 300,
                                    "SCHILY.xattr.user.mime_type": "\udcff"}
            tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def test_hostile_archives_links_and_versions(proxy, seeded):
    auth = {"X-Auth-Token": seeded}
    names = ["bi/../x", "/abs/x", "bi/" + "o" * 1100, "c" * 300 + "/x", "bi/\udcff",
             "bi/a\x00b", "bi/ok", "bi/x-link", "bi/x-meta", "toplevel", "bi/./x", "./bi/y",
             "bi/" + "d/" * 600 + "deep"]
    for gz in (False, True):
        for path in (A, f"{A}/bi", f"{A}/bi/pre"):
            q = "extract-archive=tar.gz" if gz else "extract-archive=tar"
            proxy("PUT", f"{path}?{q}", {**auth, "Accept": "application/json"},
                  _tar(names, gz), allowed=range(200, 500))
    # A truncated archive, and one that says gzip but is a plain tar.
    proxy("PUT", f"{A}/bi?extract-archive=tar", auth, _tar(["bi/a"] * 3)[:700],
          allowed=range(200, 500))
    proxy("PUT", f"{A}/bi?extract-archive=tar.gz", auth, _tar(["bi/a"]),
          allowed=range(200, 500))
    proxy("DELETE", f"{A}?bulk-delete", {**auth, "Content-Type": "text/plain"},
          "\n".join(["/bi/%ff", "/bi/..", "/bi/" + "o" * 2000, "/" + "c" * 300, "%00",
                     "/bi/a%00b", "", "/", "//", "/bi/missing"] * 3).encode(),
          allowed=range(200, 500))
    # Links that loop, links too long to follow, and a versioning listing with garbage.
    proxy("PUT", f"{A}/bi/loop1", {**auth, "X-Symlink-Target": "bi/loop2"}, b"",
          allowed=(201,))
    proxy("PUT", f"{A}/bi/loop2", {**auth, "X-Symlink-Target": "bi/loop1"}, b"",
          allowed=(201,))
    for method in ("GET", "HEAD", "POST", "COPY"):  # (a POST to a link is Swift's 307)
        proxy(method, f"{A}/bi/loop1", {**auth, "Destination": "bi/looped"},
              allowed=(307, *C4) if method == "POST" else C4)
    proxy("PUT", f"{A}/bi-versioned", {**auth, "X-Versions-Enabled": "true"},
          allowed=(201, 202))
    proxy("PUT", f"{A}/bi-versioned/o", auth, b"x", allowed=(201,))
    for q in ("versions&version_marker=garbage", "versions&version_marker=%ff",
              "versions&marker=o&version_marker=", "versions&version_marker=null",
              "versions&limit=abc", "versions&format=bogus", "versions&reverse=%ff"):
        proxy("GET", f"{A}/bi-versioned?{q}", auth, allowed=range(200, 500))
    for vid in ("garbage", "null", "%ff", "1" * 40, "-1", "0000000001.00000"):
        for method in ("GET", "HEAD", "DELETE", "POST"):
            proxy(method, f"{A}/bi-versioned/o?version-id={vid}", auth,
                  allowed=range(200, 500))
        proxy("PUT", f"{A}/bi-versioned/o?version-id={vid}", auth, allowed=range(200, 500))
    # Static web with odd index and error pages.
    proxy("POST", f"{A}/bi", {**auth, "X-Container-Read": ".r:*,.rlistings",
                              "X-Container-Meta-Web-Index": "../%ff",
                              "X-Container-Meta-Web-Error": "%00",
                              "X-Container-Meta-Web-Listings": "true",
                              "X-Container-Meta-Web-Listings-CSS": "\"><script>"},
          allowed=(204,))
    for path in ("/", "/..", "/%ff", "/a/b/c/", "/" + "d" * 1100, "/o/"):
        proxy("GET", f"{A}/bi{path}", {"X-Web-Mode": "true"}, allowed=range(200, 500))
    proxy("POST", f"{A}/bi", {**auth, "X-Container-Read": "",
                              "X-Container-Meta-Web-Index": "",
                              "X-Container-Meta-Web-Error": "",
                              "X-Container-Meta-Web-Listings": ""}, allowed=(204,))


# ---- tokens and auth -----------------------------------------------------------------------

def test_bad_tokens_and_auth(proxy, seeded):
    for value in ("", "AUTH_tk", "AUTH_tk" + "a" * 5000, "%ff", "AUTH_tk" + "0" * 64,
                  "AUTH_tk" + "z" * 64, "\t", "AUTH_tk\\x"):
        for header in ("X-Auth-Token", "X-Storage-Token", "X-Service-Token"):
            proxy("GET", f"{A}/bi/o", {header: value}, allowed=(401, 403))
            proxy("PUT", f"{A}/bi/tok", {header: value}, b"x", allowed=(401, 403))
    junk = [{}, {"X-Auth-User": "nocolon", "X-Auth-Key": "k"},
            {"X-Auth-User": ":", "X-Auth-Key": "k"}, {"X-Auth-User": "a:", "X-Auth-Key": "k"},
            {"X-Auth-User": ":b", "X-Auth-Key": "k"}, {"X-Auth-User": "test:tester"},
            {"X-Auth-User": "test:tester", "X-Auth-Key": "x" * 5000},
            {"X-Auth-User": "test:tester", "X-Auth-Key": "wrong"},
            {"X-Auth-User": "a" * 5000 + ":b", "X-Auth-Key": "k"},
            {"X-Storage-User": "test:tester", "X-Storage-Pass": ""},
            {"X-Auth-User": "test:tester", "X-Auth-Key": "testing",
             "X-Auth-Token-Lifetime": "abc"},
            {"X-Auth-User": "test:tester", "X-Auth-Key": "testing",
             "X-Auth-New-Token": "maybe"},
            {"X-Auth-User": "test:%ff", "X-Auth-Key": "k"},
            {"X-Auth-User": "test:tester", "X-Auth-Key": "testing", "X-Auth-Token": "junk"}]
    for headers in junk:
        for path in ("/auth/v1.0", "/auth/v1.0?x=%ff", "/auth/v1.0/", "/auth/v2.0",
                     "/auth/%ff"):
            # a valid user and key is a 200 whatever else comes with it
            proxy("GET", path, headers, allowed=(200, *C4))
    proxy("POST", "/auth/v1.0", {"X-Auth-User": "test:tester", "X-Auth-Key": "testing"},
          allowed=range(200, 500))
    proxy("PUT", "/auth/v1.0", {}, b"x" * 100, allowed=C4)


# ---- storage servers directly --------------------------------------------------------------

def _backend(method: str, path: str, headers: dict | None = None, body: bytes = b"",
             signed: bool = True, ts: str | None = None) -> bytes:
    headers = dict(headers or {})
    if ts is not None:
        headers["X-Timestamp"] = ts
    data = request_bytes(method, path, headers, body)
    if signed:
        head, _, rest = data.partition(b"\r\n\r\n")
        sig = raw_signature(method, path, ts).encode().rstrip(b"\r\n")
        data = head + b"\r\n" + sig + b"\r\n\r\n" + rest
    return data


def test_storage_servers_refuse_junk(cluster, seeded):
    """Unsigned requests are refused before any handler work; signed ones with bad
    partitions, devices, names or X-Timestamps are the sender's 4xx (507: no such device,
    as Swift says it to a proxy), never a 5xx."""
    now = f"{time.time():.5f}"
    paths = {"object": ["/d1/0/AUTH_test/bi/x", "/d1/abc/AUTH_test/bi/x",
                        "/d1/-1/AUTH_test/bi/x", "/d1/" + "9" * 40 + "/AUTH_test/bi/x",
                        "/d1/99999/AUTH_test/bi/x", "/../0/AUTH_test/bi/x",
                        "/nodev/0/AUTH_test/bi/x", "/%ff/0/AUTH_test/bi/x",
                        "/d1/0/AUTH_test/bi", "/d1/0/AUTH_test", "/d1/0", "/d1", "/",
                        "/d1/0/AUTH_test/bi/%ff", "/d1/0/%00/bi/x", "/d1/0/a/b/..",
                        "/d1/1.5/AUTH_test/bi/x", "/d1/0/AUTH_test//x",
                        "/d1/0/AUTH_test/bi/n%0Al"],
             "container": ["/d1/0/AUTH_test/bi-x", "/d1/abc/AUTH_test/bi-x",
                           "/d1/-1/AUTH_test/bi-x", "/nodev/0/AUTH_test/bi-x",
                           "/../0/AUTH_test/bi-x", "/d1/0/AUTH_test", "/d1/0", "/",
                           "/d1/0/AUTH_test/bi-x/o/extra/..", "/d1/0/%ff/c",
                           "/d1/" + "9" * 40 + "/AUTH_test/c", "/d1/0/AUTH_test/n%0Al"],
             "account": ["/d1/0/AUTH_x", "/d1/abc/AUTH_x", "/d1/-1/AUTH_x",
                         "/nodev/0/AUTH_x", "/../0/AUTH_x", "/d1/0", "/", "/d1/0/%ff",
                         "/d1/0/AUTH_x/c/o/p", "/d1/" + "9" * 40 + "/AUTH_x"]}
    # Names a storage server takes: any partition number below 2**32 (Swift's servers do
    # not know the ring's size), the reserved namespace (its names start with NUL: only
    # the cluster's own requests reach these servers), a newline.
    valid = {"/d1/99999/AUTH_test/bi/x", "/d1/0/%00/bi/x", "/d1/0/AUTH_test/bi/n%0Al",
             "/d1/0/AUTH_test/n%0Al"}
    # Not timestamps at all: a write carrying one is refused.
    bad_stamps = [None, "abc", "-1", "inf", "nan", "", now + "_zz", "1" * 40]
    count = 0
    bad: list[str] = []
    for role, role_paths in paths.items():
        b = Battery(backend_addr(cluster, role))
        for path in role_paths:
            allowed = (*C4, 507) if "nodev" in path else C4
            for method in ("GET", "PUT", "DELETE", "MERGE"):
                b.send(_backend(method, path, signed=False), method, allowed=(401,),
                       label=f"unsigned {role} {method} {path}", fresh=False)
            b.send(_backend("GET", path, {"X-Backend-Signature": "junk"}, signed=False),
                   allowed=(401, 403), label=f"bad signature {role} {path}", fresh=False)
            for method in ("GET", "HEAD", "PUT", "POST", "DELETE", "MERGE", "FOO"):
                headers = {"Content-Type": "text/plain"} if method == "PUT" else {}
                body = b"x" if method == "PUT" and role == "object" else b""
                ok = range(200, 500) if path == role_paths[0] or path in valid else allowed
                b.send(_backend(method, path, headers, body, ts=now), method,
                       allowed=(405,) if method == "FOO" else ok,
                       label=f"{role} {method} {path}", fresh=False)
        good = role_paths[0]
        for ts in bad_stamps:
            for method in ("PUT", "POST", "DELETE") if role == "object" else ("PUT", "DELETE"):
                body = b"x" if method == "PUT" and role == "object" else b""
                b.send(_backend(method, good, {"Content-Type": "text/plain"}, body, ts=ts),
                       method, allowed=(400,), label=f"{role} {method} ts={ts!r}", fresh=False)
        # Garbage headers, bodies and queries on a good path.
        for method, headers, body in (
                ("PUT", {"X-Size": "abc", "X-Etag": "x", "X-Content-Type": "t"}, b""),
                ("PUT", {"X-Container-Partition": "abc", "X-Container-Host": "junk",
                         "X-Container-Device": "%ff"}, b"x"),
                ("PUT", {"X-Delete-At": "abc"}, b"x"),
                ("PUT", {"X-Backend-Storage-Policy-Index": "abc"}, b"x"),
                ("PUT", {"X-Backend-Storage-Policy-Index": "99"}, b"x"),
                ("PUT", {"X-Put-Timestamp": "abc", "X-Object-Count": "x",
                         "X-Bytes-Used": "-"}, b""),
                ("GET", {"Range": "bytes=5-2"}, b""),
                ("GET", {"X-Backend-Record-Type": "bogus"}, b""),
                ("GET", {"If-Modified-Since": "garbage"}, b""),
                ("POST", {"X-Object-Meta-" + "n" * 200: "v"}, b""),
                ("DELETE", {"X-If-Delete-At": "abc"}, b"")):
            b.send(_backend(method, good, headers, body, ts=now), method,
                   allowed=range(200, 500), label=f"{role} {method} {good} {headers}",
                   fresh=False)
        for query in ("?format=bogus", "?limit=abc", "?marker=%ff", "?limit=-1",
                      "?states=bogus", "?includes=%ff", "?%ff", "?reverse=%00"):
            b.send(_backend("GET", good + query), allowed=range(200, 500),
                   label=f"{role} GET {good}{query}", fresh=False)
        # The replication endpoints, with bodies that are not what they expect (a digests
        # request reads none; a sync stream may be empty; a DB that is not there answers
        # so, whatever the op).
        for path in ("/d1/0/digests", "/d1/0/states", "/d1/0/sync", "/d1/abc/digests",
                     "/d1/0/" + "a" * 32, "/nodev/0/" + "a" * 32, "/d1/0/digests/zzz"):
            for body in (b"", b"\xff\x00garbage", b"\x92\xff", b"\xc1", b"\x81\xa2op\xa4junk"):
                b.send(_backend("MERGE", path, {}, body), "MERGE",
                       allowed=(*C4, 507) if "nodev" in path else range(200, 500),
                       label=f"{role} MERGE {path} {body!r}", fresh=False)
        count += b.count
        bad += b.bad
        b.close()
    SENT.append(count)
    assert not bad, f"{len(bad)} of {count} answers wrong:\n" + "\n".join(bad[:60])


# ---- exhaustion ----------------------------------------------------------------------------

def test_exhaustion(cluster, seeded):
    """Bounded floods on loopback: each is refused (or served) and the proxy goes on."""
    u = urllib.parse.urlsplit(cluster.proxy_url)
    addr = (u.hostname, u.port)
    t = seeded
    o = f"{A}/bi/o"
    cases: list[tuple[bytes, object]] = []
    many = "".join(f"X-H{i}: v\r\n" for i in range(100))
    for _ in range(200):
        cases.append(((f"GET {o} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {t}\r\n{many}\r\n")
                      .encode(), range(200, 500)))
    meta = "".join(f"X-Object-Meta-M{i}: v\r\n" for i in range(1000))
    cases += [((f"PUT {o}m HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {t}\r\n"
                f"Content-Length: 1\r\n{meta}\r\nx").encode(), C4)] * 5
    cases += [((f"GET {o} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {t}\r\n"
                f"X-Big: {'b' * 16384}\r\n\r\n").encode(), C4)] * 10
    cases += [((f"GET {A}/bi/{'u' * 9000} HTTP/1.1\r\nHost: t\r\n"
                f"X-Auth-Token: {t}\r\n\r\n").encode(), C4)] * 10
    cases += [((f"GET {A}/bi/o?{'q=' * 9000} HTTP/1.1\r\nHost: t\r\n"
                f"X-Auth-Token: {t}\r\n\r\n").encode(), range(200, 500))] * 5
    cases += [((f"GET /{'u' * 70000} HTTP/1.1\r\nHost: t\r\n\r\n").encode(), C4)] * 5
    cases += [((f"GET {o} HTTP/1.1\r\nHost: t\r\n{'X-Y: ' + 'y' * 8000 + chr(13) + chr(10)}"
                * 20 + "\r\n").encode(), C4)] * 5
    cases += [((f"PUT {A}/bi/toobig HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {t}\r\n"
                f"Content-Length: {6 * 1024 ** 3}\r\n\r\n").encode() + b"x" * 65536, (413,))] * 5

    def run(case):
        data, allowed = case
        start = time.monotonic()
        try:
            status = exchange(addr, data)[0]
        except OSError as exc:
            return f"{data[:80]!r}: {exc!r}"
        took = time.monotonic() - start
        if status not in allowed or took > BOUND:
            return f"{data[:80]!r}... -> {status} in {took:.1f}s"
        return None

    with ThreadPoolExecutor(4) as pool:
        bad = [r for r in pool.map(run, cases) if r]
    count = len(cases)
    # Heads trickled and dropped, bodies cut off mid-upload: the server notices, no trace.
    cut: list[socket.socket] = []
    for i in range(20):
        s = socket.create_connection(addr, timeout=BOUND)
        s.sendall(f"PUT {A}/bi/cut{i} HTTP/1.1\r\nHost: t\r\nX-Auth-Tok".encode())
        cut.append(s)
    for i in range(20):  # buffered (small) and streamed (big) uploads
        size = 100_000 if i % 2 else 8 * 1024 ** 2
        s = socket.create_connection(addr, timeout=BOUND)
        s.sendall(f"PUT {A}/bi/cut{i} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {t}\r\n"
                  f"Content-Length: {size}\r\n\r\n".encode() + b"x" * (i * 50_000 % size))
        cut.append(s)
    for i in range(10):  # the proxy said continue, and the body never came
        s = socket.create_connection(addr, timeout=BOUND)
        s.sendall(f"PUT {A}/bi/cont{i} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {t}\r\n"
                  f"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n".encode())
        cut.append(s)
    for s in cut[40:]:
        s.recv(100)  # 100 Continue
        s.sendall(b"half")
    for s in cut:
        s.close()
    count += len(cut)
    # The proxy still serves, and nothing of the cut uploads was stored.
    probe = Battery(addr)
    for i in range(20):
        probe("HEAD", f"{A}/bi/cut{i}", {"X-Auth-Token": t}, allowed=(404,))
    for i in range(10):
        probe("HEAD", f"{A}/bi/cont{i}", {"X-Auth-Token": t}, allowed=(404,))
    probe("GET", o, {"X-Auth-Token": t}, allowed=(200,))
    probe.done()
    SENT.append(count + probe.count)
    assert not bad, f"{len(bad)} of {count} answers wrong:\n" + "\n".join(bad[:40])


def test_slow_clients_and_many_connections(cluster, seeded):
    """Bodies that stop arriving and answers nobody reads, on a proxy with a one-second
    client_timeout: each is given up on (408, or the connection closed) within the bound,
    with a warning and no traceback; then a few hundred connections at once."""
    t = seeded
    proxy = start_proxy_variant(cluster, "impatient", {"client_timeout": "1"})
    try:
        addr = ("127.0.0.1", proxy.port)
        big = 4 * 1024 ** 2
        assert exchange(addr, _head("PUT", f"{A}/bi/big", t, f"Content-Length: {big}")
                        + b"b" * big)[0] == 201
        # Bigger than any socket buffers between the proxy and a reader (loopback's may take a
        # few MiB), so a reader that never reads does stall the proxy's writes.
        huge = 24 * 1024 ** 2
        assert exchange(addr, _head("PUT", f"{A}/bi/huge", t, f"Content-Length: {huge}")
                        + b"h" * huge)[0] == 201
        slow = [
            _head("PUT", f"{A}/bi/slow1", t, "Content-Length: 100") + b"x" * 10,
            _head("PUT", f"{A}/bi/slow2", t, f"Content-Length: {big}") + b"x" * 100_000,
            _head("PUT", f"{A}/bi/slow3?multipart-manifest=put", t, "Content-Length: 100") + b"[",
            _head("DELETE", f"{A}?bulk-delete", t, "Content-Length: 100",
                  "Content-Type: text/plain") + b"/bi/x\n",
            _head("PUT", f"{A}/bi?extract-archive=tar", t, "Content-Length: 10000") + b"\0" * 600,
            _head("POST", f"{A}/bi", t, "Content-Length: 1000",
                  "Content-Type: multipart/form-data; boundary=x") + b"--x\r\n",
            _head("PUT", f"{A}/bi-slow", t, "Content-Length: 100") + b"x",
        ]
        bad = []
        socks = []
        try:
            for data in slow:
                s = socket.create_connection(addr, timeout=BOUND)
                s.sendall(data)
                socks.append((s, data))
            # Answers nobody reads: the proxy's send buffer fills, and it gives up.
            for _ in range(3):
                s = socket.create_connection(addr, timeout=BOUND)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(_head("GET", f"{A}/bi/huge", t))
                socks.append((s, b""))
            start = time.monotonic()
            for s, data in socks[:len(slow)]:
                status = _read_answer(s, "PUT")[0]
                # 408, or for a request the proxy answers before its body (a container PUT:
                # Swift ignores its body; bulk's 200 comes first, its report says 408), that.
                if status not in (0, 200, 201, 202, 408) or time.monotonic() - start > BOUND:
                    bad.append(f"{data[:60]!r}: {status}")
            wait_for(lambda: proxy.log_text().count("it read nothing for") >= 3, 3 * BOUND,
                     what="the proxy to give up on the readers that never read")
        finally:
            for s, _ in socks:
                s.close()
        # Many connections at once: each is answered.
        conns = [socket.create_connection(addr, timeout=BOUND) for _ in range(300)]
        try:
            for c in conns:
                c.sendall(_head("HEAD", f"{A}/bi/o", t))
            statuses = [_read_answer(c, "HEAD")[0] for c in conns]
        finally:
            for c in conns:
                c.close()
    finally:
        proxy.stop()  # whatever failed: no proxy outlives the test
    SENT.append(len(slow) + 3 + len(conns))
    assert statuses.count(200) == len(conns), set(statuses)
    assert not bad, bad
    assert "giving up on the client" in proxy.log_text()


# ---- the logs ------------------------------------------------------------------------------

def test_no_traceback_in_any_log(cluster):
    # Every server has written what it will about the requests above once it answers
    # another (a log line is written before the answer that follows it).
    for role in ("proxy", "object", "container", "account"):
        port = (cluster.info["proxy"] if role == "proxy" else
                cluster.nodes[0]["servers"][role])["port"]
        assert exchange(("127.0.0.1", port), b"GET /healthcheck HTTP/1.1\r\nHost: t\r\n\r\n"
                        )[0] == 200
    found = log_tracebacks(cluster.root)
    assert not found, f"{len(found)} kinds of traceback after {sum(SENT)} requests:\n\n" + \
        "\n\n".join(found[:15])

