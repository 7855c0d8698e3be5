"""Responses the pipeline hands back before anything is sent.

`BodyResponse` carries an object body as an async iterator (a backend's stream, or segments
one after another): aiohttp sends it when the handler chain returns, and until then a
middleware may change its headers, wrap its iterator, or read it itself and `close()` it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from multidict import CIMultiDict

log = logging.getLogger("swiftlite.proxy")
HEADERS_WITH_BODY = 256 * 1024  # bodies up to this size go out in one write with the headers


class BodyCutShort(Exception):
    """The body's source failed mid-stream: the client must see a short response."""


class BodyResponse(web.StreamResponse):
    def __init__(self, status: int, headers: CIMultiDict | dict | None = None,
                 body: AsyncIterator[bytes] | None = None, length: int | None = None,
                 on_close: Callable[[], None] | None = None, data: bytes | None = None) -> None:
        super().__init__(status=status, headers=headers)
        self.body_iter = body
        # A body already in memory (the hot-object cache's): sent with the headers in one
        # write, without an iterator's steps (about 5% of a cache hit's time).
        self._data = data
        self._on_close = on_close
        if length is not None:
            self.content_length = length
        # A small body's status line and headers go out with its first chunk, in one write:
        # a separate write for them was about 8% of a proxy serving small cached objects.
        # (aiohttp's own `web.Response` does the same.) A big body keeps aiohttp's way,
        # headers first: one more write is nothing there.
        self._send_headers_immediately = length is None or length > HEADERS_WITH_BODY

    def close(self) -> None:
        """Release what feeds the body (a backend connection); safe to call twice."""
        cb, self._on_close = self._on_close, None
        self.body_iter = None
        self._data = None
        if cb is not None:
            cb()

    async def chunks(self) -> AsyncIterator[bytes]:
        """Read the body here instead of sending it (closes when done)."""
        try:
            if self._data is not None:
                yield self._data
            elif self.body_iter is not None:
                async for chunk in self.body_iter:
                    # bytes for a reader; only the socket gets views (an EC GET's)
                    yield bytes(chunk) if type(chunk) is memoryview else chunk
        finally:
            self.close()

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    async def write_eof(self, data: bytes = b"") -> None:
        req = self._req
        sends = req is not None and req.method != "HEAD" and self.status not in (204, 304)
        held, body = self._data, self.body_iter
        try:
            if sends and held is not None:
                data = held + data if data else held  # with the headers, in one write
            elif sends and body is not None:
                assert req is not None
                try:
                    async for chunk in body:
                        await self.write(chunk)
                except BodyCutShort as exc:
                    # Never let a cut body look complete: drop the connection.
                    log.warning("body of %s cut short: %s", req.path, exc)
                    if req.transport is not None:
                        req.transport.abort()
                    raise ConnectionResetError("body cut short") from None
        finally:
            self.close()
        await super().write_eof(data)


async def _chain(lead: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if lead:
        yield lead
    async for chunk in rest:
        yield chunk


async def after_first_chunk(status: int, headers: CIMultiDict | dict,
                            body: AsyncIterator[bytes],
                            length: int | None = None) -> BodyResponse:
    """A BodyResponse whose headers wait for the first chunk of `body` (an async generator):
    a job that finishes quickly is over when the client sees its status (as in Swift, where
    nothing is sent before the first chunk), and a failure before any byte (BodyCutShort)
    raises here, while the caller can still answer with an error status."""
    try:
        lead = await anext(body)
    except StopAsyncIteration:
        lead = b""
    except BaseException:
        await body.aclose()  # type: ignore[attr-defined]
        raise
    chain = _chain(lead, body)

    def on_close() -> None:
        # Done or dropped: release what is being read (a backend connection).
        async def close_all() -> None:
            await chain.aclose()
            await body.aclose()  # type: ignore[attr-defined]
        asyncio.ensure_future(close_all())
    return BodyResponse(status, headers, chain, length, on_close=on_close)


def bytes_response(status: int, headers: CIMultiDict | dict, data: bytes) -> BodyResponse:
    """A body already in memory as a BodyResponse, so features that read bodies (copy) can."""
    return BodyResponse(status, headers, None, len(data), data=data)


def close_answer(resp: web.StreamResponse) -> None:
    """Let go of a sub-request's answer that is not passed on (its body unread): a
    BodyResponse holds a replica's connection until closed."""
    if isinstance(resp, BodyResponse):
        resp.close()


async def answer_body(resp: web.StreamResponse) -> bytes:
    """A sub-request's whole answer body, held or streamed."""
    if isinstance(resp, BodyResponse):
        return await resp.read()
    body = getattr(resp, "body", None)
    return body if isinstance(body, bytes) else b""
