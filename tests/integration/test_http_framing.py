"""HTTP framing through a real cluster: the case of methods, UTF-8 header names, broken
chunked bodies. Requests are written byte for byte on sockets (http.client would re-encode
or refuse them), to the proxy and straight to the storage servers; each answer must come
within a socket deadline, and no client mistake may leave a traceback in any log."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest
import swiftclient

from tests.backend_signing import raw_signature
from tests.helpers import cluster_logs

THUMB = "👍"
DEADLINE = 3.0  # seconds for an answer and the close that follows it; no request waits more
ALLOW = b"COPY, DELETE, GET, HEAD, OPTIONS, POST, PUT"
BROKEN_BODIES = {
    "not hex": b"zz\r\nabc\r\n0\r\n\r\n",
    "negative": b"-5\r\nabc\r\n0\r\n\r\n",
    "20 hex digits": b"1" + b"0" * 19 + b"\r\nabc",
    "no CRLF after the data": b"3\r\nabcXY3\r\nabc\r\n0\r\n\r\n",
}


@pytest.fixture(scope="module")
def auth(cluster) -> tuple[str, str]:
    url, token = swiftclient.get_auth(cluster.auth_url, cluster.user, cluster.key)
    return urllib.parse.urlsplit(url).path, token


def wire(port: int, data: bytes, then: bytes | None = None) -> tuple[bytes, bool]:
    """Send `data` (then `then`, in a segment of its own): everything the server sends
    back, and whether it closed the connection within DEADLINE. Whether the server reads
    `then` apart is up to it; tests/unit/test_lenient_parser.py makes sure of that."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(data)
        if then is not None:
            s.sendall(then)
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            return out, False
    return out, True


def proxy_port(cluster) -> int:
    return urllib.parse.urlsplit(cluster.proxy_url).port


def status(out: bytes) -> int:
    return int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.") else 0


def head_lines(out: bytes) -> list[bytes]:
    return out.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]


def request(method: str, path: str, token: str, *lines: str, body: bytes = b"",
            close: bool = True) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: t", f"X-Auth-Token: {token}", *lines]
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def log_text(cluster) -> str:
    return cluster_logs(cluster.root)


# ---- methods are case-sensitive ------------------------------------------------------------

def test_methods_not_served_exactly_as_spelled_are_405(cluster, conn, auth):
    path, token = auth
    conn.put_container("hf-methods")
    conn.put_object("hf-methods", "o", b"original")
    for method in ("get", "Get", "head", "put", "pUT", "post", "delete", "copy", "options",
                   "PATCH", "LICK"):
        out, closed = wire(proxy_port(cluster), request(
            method, f"{path}/hf-methods/o", token, "Content-Length: 7",
            "X-Object-Meta-Sneaky: 1", "Destination: hf-methods/copy", body=b"changed"))
        assert status(out) == 405 and closed, (method, out)
        assert b"Allow: " + ALLOW in head_lines(out), out
    headers, body = conn.get_object("hf-methods", "o")
    assert body == b"original" and "x-object-meta-sneaky" not in headers
    assert [o["name"] for o in conn.get_container("hf-methods")[1]] == ["o"]
    assert "Traceback" not in log_text(cluster)


@pytest.mark.parametrize("role", ["object", "container", "account"])
def test_storage_servers_answer_405_to_lower_case_methods(cluster, role):
    port = cluster.servers(0)[role]["port"]
    target = {"object": "/d1/1/AUTH_test/c/o", "container": "/d1/1/AUTH_test/c",
              "account": "/d1/1/AUTH_test"}[role]
    for method in ("get", "put", "Head"):
        ts = f"{time.time():016.5f}"
        out, closed = wire(port, f"{method} {target} HTTP/1.1\r\nHost: t\r\nX-Timestamp: {ts}"
                                 f"\r\n{raw_signature(method, target, ts)}Content-Length: 0\r\n"
                                 "Connection: close\r\n\r\n".encode())
        assert status(out) == 405 and closed, (method, out)
    assert "Traceback" not in log_text(cluster)


# ---- UTF-8 header names --------------------------------------------------------------------

def test_utf8_metadata_names_round_trip(cluster, conn, auth):
    """Stored and answered as the same UTF-8 bytes, through the proxy and the storage
    servers, for objects, containers and accounts; sent after every other header."""
    path, token = auth
    conn.put_container("hf-utf8")
    meta = f"X-Object-Meta-{THUMB}: {THUMB}"
    out, _ = wire(proxy_port(cluster), request("PUT", f"{path}/hf-utf8/o", token, meta,
                                               "Content-Length: 3", body=b"abc"))
    assert status(out) == 201, out
    for method in ("HEAD", "GET"):
        out, _ = wire(proxy_port(cluster), request(method, f"{path}/hf-utf8/o", token))
        assert status(out) == 200
        assert head_lines(out)[-1] == meta.encode()  # exactly as sent, after the rest
    # What Python's http.client sends: swiftclient's POSTs of object, container, account.
    conn.post_object("hf-utf8", "o", {f"x-object-meta-{THUMB}": "two"})
    conn.post_container("hf-utf8", {f"x-container-meta-{THUMB}": "three"})
    conn.post_account({f"x-account-meta-{THUMB}": "four"})
    for target, kind, value in ((f"{path}/hf-utf8/o", "Object", b"two"),
                                (f"{path}/hf-utf8", "Container", b"three"),
                                (path, "Account", b"four")):
        out, _ = wire(proxy_port(cluster), request("HEAD", target, token))
        assert f"X-{kind}-Meta-{THUMB}: ".encode() + value in head_lines(out), out
    # Python clients stop reading headers at such a name (CPython gh-81274): every other
    # header still reaches them, Content-Length included, so a GET does not hang.
    headers, body = conn.get_object("hf-utf8", "o")
    assert body == b"abc" and headers["content-length"] == "3"
    assert "x-trans-id" in headers


def test_utf8_metadata_name_limits_and_bad_names(cluster, conn, auth):
    path, token = auth
    conn.put_container("hf-names")
    conn.put_object("hf-names", "o", b"x", headers={"X-Object-Meta-Kept": "yes"})
    target = f"{path}/hf-names/o"

    def post(name: bytes) -> int:
        data = (f"POST {target} HTTP/1.1\r\nHost: t\r\nX-Auth-Token: {token}\r\n".encode()
                + name + b": v\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        out, closed = wire(proxy_port(cluster), data)
        assert closed, (name, out)
        return status(out)

    utf8 = THUMB.encode()
    assert post(b"X-Object-Meta-" + utf8 * 33) == 400  # 132 bytes: longer than 128
    for bad in (b"a b", b"a\x00b", b"a\rb", b"a\x7f", b"a\tb", b"(a)", utf8 + b"\x01",
                utf8 + b" ", utf8 + b"\x7f", b"\xff\xfe"):
        assert post(b"X-Object-Meta-" + bad) == 400, bad
    assert conn.head_object("hf-names", "o")["x-object-meta-kept"] == "yes"
    assert post(b"X-Object-Meta-" + utf8 * 32) == 202  # 128 bytes: the limit
    out, _ = wire(proxy_port(cluster), request("HEAD", target, token))
    assert b"X-Object-Meta-" + utf8 * 32 + b": v" in head_lines(out)
    assert "Traceback" not in log_text(cluster)


def test_swift_cli_posts_utf8_metadata_names(cluster, conn, auth):
    path, token = auth
    conn.put_container("hf-cli")
    conn.put_object("hf-cli", "o", b"12345")
    swift = [os.path.join(os.path.dirname(sys.executable), "swift"), "-A", cluster.auth_url,
             "-U", cluster.user, "-K", cluster.key]
    done = subprocess.run([*swift, "post", "-m", f"{THUMB}:{THUMB}", "hf-cli", "o"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out, _ = wire(proxy_port(cluster), request("HEAD", f"{path}/hf-cli/o", token))
    assert f"X-Object-Meta-{THUMB}: {THUMB}".encode() in head_lines(out)
    # `swift stat` reads every header before that name (CPython gh-81274 hides it).
    done = subprocess.run([*swift, "stat", "hf-cli", "o"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert re.search(r"Content Length: 5\n", done.stdout), done.stdout


# ---- broken chunked bodies -----------------------------------------------------------------

def read_back(cluster, path: str, token: str) -> tuple[int, bytes]:
    out, closed = wire(proxy_port(cluster), request("GET", path, token))
    assert closed
    return status(out), out.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("kind", BROKEN_BODIES)
def test_broken_chunked_put_is_400_at_once_and_stores_nothing(cluster, conn, auth, kind):
    path, token = auth
    cont = "hf-chunks"
    conn.put_container(cont)
    conn.put_object(cont, "kept", b"old content")
    body = BROKEN_BODIES[kind]
    for name in ("kept", f"new-{kind.replace(' ', '-')}"):
        for utf8 in (False, True):  # read by the C parser, or by the Python one
            lines = ["Transfer-Encoding: chunked"] + (
                [f"X-Object-Meta-{THUMB}: x"] if utf8 else [])
            data = request("PUT", f"{path}/{cont}/{name}", token, *lines, close=False)
            # With the head; or after it and a good first chunk, which the proxy may
            # already be streaming to the replicas when the rest breaks.
            for first, then in ((data + body, None), (data + b"5\r\nfirst\r\n", body)):
                started = time.monotonic()
                out, closed = wire(proxy_port(cluster), first, then)
                assert status(out) == 400, (name, utf8, out)
                assert b"malformed body" in out and closed
                assert time.monotonic() - started < DEADLINE
    assert read_back(cluster, f"{path}/{cont}/kept", token) == (200, b"old content")
    assert read_back(cluster, f"{path}/{cont}/new-{kind.replace(' ', '-')}", token)[0] == 404
    assert "Traceback" not in log_text(cluster)


@pytest.mark.parametrize("kind", BROKEN_BODIES)
def test_object_server_refuses_broken_chunked_bodies(cluster, kind):
    port = cluster.servers(0)["object"]["port"]
    target = f"/d1/1/AUTH_test/c/direct-{kind.replace(' ', '-')}"
    body = BROKEN_BODIES[kind]
    for first, then in ((b"", None), (b"5\r\nfirst\r\n", body)):
        ts = f"{time.time():016.5f}"
        head = (f"PUT {target} HTTP/1.1\r\nHost: t\r\nX-Timestamp: {ts}\r\n"
                f"{raw_signature('PUT', target, ts)}Content-Type: text/plain\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        out, closed = wire(port, head + (first or body), then)
        assert status(out) == 400 and b"malformed body" in out and closed, out
    out, _ = wire(port, f"GET {target} HTTP/1.1\r\nHost: t\r\n{raw_signature('GET', target)}"
                        "Connection: close\r\n\r\n".encode())
    assert status(out) == 404
    assert "Traceback" not in log_text(cluster)


def test_bulk_jobs_report_a_broken_body_as_400(cluster, conn, auth):
    """Archive extraction and bulk delete read the body in a job: its report says 400."""
    path, token = auth
    conn.put_container("hf-bulk")
    for method, target, body in (
            ("PUT", f"{path}/hf-bulk?extract-archive=tar", b"200\r\n" + b"\0" * 512 + b"\r\nzz"),
            ("POST", f"{path}?bulk-delete", b"9\r\nhf-bulk/o\r\nzz")):
        out, closed = wire(proxy_port(cluster), request(
            method, target, token, "Accept: application/json", "Content-Type: text/plain",
            "Transfer-Encoding: chunked", close=False) + body + b"\r\n")
        assert b'"Response Status": "400 Bad Request"' in out and closed, out
    assert "Traceback" not in log_text(cluster)
