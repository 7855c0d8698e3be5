"""The servers' request parser (swiftlite/common/runtime/lenient_parser.py) against a real aiohttp
server on loopback, in this process: exact bytes in, exact bytes out.

Its adaptations reach into aiohttp's Python parser; these tests pin them to the installed
aiohttp. A request is sent in two parts (head, then body) only once the handler has the
head, so the body's bytes reach the parser on their own."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from aiohttp import web

from swiftlite.common.observe import logs
from swiftlite.common.runtime import lenient_parser
from swiftlite.common.runtime.server import make_app
from tests.helpers import free_port

THUMB = "👍".encode()
META = b"X-Object-Meta-" + THUMB
CHUNKED = b"Transfer-Encoding: chunked"
DEADLINE = 3.0  # an answer (and the close) arrives at once, or the test fails here
BROKEN_BODIES = {
    "not hex": b"zz\r\nabc\r\n0\r\n\r\n",
    "negative": b"-5\r\nabc\r\n0\r\n\r\n",
    "past 64 bits": b"1" + b"0" * 19 + b"\r\nabc",
    "no CRLF after the data": b"3\r\nabcXY3\r\nabc\r\n0\r\n\r\n",
    "size line too long": b"3\r\nabc\r\n" + b"f" * 20000 + b"\r\nx",
}


class Server:
    def __init__(self) -> None:
        self.port = 0
        self.started = asyncio.Event()  # a handler has its request (the head is parsed)
        self.seen: list[dict] = []
        self.errors: list[BaseException] = []

    async def route(self, request: web.Request) -> web.StreamResponse:
        # Which parser read this request: the C one, or lenient_parser's Python one.
        parser = type(request.protocol._parser._impl).__name__
        self.seen.append({"method": request.method, "parser": parser,
                          "names": [k for k, _ in request.raw_headers]})
        self.started.set()
        if request.path == "/early":  # answers without reading the body
            return web.Response(status=401)
        try:
            body = await request.read()
        except BaseException as exc:
            self.errors.append(exc)
            raise
        resp = web.Response(status=201, body=body, headers={"X-Method": request.method})
        for name, value in request.headers.items():
            if name.lower().startswith("x-object-meta-"):
                resp.headers[name] = value
        return resp


@pytest.fixture(autouse=True)
def _server_logging():
    logs.quiet_client_faults()  # as in every server process (logs.setup_logging)


@pytest.fixture
async def server():
    srv = Server()
    runner = web.AppRunner(make_app(route=srv.route), access_log=None)
    await runner.setup()
    srv.port = free_port()
    await web.TCPSite(runner, "127.0.0.1", srv.port).start()
    yield srv
    await runner.cleanup()


def head(method: bytes = b"PUT", path: bytes = b"/o", *lines: bytes) -> bytes:
    return method + b" " + path + b" HTTP/1.1\r\nHost: t\r\n" + b"".join(
        line + b"\r\n" for line in lines) + b"\r\n"


async def exchange(srv: Server, first: bytes, then: bytes | None = None) -> tuple[bytes, bool]:
    """Send `first` (then `then`, once a handler has its request); everything the server
    sends back until it closes (True) or DEADLINE passes (False)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    srv.started.clear()
    try:
        writer.write(first)
        if then is not None:
            async with asyncio.timeout(DEADLINE):
                await srv.started.wait()
            writer.write(then)
        out = b""
        try:
            async with asyncio.timeout(DEADLINE):
                while data := await reader.read(65536):
                    out += data
            return out, True
        except TimeoutError:
            return out, False
    finally:
        writer.close()


def statuses(out: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", out)]


def no_tracebacks(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_methods_reach_the_handler_exactly_as_sent(server):
    for method in (b"get", b"Get", b"pUT", b"head", b"LICK", b"GET"):
        out, _ = await exchange(server, head(method, b"/o", b"Connection: close"))
        assert b"\r\nX-Method: " + method + b"\r\n" in out, out
    assert server.seen[-1]["parser"] == "HttpRequestParser"


async def test_utf8_header_names_pass_and_come_back_as_sent(server, caplog):
    out, _ = await exchange(
        server, head(b"PUT", b"/o", META + b": " + THUMB, b"Content-Length: 2") + b"hi",
        head(b"PUT", b"/o", b"Content-Length: 2", b"Connection: close") + b"ho")
    assert statuses(out) == [201, 201], out
    first = out.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert first[-1] == META + b": " + THUMB  # after every other header (gh-81274)
    assert META in server.seen[0]["names"]
    # The C parser is back for the next request on the connection.
    assert server.seen[1]["parser"] == "HttpRequestParser"
    no_tracebacks(caplog)


@pytest.mark.parametrize("name", [
    b"X-Object-Meta-a b", b"X-Object-Meta-a\x00b", b"X-Object-Meta-a\rb",
    b"X-Object-Meta-a\x7f", b"X-Object-Meta-a\tb", b"X-Object-Meta-(a)",
    META + b"\x01", META + b" ", META + b"\x7f", b"X-Object-Meta-a\x80 b"])
async def test_other_bytes_in_header_names_are_refused(server, caplog, name):
    out, closed = await exchange(server, head(b"PUT", b"/o", name + b": v",
                                              b"Content-Length: 1") + b"x")
    assert statuses(out) == [400] and closed
    assert not server.seen
    no_tracebacks(caplog)


@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "body-apart"])
@pytest.mark.parametrize("utf8", [False, True], ids=["c-parser", "python-parser"])
@pytest.mark.parametrize("kind", BROKEN_BODIES)
async def test_broken_chunked_body_is_400_at_once_and_closes(server, caplog, kind, split,
                                                             utf8):
    first = head(b"PUT", b"/o", CHUNKED, *([META + b": " + THUMB] if utf8 else []))
    body = BROKEN_BODIES[kind]
    out, closed = await exchange(server, first if split else first + body,
                                 body if split else None)
    assert statuses(out) == [400], out
    assert b"malformed body" in out and b"Connection: close" in out
    assert closed
    assert [type(e) for e in server.errors] == [lenient_parser.MalformedBody]
    no_tracebacks(caplog)


async def test_body_breaking_after_the_answer_closes_quietly(server, caplog):
    """The handler answered without reading the body; aiohttp drains it, then it breaks."""
    out, closed = await exchange(server, head(b"PUT", b"/early", CHUNKED),
                                 b"3\r\nabc\r\nzz\r\n")
    assert statuses(out) == [401] and closed
    no_tracebacks(caplog)


async def test_good_chunked_bodies_on_one_connection(server):
    body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
    both = head(b"PUT", b"/a", META + b": x", CHUNKED) + body + head(b"PUT", b"/b", CHUNKED) + body
    last = head(b"PUT", b"/c", CHUNKED, b"Connection: close") + body
    out, closed = await exchange(server, both, last)  # two pipelined, then one more
    assert statuses(out) == [201, 201, 201] and closed
    assert out.count(b"hello world") == 3
    assert server.seen[-1]["parser"] == "HttpRequestParser"


async def test_requests_pipelined_after_one_the_c_parser_refused(server):
    get = head(b"GET", b"/x", META + b": " + THUMB) + head(b"GET", b"/y")
    out, closed = await exchange(server, get + head(b"GET", b"/z", b"Connection: close"))
    assert statuses(out) == [201, 201, 201] and closed
