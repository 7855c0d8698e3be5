"""A cap on the client connections of each server process: `max_clients`.

Every connection holds a file descriptor, and a server needs descriptors of its own: the
proxy for its connections to the storage servers and its local reads, a storage server for
object files and DBs. Without a cap, a client holding thousands of connections (idle, or
sending its headers a byte at a time until `keepalive_timeout`) runs the process out of
them. Its backend connects then fail for every tenant (never counted against a node: see
`fastclient.ConnectError.local`).

At the cap, a new connection takes the place of the oldest one with no request in progress
(an idle keep-alive, or one still sending its request head), so a client that holds
connections open without using them loses them first. When every connection has a request
in progress, the newcomer's request is answered 503 and the connection closed (an answer
written before the request is read could be lost to a TCP reset); one that sends no request
within REFUSED_GRACE seconds is closed. Either is counted in
`swiftlite_client_connections_shed_total`; a warning is logged at most once a minute.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from swiftlite.common.log_throttle import LogThrottle
from swiftlite.common.observe import metrics
from swiftlite.common.runtime import aiohttp_seams

log = logging.getLogger("swiftlite.server")

REFUSED_GRACE = 5.0
_WARN_EVERY = 60.0


async def _refuse(request: web.BaseRequest) -> web.StreamResponse:
    """The answer to every request on a connection over the cap."""
    resp = web.Response(status=503, text="Too many connections; try again",
                        headers={"Retry-After": "1"})
    resp.force_close()
    return resp


class ConnectionCap:
    """Keeps an aiohttp `web.Server`'s open connections at `limit` or fewer (0: no cap)."""

    def __init__(self, server: Any, limit: int) -> None:
        self.server = server
        self.limit = limit
        self._closing: set[Any] = set()  # shed, not yet gone from the server's table
        self._warn_log = LogThrottle(_WARN_EVERY)
        self.evicted = 0
        self.refused = 0

    def install(self) -> None:
        if self.limit <= 0:
            return
        made, lost = self.server.connection_made, self.server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            made(handler, transport)
            self._admit(handler)

        def connection_lost(handler: Any, exc: BaseException | None) -> None:
            self._closing.discard(handler)
            lost(handler, exc)

        # The handlers call these through the server instance (aiohttp's RequestHandler
        # keeps it as its manager), so instance attributes take their place.
        self.server.connection_made = connection_made
        self.server.connection_lost = connection_lost

    def _admit(self, handler: Any) -> None:
        conns = aiohttp_seams.connections(self.server)  # oldest first
        if len(conns) - len(self._closing) <= self.limit:
            return  # (an upper bound: a closed connection leaves the table a little later)
        live = [h for h in conns if h.transport is not None and h not in self._closing]
        if len(live) <= self.limit:
            return
        for other in live:
            if other is not handler and not aiohttp_seams.in_request(other):
                self._shed(other, "evicted")
                other.force_close()
                return
        self._shed(handler, "refused")
        aiohttp_seams.answer_next_with(handler, _refuse)
        asyncio.get_running_loop().call_later(REFUSED_GRACE, self._drop, handler)

    def _drop(self, handler: Any) -> None:
        if handler in self._closing:  # still there: it sent no (whole) request in time
            handler.force_close()

    def _shed(self, handler: Any, how: str) -> None:
        self._closing.add(handler)
        if how == "evicted":
            self.evicted += 1
        else:
            self.refused += 1
        metrics.tally("connections_shed", how)
        if self._warn_log.due():
            log.warning("max_clients (%d) reached: connections shed so far: %d idle closed, "
                        "%d refused with 503", self.limit, self.evicted, self.refused)
