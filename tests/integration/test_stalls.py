"""Stalled clients (issue 16, item 8): a body that stops arriving, an answer nobody reads.

Before client_timeout was applied, a streamed PUT that stopped sending held the proxy's
backend connections and every replica's temp file for as long as the client kept the
socket open, and a GET nobody read held its object server connection the same way.
"""

from __future__ import annotations

import glob
import os
import socket
import time

import pytest
import swiftclient

from tests.backend_signing import raw_signature
from tests.helpers import ServerProcess, free_port, start_proxy_variant, wait_for

TIMEOUT = 1  # client_timeout of the servers under test, seconds


@pytest.fixture(scope="module")
def strict_proxy(cluster):
    """A second proxy on the cluster with a short client_timeout."""
    proc = start_proxy_variant(cluster, "stall", {"client_timeout": str(TIMEOUT)})
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def token(cluster, strict_proxy):
    url, tok = swiftclient.get_auth(f"http://127.0.0.1:{strict_proxy.port}/auth/v1.0",
                                    "test:tester", "testing")
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=tok)
    conn.put_container("stalls")
    return url, tok, conn


def temp_files(cluster) -> list[str]:
    return [p for node in cluster.nodes
            for p in glob.glob(os.path.join(node["devices_root"], "*", "tmp", "*"))]


def _response_head(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _closed(sock: socket.socket, deadline: float) -> int:
    """Read until the peer closes; the bytes read (fails the test at the deadline)."""
    total = 0
    while True:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return total
        if not chunk:
            return total
        total += len(chunk)


@pytest.mark.parametrize("size", [3 * 1024 * 1024, 4096], ids=["streamed", "buffered"])
def test_stalled_upload_gets_408_and_frees_the_replicas(cluster, strict_proxy, token, size):
    url, tok, conn = token
    name = f"stalled-{size}"
    path = url.split("//", 1)[1].split("/", 1)[1]
    sent = size // 2
    with socket.create_connection(("127.0.0.1", strict_proxy.port)) as sock:
        sock.sendall(f"PUT /{path}/stalls/{name} HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {tok}\r\n"
                     f"Content-Length: {size}\r\n\r\n".encode() + b"x" * sent)
        if size > 1024 * 1024:  # streamed: the replicas have begun their temp files
            wait_for(lambda: temp_files(cluster), 10, what="temp files of the upload")
        head = _response_head(sock, time.monotonic() + 20)
        assert head.startswith(b"HTTP/1.1 408"), head[:200]
        _closed(sock, time.monotonic() + 10)
    wait_for(lambda: not temp_files(cluster), 20, what="the replicas to drop their temp files")
    with pytest.raises(swiftclient.ClientException) as exc:
        conn.head_object("stalls", name)
    assert exc.value.http_status == 404
    assert "no body bytes" in strict_proxy.log_text()


def test_unread_answer_is_cut(cluster, strict_proxy, token):
    url, tok, conn = token
    body = os.urandom(16 * 1024 * 1024)
    conn.put_object("stalls", "big", body)
    path = url.split("//", 1)[1].split("/", 1)[1]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", strict_proxy.port))
        sock.sendall(f"GET /{path}/stalls/big HTTP/1.1\r\nHost: x\r\n"
                     f"X-Auth-Token: {tok}\r\n\r\n".encode())
        # Read nothing until the proxy says it gave up on us.
        wait_for(lambda: "read nothing for" in strict_proxy.log_text(), 30,
                 what="the proxy to give up on the reader")
        got = _closed(sock, time.monotonic() + 20)
    assert got < len(body)
    # The proxy still serves others.
    assert conn.head_object("stalls", "big")["content-length"] == str(len(body))


@pytest.fixture
def object_server(tmp_path):
    devices = tmp_path / "devices"
    (devices / "sda").mkdir(parents=True)
    conf = tmp_path / "object-server.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[object-server]\n"
                    f"client_timeout = {TIMEOUT}\n")
    proc = ServerProcess("object", str(conf), free_port()).start()
    yield proc, devices
    proc.stop()


def test_object_server_drops_a_stalled_body(object_server):
    """A hung proxy (or replicator) mid-body does not pin the object server's temp file."""
    proc, devices = object_server
    ts = f"{time.time():.5f}"
    target = "/sda/1/a/c/o"
    with socket.create_connection(("127.0.0.1", proc.port)) as sock:
        sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: x\r\nX-Timestamp: {ts}\r\n"
                     f"Content-Type: application/octet-stream\r\nContent-Length: 4000000\r\n"
                     f"{raw_signature('PUT', target, ts)}\r\n".encode() + b"y" * 2_000_000)
        wait_for(lambda: glob.glob(str(devices / "sda" / "tmp" / "*")), 10,
                 what="the temp file")
        head = _response_head(sock, time.monotonic() + 20)
    assert head.split(b" ", 2)[1] in (b"408", b"499"), head[:200]
    wait_for(lambda: not glob.glob(str(devices / "sda" / "tmp" / "*")), 10,
             what="the temp file to go")
