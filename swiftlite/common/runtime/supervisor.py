"""Child processes of a host: start each server and daemon in its own process group, watch
them, and stop them all within a bound.

Used by `swiftlite up` (the all-in-one cluster) and `swiftlite node` (the servers and daemons
one config file names, on a real host). Stopping sends SIGTERM to every group at once: a
server stops accepting, finishes what is in flight for up to its `graceful_shutdown_timeout`,
and exits; a daemon abandons its pass (every pass is resumable). Whatever is still alive
after `grace` seconds is killed, so a stop is bounded whatever a child is doing; a kill loses
nothing acknowledged (a 201 means the data was already fsynced).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping

from swiftlite.common.runtime.server import LISTEN_FD_ENV

# Children get this long after SIGTERM; servers cut in-flight requests sooner (2 s).
STOP_GRACE = 4.5


def spawn(cmd: list[str], log_path: str | None,
          listener: socket.socket | None = None) -> subprocess.Popen:
    """Start a process in its own session (so its whole group can be signalled), its output
    appended to `log_path` (None: ours, e.g. the journal); a server gets its listening
    socket handed down when there is one."""
    env, fds = None, ()
    if listener is not None:
        env = {**os.environ, LISTEN_FD_ENV: str(listener.fileno())}
        fds = (listener.fileno(),)
    try:
        if log_path is None:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=env, pass_fds=fds)
        with open(log_path, "ab") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=env, pass_fds=fds)
    finally:
        if listener is not None:
            listener.close()  # the server holds it now


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate(procs: Mapping[str, subprocess.Popen], grace: float = STOP_GRACE) -> list[str]:
    """SIGTERM every child's group, wait up to `grace` seconds in all, then SIGKILL the
    rest. Returns the names that had to be killed."""
    for proc in procs.values():
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            # A stopped (SIGSTOPped, hung) group would never see the TERM.
            _signal_group(proc, signal.SIGCONT)
    deadline = time.monotonic() + grace
    killed = []
    for name, proc in procs.items():
        try:
            proc.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(name)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    return killed
