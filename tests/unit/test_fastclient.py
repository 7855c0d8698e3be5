"""The lean backend HTTP client against a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from swiftlite.common.clients.fastclient import ClientError, ConnectError, Pool
from tests.helpers import free_port


@pytest.fixture
async def server():
    seen = {"peers": set(), "bodies": []}

    async def echo(request: web.Request) -> web.StreamResponse:
        seen["peers"].add(request.transport.get_extra_info("peername"))
        body = await request.read()
        seen["bodies"].append(body)
        mode = request.query.get("mode", "")
        if mode == "chunked":
            resp = web.StreamResponse(status=200)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(5):
                await resp.write(b"part%d-" % i * 1000)
            await resp.write_eof()
            return resp
        if mode == "empty":
            return web.Response(status=204)
        if mode == "slow":
            await asyncio.sleep(1)
        if mode == "close":
            return web.Response(body=b"bye", headers={"Connection": "close"})
        if mode == "meta":  # the header's bytes as received; echoed when it is UTF-8
            raw = request.headers["X-Meta"].encode("utf-8", "surrogateescape")
            echo = {"X-Meta": request.headers["X-Meta"]} if b"\xff" not in raw else {}
            return web.Response(body=raw, headers=echo)
        return web.Response(status=201, body=body or b"nobody",
                            headers={"X-Method": request.method,
                                     "X-Got-Length": str(len(body))})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port, seen
    await runner.cleanup()


async def test_bytes_body_and_keepalive(server):
    port, seen = server
    pool = Pool()
    for i in range(5):
        r = await pool.request("127.0.0.1", port, "PUT", "/a/b", {"X-T": "1"}, b"x" * (i * 50000))
        assert r.status == 201
        assert r.headers["X-Method"] == "PUT"
        body = await r.read()
        assert body == (b"x" * (i * 50000) or b"nobody")
    assert len(seen["peers"]) == 1  # one connection reused for all five
    await pool.close()


async def test_streamed_body_chunked_and_with_length(server):
    port, seen = server
    pool = Pool()

    async def gen():
        for i in range(4):
            yield b"%d" % i * 70000

    r = await pool.request("127.0.0.1", port, "PUT", "/s", {}, gen())
    assert r.status == 201 and int(r.headers["X-Got-Length"]) == 280000
    await r.read()
    r = await pool.request("127.0.0.1", port, "PUT", "/s", {"Content-Length": "280000"}, gen())
    assert (await r.read()) == b"".join([b"%d" % i * 70000 for i in range(4)])
    await pool.close()


async def test_chunked_response_head_and_204(server):
    port, _ = server
    pool = Pool()
    r = await pool.request("127.0.0.1", port, "GET", "/c?mode=chunked")
    chunks = [c async for c in r.iter_chunks()]
    assert b"".join(chunks) == b"".join(b"part%d-" % i * 1000 for i in range(5))
    r = await pool.request("127.0.0.1", port, "HEAD", "/h")
    assert r.status == 201 and (await r.read()) == b""
    r = await pool.request("127.0.0.1", port, "GET", "/e?mode=empty")
    assert r.status == 204 and (await r.read()) == b""
    # The connection survived all three and is reused.
    r = await pool.request("127.0.0.1", port, "GET", "/again")
    assert (await r.read()) == b"nobody"
    await pool.close()


async def test_half_read_response_is_not_reused(server):
    port, seen = server
    pool = Pool()
    r = await pool.request("127.0.0.1", port, "PUT", "/big", {}, b"y" * 1_000_000)
    first = await r.iter_chunks(1000).__anext__()
    assert first == b"y" * 1000
    r.release()  # not read whole: closed, never handed to the next request
    r = await pool.request("127.0.0.1", port, "GET", "/next")
    assert (await r.read()) == b"nobody"
    assert len(seen["peers"]) == 2
    await pool.close()


async def test_connection_close_and_stale_retry(server):
    port, seen = server
    pool = Pool()
    r = await pool.request("127.0.0.1", port, "GET", "/x?mode=close")
    assert (await r.read()) == b"bye"
    r = await pool.request("127.0.0.1", port, "GET", "/y")
    assert (await r.read()) == b"nobody"
    assert len(seen["peers"]) == 2
    await pool.close()


async def test_refused_and_timeout():
    pool = Pool(conn_timeout=0.5, node_timeout=0.3)
    with pytest.raises(ConnectError) as info:
        await pool.request("127.0.0.1", free_port(), "GET", "/")
    assert info.value.refused  # nothing listens: the node is down, not busy
    await pool.close()


async def test_connect_timeout_is_not_refused():
    """A server that does not accept in time (full accept queue) is busy, not down: the
    proxy must count it as an ordinary error, not error-limit it at once."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the accept queue (nobody accepts)
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fillers.append(c)
        pool = Pool(conn_timeout=0.3, node_timeout=0.3)
        with pytest.raises(ConnectError) as info:
            await pool.request("127.0.0.1", port, "GET", "/")
        assert not info.value.refused
        await pool.close()
    finally:
        for c in fillers:
            c.close()
        lsock.close()


async def test_read_timeout(server):
    port, _ = server
    pool = Pool(node_timeout=0.2)
    with pytest.raises(ClientError):
        await pool.request("127.0.0.1", port, "GET", "/z?mode=slow")
    await pool.close()


async def test_header_bytes_pass_through_unchanged(server):
    """Header values are str as aiohttp parsed them (UTF-8, surrogateescape): the client
    sends a server the same bytes, and reads UTF-8 answers back as the same str."""
    port, _ = server
    pool = Pool()
    for sent in ("日本語 한국어 😀".encode(), b"not utf-8 \xff\xfe"):
        value = sent.decode("utf-8", "surrogateescape")  # as the proxy's parser gave it
        r = await pool.request("127.0.0.1", port, "GET", "/?mode=meta", {"X-Meta": value})
        assert await r.read() == sent
        if b"\xff" not in sent:
            assert r.headers["X-Meta"] == value
    await pool.close()


async def test_large_body_parts_and_bytes_past_the_body():
    """A body read as the transport delivers it is exact, and bytes a server sends past its
    Content-Length are never taken for the body nor for the next response."""
    body = bytes(range(256)) * 16384  # 4 MiB, arrives in many reads
    peers = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"/junk" in head:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
                for i in range(0, len(body), 100_000):
                    writer.write(body[i:i + 100_000])
                    await writer.drain()
            await writer.drain()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pool = Pool()
    for _ in range(2):
        r = await pool.request("127.0.0.1", port, "GET", "/big")
        assert (await r.read()) == body
    assert len(peers) == 1  # read whole, so reused
    r = await pool.request("127.0.0.1", port, "GET", "/junk")
    assert (await r.read()) == b"hello"
    r = await pool.request("127.0.0.1", port, "GET", "/big")
    assert (await r.read()) == body
    assert len(peers) == 2  # the connection with stray bytes was not reused
    await pool.close()
    srv.close()
