"""A lean HTTP/1.1 client for server-to-server calls, on a plain asyncio Protocol.

Why not aiohttp's client: a replicated PUT makes about six backend requests, and aiohttp's
client machinery costs a few hundred microseconds of CPU each, a large slice of the ~5 ms
budget for the whole write. Backends are our own servers, so this client speaks only the
HTTP/1.1 they speak: Content-Length or chunked bodies, keep-alive, no redirects, no cookies,
no TLS, no compression.

    pool = Pool(conn_timeout=0.5, node_timeout=10)
    resp = await pool.request("127.0.0.1", 6200, "PUT", "/d1/5/a/c/o", headers, body)
    data = await resp.read()                  # or: async for chunk in resp.iter_chunks()
    resp.release()                            # (read() releases by itself)

`body` is bytes, None, or an async iterator of bytes (sent chunked unless the headers carry
Content-Length). A connection goes back to the pool only when its response was read whole;
anything else closes it, so a half-read response can never leak into the next request.
"""

from __future__ import annotations

import asyncio
import collections
import errno
from collections.abc import AsyncIterator
from typing import Any

from multidict import CIMultiDict

from swiftlite.common import signing

MAX_HEAD = 64 * 1024
_SIG_LOWER = signing.HEADER.lower()
_REFUSED = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL)
# This process (or host) ran out of something: no node is at fault.
_LOCAL = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ClientError(Exception):
    """The node could not be reached or broke the protocol (treat like a network error)."""


class ConnectError(ClientError):
    """Nothing was sent: the node refused or did not accept the connection in time.

    `refused` is true when the node is certainly not serving (connection refused, no route):
    a timeout may only mean the node, or this process, is busy. `local` is true when this
    process could not even try (out of file descriptors, say): the node is not at fault."""

    def __init__(self, msg: str, refused: bool = False, local: bool = False) -> None:
        super().__init__(msg)
        self.refused = refused
        self.local = local


class _Conn(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        # Body bytes exactly as the transport gave them, while a Content-Length body is being
        # read and `buf` is empty: handed on without being copied into `buf` and out again
        # (for a 1 MiB GET those copies were a third of the proxy's CPU).
        self.parts: collections.deque[bytes] = collections.deque()
        self.direct = False
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self.exc: BaseException | None = None
        self._drain: asyncio.Future | None = None
        self._paused = False

    # -- protocol callbacks
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.direct and not self.buf:
            self.parts.append(data)
        else:
            self.buf += data
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.exc = exc
        self._wake()
        d = self._drain
        if d is not None and not d.done():
            d.set_exception(ClientError(f"connection lost: {exc!r}"))

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        d = self._drain
        if d is not None and not d.done():
            d.set_result(None)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    # -- helpers used by the client
    async def wait_data(self, timeout: float) -> None:
        if self.closed:
            raise ClientError(f"connection closed by peer ({self.exc!r})")
        self.waiter = self.loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await self.waiter
        except TimeoutError:
            raise ClientError("timed out waiting for the node") from None
        finally:
            self.waiter = None

    async def drain(self, timeout: float) -> None:
        """Wait until the node takes more of the body; a node that stops reading for
        `timeout` (hung, or its disk is) fails the request instead of pinning it."""
        if self.closed:
            raise ClientError("connection closed while sending")
        if self._paused:
            self._drain = self.loop.create_future()
            try:
                async with asyncio.timeout(timeout):
                    await self._drain
            except TimeoutError:
                raise ClientError("timed out sending to the node") from None
            finally:
                self._drain = None

    @property
    def idle_clean(self) -> bool:
        """Nothing unread: the connection can carry the next request."""
        return not self.closed and not self.buf and not self.parts

    def end_direct(self) -> None:
        """Leave body mode; bytes past the body (none from our servers) go back to `buf`."""
        self.direct = False
        if self.parts:
            self.buf += b"".join(self.parts)
            self.parts.clear()

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _take(buf: bytearray, n: int) -> bytes:
    """The first `n` bytes of `buf`, removed from it: one copy (`bytes(buf[:n])` made two,
    and the first body bytes arrive in `buf` with the headers, up to 256 KiB)."""
    if n == len(buf):
        data = bytes(buf)
        buf.clear()
        return data
    with memoryview(buf) as view:
        data = view[:n].tobytes()
    del buf[:n]
    return data


class Response:
    """Status and headers at once; the body is read on demand."""

    def __init__(self, pool: Pool, key: tuple[str, int], conn: _Conn, status: int, reason: str,
                 headers: CIMultiDict, method: str, timeout: float) -> None:
        self._pool = pool
        self._key = key
        self._conn: _Conn | None = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self._timeout = timeout
        te = headers.get("Transfer-Encoding", "").lower()
        self._chunked = "chunked" in te
        length = headers.get("Content-Length")
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._remaining: int | None = 0
            self._chunked = False
        elif self._chunked:
            self._remaining = None
        elif length is not None:
            try:
                self._remaining = int(length)
            except ValueError:
                raise ClientError(f"bad Content-Length {length!r}") from None
        else:
            self._remaining = -1  # until EOF, then the connection cannot be reused
        self._keep_alive = headers.get("Connection", "").lower() != "close" and \
            self._remaining != -1
        self._done = self._remaining == 0 and not self._chunked
        if self._done:
            self.release()
        elif self._remaining is not None and self._remaining > 0:
            conn.direct = True

    async def iter_chunks(self, max_size: int = 256 * 1024) -> AsyncIterator[bytes]:
        try:
            while True:
                chunk = await self._next_chunk(max_size)
                if chunk is None:
                    return
                yield chunk
        except BaseException:
            self.release()
            raise

    async def read(self) -> bytes:
        parts = []
        async for chunk in self.iter_chunks():
            parts.append(chunk)
        return b"".join(parts)

    async def _next_chunk(self, max_size: int) -> bytes | None:
        conn = self._conn
        if self._done or conn is None:
            return None
        if self._chunked:
            return await self._next_chunked(conn)
        buf = conn.buf
        if self._remaining == -1:  # read to EOF
            while not buf and not conn.closed:
                await conn.wait_data(self._timeout)
            if not buf:
                self._finish()
                return None
            data = bytes(buf)
            buf.clear()
            return data
        assert self._remaining is not None
        parts = conn.parts
        while not buf and not parts:
            await conn.wait_data(self._timeout)
        if buf:
            n = min(len(buf), self._remaining, max_size)
            data = _take(buf, n)
        else:  # as received, uncopied (uvloop reads at most 256 KiB at a time)
            data = parts.popleft()
            n = len(data)
            if n > self._remaining:  # never from our servers: the rest is not this body's
                parts.appendleft(data[self._remaining:])
                data = data[:self._remaining]
                n = len(data)
        self._remaining -= n
        if self._remaining == 0:
            conn.end_direct()
            self._finish()
        return data

    async def _next_chunked(self, conn: _Conn) -> bytes | None:
        buf = conn.buf
        while True:
            if self._remaining:  # inside a chunk
                while not buf:
                    await conn.wait_data(self._timeout)
                n = min(len(buf), self._remaining)
                data = _take(buf, n)
                self._remaining -= n
                return data
            if self._remaining == 0:  # expect CRLF closing the previous chunk
                while len(buf) < 2:
                    await conn.wait_data(self._timeout)
                if buf[:2] != b"\r\n":
                    raise ClientError("bad chunked encoding")
                del buf[:2]
                self._remaining = None
            idx = buf.find(b"\r\n")
            while idx < 0:
                if len(buf) > 1024:
                    raise ClientError("bad chunk size line")
                await conn.wait_data(self._timeout)
                idx = buf.find(b"\r\n")
            try:
                size = int(bytes(buf[:idx]).split(b";", 1)[0], 16)
            except ValueError:
                raise ClientError("bad chunk size") from None
            del buf[: idx + 2]
            if size == 0:
                # Trailers (none from our servers) end with an empty line.
                while True:
                    idx = buf.find(b"\r\n")
                    while idx < 0:
                        await conn.wait_data(self._timeout)
                        idx = buf.find(b"\r\n")
                    line = bytes(buf[:idx])
                    del buf[: idx + 2]
                    if not line:
                        break
                self._finish()
                return None
            self._remaining = size

    def _finish(self) -> None:
        self._done = True
        self.release()

    def release(self) -> None:
        """Give the connection back if the body was read whole, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep_alive and conn.idle_clean:
            self._pool._put_back(self._key, conn)
        else:
            conn.close()


class Pool:
    def __init__(self, conn_timeout: float = 0.5, node_timeout: float = 10.0,
                 max_idle_per_host: int = 32, signer: signing.Signer | None = None) -> None:
        # Every request is signed (storage servers refuse unsigned ones): the given signer,
        # else the process-wide one configured at startup.
        self.signer = signer or signing.current()
        self.conn_timeout = conn_timeout
        self.node_timeout = node_timeout
        self.max_idle = max_idle_per_host
        self._idle: dict[tuple[str, int], collections.deque[_Conn]] = {}
        self._closed = False

    def _put_back(self, key: tuple[str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(key, collections.deque())
        if self._closed or len(idle) >= self.max_idle:
            conn.close()
        else:
            idle.append(conn)

    async def _get(self, key: tuple[str, int]) -> tuple[_Conn, bool]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.idle_clean:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.conn_timeout):
                _, conn = await loop.create_connection(lambda: _Conn(loop), key[0], key[1])
        except (OSError, TimeoutError) as exc:
            code = exc.errno if isinstance(exc, OSError) else None
            raise ConnectError(f"connect to {key[0]}:{key[1]} failed: {exc!r}",
                               code in _REFUSED, code in _LOCAL) from None
        return conn, False

    async def request(self, ip: str, port: int, method: str, path: str,
                      headers: dict[str, str] | None = None, body: Any = None,
                      timeout: float | None = None) -> Response:
        """Send one request; returns once the response head has arrived."""
        key = (ip, port)
        timeout = self.node_timeout if timeout is None else timeout
        for attempt in (0, 1):
            conn, reused = await self._get(key)
            try:
                return await self._exchange(conn, key, method, path, headers or {}, body,
                                            timeout)
            except _StaleConnection:
                conn.close()
                # Only a body we still hold can be sent again.
                if attempt or not reused or not isinstance(body, (bytes, type(None))):
                    raise ClientError("connection closed before the response") from None
            except BaseException:
                conn.close()
                raise
        raise ClientError("unreachable")

    async def _exchange(self, conn: _Conn, key: tuple[str, int], method: str, path: str,
                        headers: dict[str, str], body: Any, timeout: float) -> Response:
        host = f"[{key[0]}]:{key[1]}" if ":" in key[0] else f"{key[0]}:{key[1]}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
        has_length = False
        x_timestamp = None
        for k, v in headers.items():
            lk = k.lower()
            if lk == "content-length":
                has_length = True
            elif lk == "x-timestamp":
                x_timestamp = v
            elif lk == _SIG_LOWER:
                continue  # only ours: a client's copied header must not ride along
            lines.append(f"{k}: {v}")
        if self.signer is not None:
            lines.append(f"{signing.HEADER}: {self.signer.sign(method, path, x_timestamp)}")
        streaming = body is not None and not isinstance(body, (bytes, bytearray, memoryview))
        if body is not None and not streaming and not has_length:
            lines.append(f"Content-Length: {len(body)}")
        elif streaming and not has_length:
            lines.append("Transfer-Encoding: chunked")
        elif body is None and method in ("PUT", "POST") and not has_length:
            lines.append("Content-Length: 0")
        # Header values are str as aiohttp parsed them (UTF-8, surrogateescape for bytes
        # that are not): encoding the same way sends the client's bytes on unchanged.
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
        if streaming:
            conn.write(head)
            async for chunk in body:
                if not chunk:
                    continue
                if has_length:
                    conn.write(chunk)
                else:
                    conn.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                await conn.drain(timeout)
            if not has_length:
                conn.write(b"0\r\n\r\n")
        elif body:
            conn.write(head + body if len(body) < 16384 else head)
            if len(body) >= 16384:
                conn.write(body)
        else:
            conn.write(head)
        return await self._read_head(conn, key, method, timeout)

    async def _read_head(self, conn: _Conn, key: tuple[str, int], method: str,
                         timeout: float) -> Response:
        buf = conn.buf
        while True:
            idx = buf.find(b"\r\n\r\n")
            if idx >= 0:
                break
            if len(buf) > MAX_HEAD:
                raise ClientError("response head too large")
            if conn.closed and not buf:
                raise _StaleConnection()
            await conn.wait_data(timeout)
        head = bytes(buf[:idx]).decode("utf-8", "surrogateescape")  # as aiohttp's parser
        del buf[: idx + 4]
        status_line, _, rest = head.partition("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ClientError(f"bad status line {status_line[:80]!r}")
        try:
            status = int(parts[1])
        except ValueError:
            raise ClientError(f"bad status line {status_line[:80]!r}") from None
        headers: CIMultiDict = CIMultiDict()
        for line in rest.split("\r\n") if rest else ():
            k, sep, v = line.partition(":")
            if sep:
                headers.add(k.strip(), v.strip())
        if status == 100:  # a stray 100 Continue: the real head follows
            return await self._read_head(conn, key, method, timeout)
        return Response(self, key, conn, status, parts[2] if len(parts) > 2 else "", headers,
                        method, timeout)

    async def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()


class _StaleConnection(Exception):
    """A pooled connection the server had closed while idle: retry once on a fresh one."""
