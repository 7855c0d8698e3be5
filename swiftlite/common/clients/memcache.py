"""A small asyncio memcached client (text protocol): gets/add/cas/set/delete over pooled
connections, with timeouts, failing open.

Failing open: a server that cannot be reached, times out or answers nonsense makes a read
return None (a miss) and a write return False, after logging; the caller then asks the
storage servers, and a client request never fails because of the cache. A server that just
failed is skipped by reads and fills (get, gets, add, cas) for `retry_interval` seconds, so a
dead memcached does not add a connect timeout to every request; set and delete (used for
invalidations) always try, as they are rare and a skipped one could leave another host
reading a stale entry.

Keys go to servers by rendezvous hashing: adding or removing a server moves only its share.

Lookups (`gets`, the one command on every proxy request, and `lookup`) go over one
pipelined connection per server (`_Pipe`): a batch is written as soon as it is formed,
without waiting for the answers to the batches before it, and answers are matched to
batches in order. The other commands are rare and use the pooled connections.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from swiftlite.common.log_throttle import LogThrottle

log = logging.getLogger("swiftlite.memcache")
T = TypeVar("T")
MAX_KEY = 250
MAX_KEYS_PER_GETS = 16  # keeps a command line well inside what memcached reads at once
# Bytes a key may not hold: control characters, space, DEL. A regex scans in C: checking
# byte by byte in Python was about 3% of a proxy serving cached objects.
_BAD_KEY_BYTE = re.compile(rb"[\x00-\x20\x7f]")


class MemcacheError(Exception):
    """A protocol or server error (the connection is not reused)."""


def parse_servers(value: str | list[str]) -> list[tuple[str, int]]:
    """"10.0.0.1:11211, [::1]:11211, host" -> [(host, port), ...] (port 11211 by default)."""
    items = value if isinstance(value, list) else value.replace("\n", ",").split(",")
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else 11211
        elif item.count(":") == 1:
            host, port_s = item.split(":")
            port = int(port_s)
        else:
            host, port = item, 11211
        out.append((host, port))
    return out


def check_key(key: str) -> bytes:
    raw = key.encode()
    if not raw or len(raw) > MAX_KEY or _BAD_KEY_BYTE.search(raw):
        raise ValueError(f"invalid memcached key {key!r}")
    return raw


class _Server:
    def __init__(self, host: str, port: int, max_idle: int) -> None:
        self.host, self.port = host, port
        self.max_idle = max_idle
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.down_until = 0.0
        self.weight_seed = f"{host}:{port}".encode()
        self.pipe: _Pipe | None = None

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()
        if self.pipe is not None:
            self.pipe.fail(None)
            self.pipe = None


# A batch on a pipe: its keys, who waits for them, and when it gives up (monotonic).
_Sent = tuple[list[bytes], dict[bytes, list], float]
# What a lookup's waiter hears when its server failed (a miss is None).
FAILED = object()


class _Pipe(asyncio.Protocol):
    """One connection for `gets` batches, pipelined. A round trip through the pooled
    connections (a task, a timeout scope, stream reads) cost a proxy about as much loop time
    as the rest of a cached GET; here a batch is one write, and its answer is parsed where
    it arrives. Any failure (a timeout, nonsense, the connection lost) answers every batch
    waiting on this connection with misses and closes it; the next batch opens a new one."""

    def __init__(self, client: MemcacheClient, server: _Server) -> None:
        self.client, self.server = client, server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.outbox: list[bytes] = []  # written once connected
        self.sent: deque[_Sent] = deque()
        self.found: dict[bytes, tuple[bytes, int]] = {}  # the head batch's answers so far
        self.buf = bytearray()
        self.dead = False
        self.watchdog: asyncio.TimerHandle | None = None
        self.connecting = self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        try:
            async with asyncio.timeout(self.client.connect_timeout):
                await self.loop.create_connection(lambda: self, self.server.host,
                                                  self.server.port)
        except (OSError, TimeoutError) as exc:
            self.fail(exc)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.dead:  # gave up while connecting
            transport.close()
            return
        if self.outbox:
            self.transport.write(b"".join(self.outbox))
            self.outbox.clear()

    def send(self, keys: list[bytes], waiters: dict[bytes, list]) -> None:
        cmd = b"gets " + b" ".join(keys) + b"\r\n"
        self.sent.append((keys, waiters, self.loop.time() + self.client.io_timeout))
        if self.watchdog is None:
            self.watchdog = self.loop.call_at(self.sent[0][2], self._check)
        if self.transport is not None:
            self.transport.write(cmd)
        else:
            self.outbox.append(cmd)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        try:
            while self.sent:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                if end - pos == 3 and buf[pos:end] == b"END":
                    pos = end + 2
                    keys, waiters, _ = self.sent.popleft()
                    _answer(keys, waiters, self.found)
                    self.found = {}
                    continue
                parts = bytes(buf[pos:end]).split()
                if len(parts) != 5 or parts[0] != b"VALUE" or \
                        parts[1] not in self.sent[0][0]:
                    raise MemcacheError(f"gets: {bytes(buf[pos:pos + 100])!r}")
                size, unique = int(parts[3]), int(parts[4])
                if len(buf) < end + 2 + size + 2:
                    break  # the value is still on its way
                if buf[end + 2 + size:end + 4 + size] != b"\r\n":
                    raise MemcacheError("gets: malformed value")
                self.found[parts[1]] = (bytes(buf[end + 2:end + 2 + size]), unique)
                pos = end + 4 + size
            if not self.sent and pos < len(buf):
                raise MemcacheError(f"unasked-for bytes: {bytes(buf[pos:pos + 100])!r}")
        except (MemcacheError, ValueError) as exc:
            self.fail(exc)
            return
        del buf[:pos]

    def _check(self) -> None:
        # One timer per pipe, not one per batch: it waits for the oldest batch's deadline.
        self.watchdog = None
        if self.dead or not self.sent:
            return
        if self.loop.time() >= self.sent[0][2]:
            self.fail(TimeoutError())
        else:
            self.watchdog = self.loop.call_at(self.sent[0][2], self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(exc or ConnectionResetError("memcached closed the connection"))

    def fail(self, exc: BaseException | None) -> None:
        """Every waiting batch hears a miss; the connection is not used again."""
        if self.dead:
            return
        self.dead = True
        if self.server.pipe is self:
            self.server.pipe = None
        if self.transport is not None:
            self.transport.abort()
        if self.connecting is not asyncio.current_task():
            self.connecting.cancel()
        if self.watchdog is not None:
            self.watchdog.cancel()
        while self.sent:
            keys, waiters, _ = self.sent.popleft()
            _answer(keys, waiters, None)
        if exc is not None:
            self.server.down_until = time.monotonic() + self.client.retry_interval
            self.client._warn(self.server, exc)


def _answer(keys: list[bytes], waiters: dict[bytes, list],
            found: dict[bytes, tuple[bytes, int]] | None) -> None:
    """Each waiter hears its key's (value, cas unique), None for a miss, or FAILED (found
    None: the server failed)."""
    for k in keys:
        for fut in waiters[k]:
            if not fut.done():
                fut.set_result(FAILED if found is None else found.get(k))


class MemcacheClient:
    def __init__(self, servers: list[tuple[str, int]], connect_timeout: float = 0.3,
                 io_timeout: float = 0.5, max_idle: int = 32,
                 retry_interval: float = 1.0) -> None:
        if not servers:
            raise ValueError("no memcached servers")
        self.servers = [_Server(h, p, max_idle) for h, p in servers]
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.retry_interval = retry_interval
        self._warn_log = LogThrottle(10.0)  # one line per 10 s, not one per request
        self._batch: tuple[asyncio.AbstractEventLoop, dict[bytes, list]] | None = None

    def server_for(self, key: bytes) -> _Server:
        if len(self.servers) == 1:
            return self.servers[0]
        return max(self.servers, key=lambda s: hashlib.md5(s.weight_seed + key).digest())

    async def close(self) -> None:
        for s in self.servers:
            s.close()

    # ---- commands (never raise for server or network trouble) ---------------------------

    async def gets(self, key: str) -> tuple[bytes, int] | None:
        """(value, cas unique), or None for a miss or any failure.

        Lookups asked for in one pass of the event loop share one round trip per server
        (`gets k1 k2 ...`, each key once): a proxy under load looks up the same container's
        info for most requests, and a round trip each was a fifth of the time it spent on a
        cached object. A lookup only joins a command not yet sent, so what it reads is never
        older than the moment it was asked.
        """
        k = check_key(key)
        loop = asyncio.get_running_loop()
        batch = self._batch
        if batch is None or batch[0] is not loop:
            batch = self._batch = (loop, {})
            loop.call_soon(self._send_batch, batch)
        fut = loop.create_future()
        batch[1].setdefault(k, []).append(fut)
        hit = await fut
        return None if hit is FAILED else hit

    async def get(self, key: str) -> bytes | None:
        hit = await self.gets(key)
        return hit[0] if hit else None

    async def lookup(self, key: str) -> tuple[bool, bytes | None]:
        """(answered, value): a miss (True, None) told apart from a failure (False, None)."""
        k = check_key(key)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        # Always tried, even on a server that just failed: a caller that must tell a miss
        # from a failure (the write log) asks rarely.
        self._pipe(self.server_for(k), loop).send([k], {k: [fut]})
        hit = await fut
        if hit is FAILED:
            return False, None
        return True, (hit[0] if hit else None)

    async def append(self, key: str, value: bytes, ttl: float) -> bool:
        """Appended to the key's value, which is created if absent (`ttl` applies then)."""
        for _ in range(3):  # append misses an absent key; add loses to a racing add
            if await self._store(b"append", key, value, ttl, always=True):
                return True
            if await self._store(b"add", key, value, ttl, always=True):
                return True
        return False

    async def set(self, key: str, value: bytes, ttl: float) -> bool:
        return await self._store(b"set", key, value, ttl, always=True)

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """Stored only if the key is absent."""
        return await self._store(b"add", key, value, ttl)

    async def cas(self, key: str, value: bytes, unique: int, ttl: float) -> bool:
        """Stored only if the key still holds the item `gets` returned `unique` for."""
        return await self._store(b"cas", key, value, ttl, unique=unique)

    async def delete(self, key: str) -> bool:
        """True when the key is gone (deleted or absent); False when unknown."""
        k = check_key(key)

        async def run(reader, writer) -> bool:
            writer.write(b"delete " + k + b"\r\n")
            line = await reader.readline()
            if line in (b"DELETED\r\n", b"NOT_FOUND\r\n"):
                return True
            raise MemcacheError(f"delete: {line!r}")

        return await self._call(k, run, False, always=True)

    # ---- plumbing -----------------------------------------------------------------------

    async def _store(self, cmd: bytes, key: str, value: bytes, ttl: float,
                     unique: int | None = None, always: bool = False) -> bool:
        k = check_key(key)
        # Relative expiry in whole seconds; 0 would mean "never expires".
        exptime = max(1, int(ttl + 0.999))
        head = b"%s %s 0 %d %d" % (cmd, k, exptime, len(value))
        if unique is not None:
            head += b" %d" % unique

        async def run(reader, writer) -> bool:
            writer.write(b"".join((head, b"\r\n", value, b"\r\n")))
            line = await reader.readline()
            if line == b"STORED\r\n":
                return True
            if line in (b"NOT_STORED\r\n", b"EXISTS\r\n", b"NOT_FOUND\r\n"):
                return False
            raise MemcacheError(f"{cmd.decode()}: {line!r}")

        return await self._call(k, run, False, always)

    def _send_batch(self, batch: tuple[asyncio.AbstractEventLoop, dict[bytes, list]]) -> None:
        if self._batch is batch:
            self._batch = None
        by_server: dict[int, tuple[_Server, list[bytes]]] = {}
        for k in batch[1]:
            server = self.server_for(k)
            by_server.setdefault(id(server), (server, []))[1].append(k)
        now = time.monotonic()
        for server, keys in by_server.values():
            if server.down_until > now:
                _answer(keys, batch[1], None)  # just failed: a miss without waiting
                continue
            pipe = self._pipe(server, batch[0])
            for i in range(0, len(keys), MAX_KEYS_PER_GETS):
                pipe.send(keys[i:i + MAX_KEYS_PER_GETS], batch[1])

    def _pipe(self, server: _Server, loop: asyncio.AbstractEventLoop) -> _Pipe:
        pipe = server.pipe
        if pipe is None or pipe.dead or pipe.loop is not loop:  # (a loop since gone)
            pipe = server.pipe = _Pipe(self, server)
        return pipe

    async def _call(self, key: bytes,
                    run: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[T]],
                    failed: T, always: bool = False) -> T:
        server = self.server_for(key)
        if not always and server.down_until > time.monotonic():
            return failed
        conn = None
        try:
            if server.idle:
                conn = server.idle.pop()
            else:
                async with asyncio.timeout(self.connect_timeout):
                    conn = await asyncio.open_connection(server.host, server.port)
            async with asyncio.timeout(self.io_timeout):
                result = await run(*conn)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError,
                MemcacheError) as exc:
            if conn is not None:
                conn[1].close()
            server.down_until = time.monotonic() + self.retry_interval
            self._warn(server, exc)
            return failed
        except BaseException:  # cancelled mid-command: the stream state is unknown
            if conn is not None:
                conn[1].close()
            raise
        if len(server.idle) < server.max_idle:
            server.idle.append(conn)
        else:
            conn[1].close()
        return result

    def _warn(self, server: _Server, exc: BaseException) -> None:
        if self._warn_log.due():
            log.warning("memcached %s:%d failed (%r); serving without the cache",
                        server.host, server.port, exc)
