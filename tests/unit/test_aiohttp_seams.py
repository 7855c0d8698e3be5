"""The seams the servers use in aiohttp (swiftlite/common/runtime/aiohttp_seams.py), each
checked against the installed aiohttp on a real server on loopback: an aiohttp upgrade that
moves one fails here, by name."""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path

import pytest
from aiohttp import web, web_protocol, web_response

from swiftlite.common.runtime import aiohttp_seams, lenient_parser

ROOT = Path(__file__).resolve().parents[2]


def test_every_library_whose_internals_we_touch_is_pinned_from_above():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name in ("aiohttp", "prometheus_client"):
        spec = next(d for d in deps if re.match(rf"{name}\b", d))
        assert "<" in spec, spec


async def _serve(handler):
    server = web.Server(handler)
    runner = web.ServerRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, server, port


async def _get_once(port: int) -> bytes:
    """The head of the answer to one GET / on a connection of its own."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    try:
        return await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()


async def _until(check, timeout=5.0):
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_connections_and_whether_one_is_in_a_request():
    inside = asyncio.Event()
    release = asyncio.Event()

    async def handler(request):
        inside.set()
        await release.wait()
        return web.Response(text="ok")

    runner, server, port = await _serve(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await _until(lambda: len(aiohttp_seams.connections(server)) == 1)
        (conn,) = aiohttp_seams.connections(server)
        assert isinstance(conn, web_protocol.RequestHandler)
        assert not aiohttp_seams.in_request(conn)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await inside.wait()
        assert aiohttp_seams.in_request(conn)
        assert not aiohttp_seams.reading_paused(conn)
        assert hasattr(conn, "_reading_paused")  # the flag exists: False is not "unknown"
        release.set()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        await reader.readexactly(2)
        await _until(lambda: aiohttp_seams.waiting_for_request(conn))
        assert not aiohttp_seams.in_request(conn)

        # One connection's next request answered by another handler, only that connection's.
        async def refuse(request):
            return web.Response(status=503, text="busy")

        aiohttp_seams.answer_next_with(conn, refuse)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503")
        writer.close()
        assert (await _get_once(port)).startswith(b"HTTP/1.1 200")
    finally:
        await runner.cleanup()


@pytest.fixture
def restore_module_globals():
    parser = web_protocol.HttpRequestParser
    remove = web_response.should_remove_content_length
    yield
    web_protocol.HttpRequestParser = parser
    web_response.should_remove_content_length = remove


async def test_the_request_parser_and_204_lengths(restore_module_globals):
    async def handler(request):
        return web.Response(status=204)

    aiohttp_seams.use_request_parser(lenient_parser.LenientRequestParser)
    assert web_protocol.HttpRequestParser is lenient_parser.LenientRequestParser
    aiohttp_seams.keep_content_length_on_204()
    runner, _server, port = await _serve(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        assert head.startswith(b"http/1.1 204")
        assert b"\r\ncontent-length: 0\r\n" in head
        writer.close()
    finally:
        await runner.cleanup()


async def test_request_state_is_the_requests_mapping_and_its_clones_copy_it():
    seen = {}

    async def handler(request):
        state = aiohttp_seams.request_state(request)
        assert isinstance(state, dict) and state == dict(request)
        state["swiftlite.test"] = 1
        assert request.get("swiftlite.test") == 1  # one store, two faces
        request["swiftlite.other"] = 2
        assert state["swiftlite.other"] == 2
        sub = request.clone(rel_url="/other")
        aiohttp_seams.request_state(sub)["swiftlite.test"] = 3
        seen["parent"], seen["clone"] = request["swiftlite.test"], sub["swiftlite.test"]
        return web.Response(text="ok")

    runner, _server, port = await _serve(handler)
    try:
        assert (await _get_once(port)).startswith(b"HTTP/1.1 200")
    finally:
        await runner.cleanup()
    assert seen == {"parent": 1, "clone": 3}  # a clone's keys are its own copy
