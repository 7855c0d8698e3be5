"""Answers held in memory (the hot-object cache's), and the proxy's one guarded route."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict
from yarl import URL

from swiftlite.common.http import HTTPError
from swiftlite.common.runtime.server import make_app
from swiftlite.proxy.response import bytes_response

BODY = b"\x89PNG" + bytes(range(256)) * 64


async def _client(app: web.Application) -> TestClient:
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_a_body_in_memory_is_sent_whole_and_not_for_head():
    async def handler(request: web.Request) -> web.StreamResponse:
        return bytes_response(200, CIMultiDict({"Content-Type": "image/png"}), BODY)

    app = web.Application()
    app.router.add_route("*", "/o", handler)
    client = await _client(app)
    try:
        r = await client.get("/o")
        assert r.status == 200 and await r.read() == BODY
        assert r.headers["Content-Length"] == str(len(BODY))
        r = await client.head("/o")
        assert r.status == 200 and r.headers["Content-Length"] == str(len(BODY))
        assert await r.read() == b""
    finally:
        await client.close()


async def test_a_feature_may_read_a_body_in_memory_once():
    resp = bytes_response(200, {}, BODY)
    assert await resp.read() == BODY
    assert await resp.read() == b""  # read means consumed and closed, as for a stream


async def test_the_guarded_route_answers_health_errors_and_requests_without_middleware():
    async def route(request: web.Request) -> web.StreamResponse:
        if request.path == "/boom":
            raise RuntimeError("a bug")
        if request.path == "/refused":
            raise HTTPError(409, "Conflict")
        return web.Response(text=request.path)

    app = make_app(route=route)
    assert not app.middlewares  # aiohttp runs no middleware chain for the proxy
    client = await _client(app)
    try:
        r = await client.get("/healthcheck")
        assert r.status == 200 and await r.text() == "OK"
        r = await client.get(URL("/v1/a/c/o%0Anewline", encoded=True))
        assert r.status == 200 and await r.text() == "/v1/a/c/o\nnewline"
        assert r.headers["X-Trans-Id"]
        r = await client.get("/refused")
        assert r.status == 409 and r.headers["X-Trans-Id"]
        r = await client.get("/boom")
        txid = r.headers["X-Trans-Id"]
        assert r.status == 500 and txid in await r.text()
    finally:
        await client.close()
