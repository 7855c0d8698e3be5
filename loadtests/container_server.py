"""One container server process for the DB benchmarks (bench_db, bench_sharding): its own
config under `root`, a free port, device `sda`. The benchmark's process and the server share
a backend secret (made up for the run) so the benchmark's `make_session` requests are
signed as the server requires."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from urllib.parse import quote

from swiftlite.common import signing


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ContainerServer:
    def __init__(self, root: str, extra: str = "") -> None:
        """`extra`: more lines for the [container-server] section."""
        os.environ.setdefault(signing.ENV, secrets.token_urlsafe(32))  # the server inherits it
        signing.configure({})
        self.conf = os.path.join(root, f"c-{uuid.uuid4().hex[:6]}.conf")
        with open(self.conf, "w") as f:
            f.write(f"[DEFAULT]\ndevices = {root}/node\n[container-server]\n"
                    f"log_level = WARNING\n{extra}\n")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swiftlite.cli", "server", "container", "-c", self.conf,
             "--port", str(self.port)], start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthcheck", timeout=1)
                return
            except OSError:
                time.sleep(0.05)  # a benchmark's start-up poll, not a test's synchronisation
        raise RuntimeError("container server did not start")

    def url(self, account: str, container: str, obj: str | None = None) -> str:
        path = f"/sda/0/{quote(account, safe='')}/{quote(container, safe='')}"
        if obj is not None:
            path += "/" + quote(obj, safe="/")
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(10)
