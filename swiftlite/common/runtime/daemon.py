"""What every background daemon shares: the pass loop, pacing, local devices, status files.

A daemon is one coroutine `run_pass(stats)` called once (`--once`) or every `interval`
seconds. After each pass `<status_dir>/<daemon>.json` records its start, duration and
counters (partitions/objects examined, synced, failures...), which `swiftlite status` prints.
Pacing is a token bucket on objects/s and bytes/s, so background I/O never starves clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import uvloop

from swiftlite.common import threadpool
from swiftlite.common.clients.client import make_session
from swiftlite.common.config import Section, load_sections
from swiftlite.common.devices import status_dir
from swiftlite.common.fsutil import atomic_write

log = logging.getLogger("swiftlite.daemon")


class Pacer:
    """Token buckets on objects/s and bytes/s (0 = unlimited); `pace` sleeps off any debt."""

    def __init__(self, objects_per_second: float = 0.0, bytes_per_second: float = 0.0,
                 burst_seconds: float = 1.0) -> None:
        self.ops = objects_per_second
        self.bps = bytes_per_second
        self.burst = burst_seconds
        now = time.monotonic()
        self._obj_tokens = objects_per_second * burst_seconds
        self._byte_tokens = bytes_per_second * burst_seconds
        self._last = now
        self.slept = 0.0

    def _refill(self) -> None:
        now = time.monotonic()
        dt = now - self._last
        self._last = now
        if self.ops:
            self._obj_tokens = min(self.ops * self.burst, self._obj_tokens + dt * self.ops)
        if self.bps:
            self._byte_tokens = min(self.bps * self.burst, self._byte_tokens + dt * self.bps)

    def delay_for(self, objects: int = 1, nbytes: int = 0) -> float:
        """Take the tokens for this much work; return how long to wait to pay for it."""
        self._refill()
        wait = 0.0
        if self.ops and objects:
            self._obj_tokens -= objects
            if self._obj_tokens < 0:
                wait = max(wait, -self._obj_tokens / self.ops)
        if self.bps and nbytes:
            self._byte_tokens -= nbytes
            if self._byte_tokens < 0:
                wait = max(wait, -self._byte_tokens / self.bps)
        return wait

    async def pace(self, objects: int = 1, nbytes: int = 0) -> None:
        wait = self.delay_for(objects, nbytes)
        if wait > 0:
            self.slept += wait
            await asyncio.sleep(wait)


class PeerSession:
    """Mixin for daemons that talk to peers: one aiohttp session from setup to teardown.

    The daemon sets `conn_timeout` and `node_timeout` (from its config) before setup runs.
    """

    conn_timeout: float
    node_timeout: float
    limit_per_host = 64  # connections per peer

    session: aiohttp.ClientSession | None = None

    async def setup(self) -> None:
        self.session = make_session(self.conn_timeout, self.node_timeout,
                                    limit_per_host=self.limit_per_host)

    async def teardown(self) -> None:
        if self.session is not None:
            await self.session.close()


def new_stats() -> dict[str, Any]:
    return {"partitions": 0, "objects": 0, "synced": 0, "failures": 0}


def write_status(conf: Section, daemon: str, status: dict[str, Any]) -> str:
    """Atomically replace `<status_dir>/<daemon>.json`."""
    d = status_dir(conf)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{daemon}.json")
    atomic_write(path, json.dumps({"daemon": daemon, **status}).encode(), fsync=False)
    return path


def read_status(conf: Section, daemon: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(status_dir(conf), f"{daemon}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def server_section(conf: Section, role: str) -> Section:
    """The [<role>-server] section of the daemon's own config file (bind_ip, bind_port)."""
    path = conf.get("__file__")
    if path:
        try:
            sections = load_sections(path)
        except FileNotFoundError:
            sections = {}
        if f"{role}-server" in sections:
            return sections[f"{role}-server"]
    return Section(conf)


def server_address(conf: Section, role: str) -> tuple[str, int]:
    """(bind_ip, bind_port) of this node's <role> server: whose ring devices are local.

    Daemons pass it to `Ring.devices_on`; the ring is not imported here (daemon plumbing is
    shared by everything, the ring only by what places data)."""
    srv = server_section(conf, role)
    return srv.get_str("bind_ip", "127.0.0.1"), srv.get_int("bind_port", 0)


PassFn = Callable[[dict[str, Any]], Awaitable[None]]


async def _until_stopped(work: Awaitable[None], stop: asyncio.Event, grace: float) -> bool:
    """Run `work`; once `stop` is set, give it `grace` seconds, then cancel it. True if it
    finished; its exceptions propagate."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait((task,), timeout=grace)
        if not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            return False
        task.result()
        return True
    finally:
        stopped.cancel()
        if not task.done():  # we were cancelled ourselves
            task.cancel()


async def run_loop(conf: Section, daemon: str, run_pass: PassFn, once: bool,
                   setup: Callable[[], Awaitable[None]] | None = None,
                   teardown: Callable[[], Awaitable[None]] | None = None) -> int:
    """Call `run_pass(stats)` once or every `interval` s until SIGTERM; record each pass."""
    interval = conf.get_float("interval", 30.0)
    # After SIGTERM a pass gets this long to finish on its own, then it is cancelled.
    stop_grace = conf.get_float("stop_grace", 1.0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if not once:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    if setup is not None:
        await setup()
    failed_passes = 0
    try:
        while True:
            stats = new_stats()
            start = time.time()
            t0 = time.monotonic()
            log.info("%s pass starting", daemon)
            # The last pass's status, marked running: a long pass (a paced audit) is not
            # mistaken for a dead daemon by `swiftlite status --cluster`.
            last = read_status(conf, daemon) or {}
            last.pop("daemon", None)
            try:
                write_status(conf, daemon, {**last, "pid": os.getpid(),
                                            "running_since": round(start, 3)})
            except OSError:
                log.exception("%s: cannot write status", daemon)
            try:
                if not await _until_stopped(run_pass(stats), stop, stop_grace):
                    # SIGTERM mid-pass: every pass is resumable, so a long one (an audit
                    # paced to a few files a second) must not hold the stop up.
                    stats["interrupted"] = True
            except Exception:
                log.exception("%s pass failed", daemon)
                stats["failures"] += 1
                stats["error"] = "pass aborted"
                failed_passes += 1
            duration = time.monotonic() - t0
            status = {"start": round(start, 3), "duration": round(duration, 3),
                      "pid": os.getpid(), **stats}
            try:
                write_status(conf, daemon, status)
            except OSError:
                log.exception("%s: cannot write status", daemon)
            log.info("%s pass done in %.2fs: %s", daemon, duration,
                     " ".join(f"{k}={v}" for k, v in stats.items()))
            if once:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, interval - duration)):
                    await stop.wait()
            if stop.is_set():
                break
    finally:
        if teardown is not None:
            await teardown()
    return 1 if once and failed_passes else 0


def run(conf: Section, daemon: str, run_pass: PassFn, once: bool,
        setup: Callable[[], Awaitable[None]] | None = None,
        teardown: Callable[[], Awaitable[None]] | None = None) -> int:
    """Entry point body for `swiftlite daemon NAME`: the loop on uvloop with a thread pool."""
    threadpool.configure(conf.get_int("io_threads", 4))
    return uvloop.run(run_loop(conf, daemon, run_pass, once, setup, teardown))
