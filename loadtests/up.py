"""A fresh `swiftlite up` for a benchmark: start it on free ports, wait for cluster.json,
stop it (its whole process group) afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def start_cluster(root: str, up_args: list[str], daemons: bool = False,
                  timeout: float = 90) -> tuple[subprocess.Popen, dict]:
    """`swiftlite up --root root --port 0 [--no-daemons] *up_args`; (process, cluster.json).
    Its output goes to `<root>.log`."""
    cmd = [sys.executable, "-m", "swiftlite.cli", "up", "--root", root, "--port", "0",
           *([] if daemons else ["--no-daemons"]), *up_args]
    with open(root + ".log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    path = os.path.join(root, "cluster.json")
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_cluster(proc)
            raise SystemExit(f"swiftlite up failed: see {root}.log")
        time.sleep(0.2)
    with open(path) as f:
        return proc, json.load(f)


def stop_cluster(proc: subprocess.Popen, timeout: float = 30) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
