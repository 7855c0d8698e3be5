"""Server start-up: a low soft open-files limit (the usual 1024, here 256) is lifted, so a
busy server does not run out of sockets and file descriptors (EMFILE) under load."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys

import pytest

from tests.helpers import free_port, healthy, wait_for


def _open_files_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no open-files line in /proc/<pid>/limits")


def test_server_lifts_a_low_soft_open_files_limit(tmp_path):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard limit leaves nothing to lift")
    (tmp_path / "devices").mkdir()
    conf = tmp_path / "account.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {tmp_path / 'devices'}\n[account-server]\n"
                    "max_open_files = 4096\n")
    port = free_port()

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    proc = subprocess.Popen([sys.executable, "-m", "swiftlite.cli", "server", "account", "-c",
                             str(conf), "--port", str(port)], preexec_fn=low_limit,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: healthy(port), 20, what="account server")
        expected = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
        assert _open_files_limit(proc.pid) == expected
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
