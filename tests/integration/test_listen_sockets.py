"""Listening ports belong to one server: nothing else can bind one and take half its traffic.

A test cluster once answered 503 because a parallel cluster's server had joined one of its
ports through SO_REUSEPORT: the kernel spread requests over both, and the stranger refused
the foreign cluster's signatures.
"""

from __future__ import annotations

import errno
import socket
import subprocess
import sys

from tests.helpers import ServerProcess, free_port, wait_for


def _join(port: int) -> int:
    """Try to bind a port as a second SO_REUSEPORT listener would; 0 on success, else errno."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno
        return 0


def test_cluster_ports_cannot_be_joined(cluster):
    ports = [cluster.info["proxy"]["port"]]
    for node in cluster.nodes:
        ports += [s["port"] for s in node["servers"].values()]
    # The test cluster runs one process per server: none may be joined. (A server with
    # workers opens its SO_REUSEPORT sockets before the first fork and never lets go of the
    # port, so no port-0 bind elsewhere can be handed it either.)
    assert {p: _join(p) for p in ports} == {p: errno.EADDRINUSE for p in ports}


def test_single_worker_port_clash_fails_loudly(tmp_path):
    conf = tmp_path / "account.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {tmp_path}\n[account-server]\nworkers = 1\n")
    port = free_port()
    first = ServerProcess("account", str(conf), port).start()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "swiftlite.cli", "server", "account", "-c", str(conf),
             "--port", str(port)], capture_output=True, timeout=60)
        assert second.returncode != 0
        assert b"Address already in use" in second.stderr + second.stdout
        wait_for(lambda: first.proc.poll() is None, 1, what="first server still running")
    finally:
        first.stop()

