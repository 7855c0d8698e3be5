"""Local reads: a proxy on the same host as object servers reads their files itself.

On a node running the proxy and its object servers together (the all-in-one cluster, a
Swift-style "PACO" node), a GET's body otherwise crosses a loopback socket twice and costs an
object server its HTTP parsing and a Python-level copy per chunk. With `local_object_devices`
the proxy opens a replica on one of those servers' devices in its own thread pool and answers
exactly what that server would (the same `obj.read_plan`): the same headers, conditions,
ranges, tombstones and expiry, and the same integrity promise. A body read whole is checked
before it is used, a corrupt copy is quarantined (as the auditor does, under the same locks)
and the next replica is read; a streamed body is checked before its last byte leaves, and its
response is cut short if it fails.

Only reads are local. A device that is missing or unmounted, or any error opening the files,
sends the read to the object server over HTTP, which answers and is judged as always; replicas
on other hosts are always read over HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from multidict import CIMultiDict

from swiftlite.common.devices import DeviceChecker
from swiftlite.common.hashing import hash_path
from swiftlite.common.http import ERROR_CONTENT_TYPE, HTTPError, error_body
from swiftlite.common.observe import metrics
from swiftlite.common.threadpool import run_blocking, submit
from swiftlite.obj.engine import (
    CorruptCopy,
    DeviceMissing,
    ObjectInfo,
    ReadPlan,
    Verifier,
    open_object,
    plan_read,
    quarantine,
    read_chunk,
    span_chunks,
)

log = logging.getLogger("swiftlite.proxy")


async def _bounded(fut: asyncio.Future, timeout: float) -> Any:
    """The pool job's result, or TimeoutError after `timeout`: a hung disk must not hang
    the request. A job that finishes after we stopped waiting (a timeout, the request
    cancelled) has what it opened closed.

    One waiter and one timer: `wait_for(shield(fut))` made two more futures and a task
    callback per read, about a tenth of the proxy's event-loop time on 64 KiB GETs."""
    if not fut.done():
        waiter = fut.get_loop().create_future()

        def wake(_: Any = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        fut.add_done_callback(wake)
        timer = fut.get_loop().call_later(timeout, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            fut.remove_done_callback(wake)
            if not fut.done():  # timed out, or cancelled while waiting
                fut.add_done_callback(_close_late)
        if not fut.done():
            raise TimeoutError
    return fut.result()


def _close_late(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is None:
        result = fut.result()
        if isinstance(result, ObjectInfo):
            result.close()


def parse_local_devices(value: str) -> dict[tuple[str, int], str]:
    """`ip:port=devices_dir` entries, comma or space separated (`[::1]:6200=/srv/node` for
    IPv6): the object servers whose devices this host can read, and where they are."""
    out: dict[tuple[str, int], str] = {}
    for entry in value.replace(",", " ").split():
        server, sep, path = entry.partition("=")
        host, _, port = server.rpartition(":")
        if not sep or not path or not host or not port.isdigit():
            raise ValueError(f"local_object_devices: {entry!r} is not ip:port=path")
        out[(host.strip("[]"), int(port))] = path
    return out


class LocalResponse:
    """A local replica's answer, read like a backend response (fastclient.Response)."""

    def __init__(self, plan: ReadPlan, info: ObjectInfo, where: tuple[str, int, str],
                 chunk: int, timeout: float) -> None:
        self.status = plan.status
        self.reason = plan.reason or ""
        headers = CIMultiDict(plan.headers)
        if plan.reason is not None:  # framed as common.http.error frames it
            body = error_body(plan.reason)
            headers["Content-Type"] = ERROR_CONTENT_TYPE
            self._pieces: list[Any] = [body]
            headers["Content-Length"] = str(len(body))
        else:
            self._pieces = plan.pieces
            headers["Content-Length"] = str(plan.length)
        self.headers = headers
        self._info = info
        self._verify = plan.verify
        self._where = where
        self._chunk = chunk
        self._timeout = timeout

    async def iter_chunks(self, max_size: int = 0) -> AsyncIterator[bytes]:
        fd = self._info.fd
        verifier = Verifier(self._info.metadata) if self._verify else None

        def read(off: int, length: int) -> Awaitable[bytes]:
            return _bounded(submit(read_chunk, fd, off, length, verifier),
                            self._timeout)

        for piece in self._pieces:
            if isinstance(piece, bytes):
                yield piece
                continue
            try:
                async for data in span_chunks(read, *piece, self._chunk, verifier):
                    yield data
            except CorruptCopy:  # an OSError: the proxy cuts the client's response short
                await _quarantine(*self._where)
                raise

    async def read(self) -> bytes:
        return b"".join([c async for c in self.iter_chunks()])

    def whole(self) -> bytes | None:
        """The body when it is all in memory already (a small object read whole, checked
        against its sums when opened, or an error's text), else None: such a body needs no
        iterator (two async generators per read, each registered with the event loop)."""
        pieces = self._pieces
        if len(pieces) == 1 and type(pieces[0]) is bytes:
            return pieces[0]
        if all(type(p) is bytes for p in pieces):  # empty (a HEAD), or a multi-range's
            return b"".join(pieces)
        return None

    def release(self) -> None:
        self._info.close()


async def _quarantine(dev_path: str, part: int, hexhash: str) -> None:
    log.error("ETag mismatch on a local read, quarantining %s/objects/%s/%s",
              dev_path, part, hexhash)
    await run_blocking(quarantine, dev_path, part, hexhash)


class LocalReads:
    def __init__(self, devices: dict[tuple[str, int], str], mount_check: bool,
                 chunk: int, open_timeout: float, read_timeout: float,
                 suppress: float) -> None:
        self.checkers = {server: DeviceChecker(path, mount_check)
                         for server, path in devices.items()}
        self.chunk = chunk
        # A device slower than open_timeout to open a replica, or failing to, is read
        # through its server (node_timeout, error limiting, hedging) for `suppress` seconds.
        self.open_timeout = open_timeout
        self.read_timeout = read_timeout
        self.suppress = suppress
        self.slow: dict[tuple[str, int, str], float] = {}

    def _avoid(self, key: tuple[str, int, str], why: str) -> None:
        log.warning("local read of %s: reading %s:%s/%s through its server for %ds", why,
                    *key, self.suppress)
        self.slow[key] = time.monotonic() + self.suppress

    async def open(self, node: dict[str, Any], method: str, part: int, names: tuple[str, str, str],
                   headers: dict[str, str]) -> LocalResponse | None:
        """The replica on `node` read here; None when it is not local or cannot be read here
        (the caller then asks its object server)."""
        checker = self.checkers.get((node["ip"], node["port"]))
        if checker is None or method not in ("GET", "HEAD"):
            return None
        key = (node["ip"], node["port"], node["device"])
        if self.slow and self.slow.get(key, 0) > time.monotonic():
            return None
        try:
            dev_path = await checker.check(node["device"])
        except HTTPError:
            return None  # missing or unmounted: its server answers 507 and is judged
        hexhash = hash_path(*names)
        is_get = method == "GET"
        req = CIMultiDict(headers)
        full = is_get and "Range" not in req
        try:
            info = await _bounded(submit(open_object, dev_path, part, hexhash,
                                         self.chunk if is_get else 0, full),
                                  self.open_timeout)
        except TimeoutError:
            self._avoid(key, f"{node['device']}/{part}/{hexhash} took over "
                             f"{self.open_timeout:.1f}s")
            return None
        except (OSError, DeviceMissing) as exc:
            # No access, a failing disk: its server answers (and is judged), and this
            # device is not tried here again for a while (one log line, not one per read).
            self._avoid(key, f"{node['device']}/{part}/{hexhash} failed: {exc!r}")
            return None
        plan = plan_read(req, info, is_get, full)
        if plan.corrupt:
            await _quarantine(dev_path, part, hexhash)
        metrics.replica_read(node, "local")
        return LocalResponse(plan, info, (dev_path, part, hexhash), self.chunk,
                             self.read_timeout)
