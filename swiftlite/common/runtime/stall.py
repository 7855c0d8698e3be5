"""Stalled clients lose their request: every server's `client_timeout`.

A client that stops sending a request body, or stops reading an answer, would otherwise pin
what the request holds (a proxy's backend connections, an object server's temp file and
thread-pool slot) for as long as it likes. aiohttp has no such timeout, so one sweep per
process watches, every fraction of the timeout:

- requests whose body is not complete: no new byte for `client_timeout` (while the server
  was ready to read: reading paused because *we* are slow is not the client's fault) makes
  the body's next read raise `ClientStalled`, answered 408 on a closed connection;
- connections whose answer is blocked on the client (writing paused, the send buffer not
  shrinking) for `client_timeout` are aborted.

Waiting on backends is not a stall: the node timeouts bound that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from swiftlite.common.runtime import aiohttp_seams

log = logging.getLogger("swiftlite.stall")


class ClientStalled(TimeoutError):
    """The request body stopped arriving for longer than client_timeout.

    A TimeoutError: once the request is answered (408), aiohttp reads what is left of its
    body before it would reuse the connection, meets this again, and takes it for its own
    lingering timeout (the connection is closed). Any other kind it logged as an unhandled
    exception, with a traceback, for every stalled upload."""


class StallGuard:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        # id(request) -> (request, [bytes seen, since]); requests are unhashable mappings.
        self._bodies: dict[int, tuple[web.BaseRequest, list[float]]] = {}
        self._writes: dict[Any, list[float]] = {}  # handler -> [send buffer size, since]

    def track(self, request: web.BaseRequest) -> None:
        if not request.content.is_eof():
            self._bodies[id(request)] = (request, [request.content.total_bytes,
                                                   time.monotonic()])

    def untrack(self, request: web.BaseRequest) -> None:
        self._bodies.pop(id(request), None)

    def sweep(self, connections: list[Any], now: float) -> None:
        for request, state in list(self._bodies.values()):
            content = request.content
            if content.is_eof() or content.exception() is not None:
                continue
            seen = content.total_bytes
            # aiohttp pauses reading when the handler has not consumed what arrived: then
            # the client cannot send, and the wait is ours.
            ours = aiohttp_seams.reading_paused(request.protocol)
            if seen != state[0] or ours:
                state[0], state[1] = seen, now
            elif now - state[1] >= self.timeout:
                log.warning("%s %s: no body bytes for %.0fs, giving up on the client",
                            request.method, request.raw_path[:200], self.timeout)
                content.set_exception(ClientStalled())
        live = {}
        for conn in connections:
            transport = getattr(conn, "transport", None)
            if transport is None or not conn.writing_paused:
                continue
            size = transport.get_write_buffer_size()
            state = self._writes.get(conn)
            if state is None or size < state[0]:
                state = [size, now]
            elif now - state[1] >= self.timeout:
                peer = transport.get_extra_info("peername")
                log.warning("closing the connection of %s: it read nothing for %.0fs",
                            peer, self.timeout)
                transport.abort()
                continue
            live[conn] = state
        self._writes = live

    async def run(self, server: web.Server) -> None:
        interval = max(0.05, min(1.0, self.timeout / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep(server.connections, time.monotonic())
            except Exception:  # the guard must outlive any one odd connection
                log.exception("stall sweep failed")


_guard: StallGuard | None = None


def install(guard: StallGuard | None) -> None:
    """The process's guard (one server per process); None in in-process test apps."""
    global _guard
    _guard = guard


def current() -> StallGuard | None:
    return _guard
