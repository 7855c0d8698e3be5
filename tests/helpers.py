"""Test support: free ports, real server processes, waiting on conditions with deadlines."""

from __future__ import annotations

import asyncio
import configparser
import glob
import http.client
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from typing import Any

import pytest

# Ports for servers a test starts itself: each xdist worker takes its own block below the
# kernel's ephemeral range, so a port found free here cannot be handed to another worker (or
# to a `swiftlite up`, which picks ephemeral ports) before the server binds it.
_PORT_BLOCK = 1500
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
_PORT_BASE = 15000 + (int(_worker) % 10 if _worker.isdigit() else 0) * _PORT_BLOCK
# A random start keeps two test runs on one machine from walking the same ports.
_cursor = random.randrange(_PORT_BLOCK)


def free_port() -> int:
    global _cursor
    for _ in range(_PORT_BLOCK):
        port = _PORT_BASE + _cursor
        _cursor = (_cursor + 1) % _PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_PORT_BASE}..{_PORT_BASE + _PORT_BLOCK}")


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll `cond` until it returns a truthy value; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # the condition may fail until the thing is up
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_exc!r})" if last_exc else ""))


async def async_wait_for(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
                         what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_exc!r})" if last_exc else ""))


def healthy(port: int, ip: str = "127.0.0.1") -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}/healthcheck", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


class ServerProcess:
    """`swiftlite server <role> -c conf` as a real child process."""

    def __init__(self, role: str, conf_path: str, port: int, log_path: str | None = None,
                 nofile: int | None = None):
        """`nofile`: the process's open-files limit (soft and hard), to starve it."""
        self.role = role
        self.conf_path = conf_path
        self.port = port
        self.log_path = log_path or conf_path + f".{role}.log"
        self.nofile = nofile
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> ServerProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swiftlite.cli", "server", self.role, "-c", self.conf_path,
             "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=None if self.nofile is None else self._limit_files,
        )
        log.close()
        wait_for(lambda: self.proc.poll() is None and healthy(self.port), timeout,
                 what=f"{self.role} server on port {self.port} (log {self.log_path})")
        return self

    def _limit_files(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()


def http_request(base: str, method: str, path: str, headers: dict | None = None,
                 body: bytes | None = None,
                 timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """One request with an exact path (no client-side quoting or validation) to `base`."""
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def start_proxy_variant(cluster: Any, name: str, proxy: dict[str, str] | None = None,
                        filters: dict[str, dict[str, str]] | None = None,
                        nofile: int | None = None) -> ServerProcess:
    """Another proxy on `cluster`'s rings and storage: its proxy.conf with `proxy` options set
    in [proxy-server] and `filters` as [filter:<name>] sections, one worker, a free port, and
    its log at logs/proxy-<name>.log (`nofile`: see ServerProcess)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(cluster.etc_dir, "proxy.conf"))
    parser["proxy-server"]["workers"] = "1"
    for key, value in (proxy or {}).items():
        parser["proxy-server"][key] = value
    for filt, options in (filters or {}).items():
        parser[f"filter:{filt}"] = options
    conf = os.path.join(cluster.etc_dir, f"proxy-{name}.conf")
    with open(conf, "w") as f:
        parser.write(f)
    return ServerProcess("proxy", conf, free_port(),
                         os.path.join(cluster.root, "logs", f"proxy-{name}.log"),
                         nofile).start()


def start_memcached() -> tuple[int, subprocess.Popen]:
    """A real memcached on a free loopback port (the test skips where none is installed)."""
    binary = shutil.which("memcached")
    if binary is None:
        pytest.skip("memcached is not installed (apt-get install memcached)")
    port = free_port()
    cmd = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "16"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]  # memcached refuses to run as root otherwise
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)

    def up() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    wait_for(up, 10, what="memcached")
    return port, proc


_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def cluster_logs(root: str) -> str:
    """Every server and daemon log under `root` (<root>/logs/*.log), joined."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "logs", "*.log"))):
        with open(path, errors="replace") as f:
            out.append(f.read())
    return "\n".join(out)


def log_tracebacks(root: str, skip: Callable[[str], bool] = lambda excerpt: False
                   ) -> list[str]:
    """Each traceback in the logs under `root` (<root>/logs/*.log): the log line before it
    (which request) and its last lines (where and what), one excerpt per kind with how
    often it was seen. `skip(text)` (the file's name, the line before and the whole
    traceback) is True for one a test caused on purpose: left out."""
    seen: dict[str, list] = {}
    for path in sorted(glob.glob(os.path.join(root, "logs", "*.log"))):
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            if "Traceback" not in line:
                continue
            end = i + 1
            while end < len(lines) and not _LOG_LINE.match(lines[end]):
                end += 1
            tail = lines[max(i + 1, end - 12):end]
            kind = tail[-1] if tail else line
            where = f"{os.path.basename(path)}:{i + 1}:\n"
            if skip(where + "\n".join(lines[max(0, i - 1):end])):
                continue
            excerpt = where + "\n".join(lines[max(0, i - 1):i + 1] + ["  ..."] + tail)
            seen.setdefault(kind, [0, excerpt])[0] += 1
    return [f"({n}x) {excerpt}" for n, excerpt in seen.values()]


def bomb_png(side: int = 50_000) -> bytes:
    """A decompression bomb: a valid PNG header claiming side x side 1-bit pixels, with a
    tiny IDAT (~100 bytes on the wire, 312 MB as bits, 7.5 GB as RGB); never decoded by a
    correct guard."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + \
        chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + chunk(b"IEND", b"")
