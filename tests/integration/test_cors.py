"""CORS through a real `swiftlite up` proxy: preflights answered from the container's
Access-Control metadata, CORS headers on actual answers, and the operator's options
(`strict_cors_mode`, `cors_allow_origin`, `cors_expose_headers`) on a second proxy."""

from __future__ import annotations

import uuid

import aiohttp
import pytest
import swiftclient

from tests.helpers import start_proxy_variant
from tests.integration.test_proxy_api import raw, storage_path, token_and_url

ALLOWED = "DELETE, GET, POST, PUT, OPTIONS, HEAD"


def preflight(origin: str, method: str = "GET", headers: str | None = None) -> dict:
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return h


@pytest.fixture(scope="module")
def site(cluster):
    """A container open to two origins, with one object carrying user metadata."""
    url, token = token_and_url(cluster)
    base = storage_path(url)
    cont = f"cors-{uuid.uuid4().hex[:8]}"
    status, _, _ = raw(cluster, "PUT", f"{base}/{cont}", {
        "X-Auth-Token": token,
        "X-Container-Meta-Access-Control-Allow-Origin": "http://a.example http://b.example",
        "X-Container-Meta-Access-Control-Max-Age": "77",
        "X-Container-Meta-Access-Control-Expose-Headers": "X-Foo x-bar"})
    assert status == 201
    status, _, _ = raw(cluster, "PUT", f"{base}/{cont}/cat.jpg",
                       {"X-Auth-Token": token, "X-Object-Meta-Color": "red"}, b"meow")
    assert status == 201
    return base, cont, token


def test_preflight_for_an_allowed_origin(cluster, site):
    base, cont, _ = site
    status, h, body = raw(cluster, "OPTIONS", f"{base}/{cont}/cat.jpg",
                          preflight("http://a.example", "PUT", "x-auth-token, Content-Type"))
    assert status == 200 and body == b""
    assert h["Access-Control-Allow-Origin"] == "http://a.example"
    assert h["Access-Control-Max-Age"] == "77"
    # An object also allows COPY (the copy feature is in the pipeline).
    assert h["Access-Control-Allow-Methods"] == ALLOWED + ", COPY"
    assert h["Allow"] == ALLOWED + ", COPY"
    assert h["Access-Control-Allow-Headers"] == "x-auth-token, Content-Type"
    assert h["Vary"] == "Origin, Access-Control-Request-Headers"
    # A preflight is never given the actual answer's exposed headers.
    assert "Access-Control-Expose-Headers" not in h
    # The container itself: no COPY.
    status, h, _ = raw(cluster, "OPTIONS", f"{base}/{cont}", preflight("http://b.example"))
    assert status == 200 and h["Access-Control-Allow-Methods"] == ALLOWED
    assert h["Vary"] == "Origin" and "Access-Control-Allow-Headers" not in h


def test_preflight_refused(cluster, site):
    base, cont, _ = site
    path = f"{base}/{cont}/cat.jpg"
    for headers in (preflight("http://evil.example"),  # origin not listed
                    preflight("http://a.example", "PATCH"),  # method not allowed
                    {"Origin": "http://a.example"}):  # no Access-Control-Request-Method
        status, h, _ = raw(cluster, "OPTIONS", path, headers)
        assert status == 401, headers
        assert "Access-Control-Allow-Origin" not in h
        assert h["Allow"] == ALLOWED
    # A container that does not exist allows no origin.
    status, _, _ = raw(cluster, "OPTIONS", f"{base}/nope-{uuid.uuid4().hex}/x",
                       preflight("http://a.example"))
    assert status == 401


def test_options_that_are_not_preflights(cluster, site):
    base, cont, _ = site
    # No Origin: just what the resource allows, for anyone (no token needed).
    status, h, _ = raw(cluster, "OPTIONS", f"{base}/{cont}/cat.jpg")
    assert status == 200 and h["Allow"] == ALLOWED + ", COPY"
    # The account: CORS is per container, so Allow and nothing else, Origin or not.
    status, h, _ = raw(cluster, "OPTIONS", base, preflight("http://a.example"))
    assert status == 200 and h["Allow"] == ALLOWED
    assert "Access-Control-Allow-Origin" not in h
    # A bad token is refused, as by the auth everywhere else.
    status, h, _ = raw(cluster, "OPTIONS", f"{base}/{cont}/cat.jpg",
                       {"X-Auth-Token": "AUTH_tkbogus"})
    assert status == 401 and "WWW-Authenticate" in h


def test_actual_requests_carry_cors_headers(cluster, site):
    base, cont, token = site
    status, h, body = raw(cluster, "GET", f"{base}/{cont}/cat.jpg",
                          {"X-Auth-Token": token, "Origin": "http://b.example"})
    assert status == 200 and body == b"meow"
    assert h["Access-Control-Allow-Origin"] == "http://b.example"
    assert h["Vary"] == "Origin"
    exposed = h["Access-Control-Expose-Headers"].split(", ")
    for name in ("etag", "content-type", "last-modified", "x-timestamp", "x-trans-id",
                 "x-openstack-request-id", "x-object-meta-color", "x-foo", "x-bar"):
        assert name in exposed
    # Container requests too (a listing), and errors: the page can read a 401.
    status, h, _ = raw(cluster, "GET", f"{base}/{cont}",
                       {"X-Auth-Token": token, "Origin": "http://a.example"})
    assert status == 200 and h["Access-Control-Allow-Origin"] == "http://a.example"
    status, h, _ = raw(cluster, "GET", f"{base}/{cont}/cat.jpg", {"Origin": "http://a.example"})
    assert status == 401 and h["Access-Control-Allow-Origin"] == "http://a.example"
    # strict_cors_mode (the default): an origin the container does not list gets nothing.
    status, h, _ = raw(cluster, "GET", f"{base}/{cont}/cat.jpg",
                       {"X-Auth-Token": token, "Origin": "http://evil.example"})
    assert status == 200
    assert "Access-Control-Allow-Origin" not in h and "Access-Control-Expose-Headers" not in h
    # No Origin, or an account request: no CORS headers.
    status, h, _ = raw(cluster, "GET", f"{base}/{cont}/cat.jpg", {"X-Auth-Token": token})
    assert "Access-Control-Allow-Origin" not in h
    status, h, _ = raw(cluster, "HEAD", base, {"X-Auth-Token": token,
                                               "Origin": "http://a.example"})
    assert status == 204 and "Access-Control-Allow-Origin" not in h


async def test_browser_upload_flow(cluster):
    """What a page uploading an image does: preflight the PUT, then PUT with its Origin."""
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"uploads-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont, headers={"X-Container-Meta-Access-Control-Allow-Origin": "*"})
    origin = "https://app.example"
    async with aiohttp.ClientSession() as s:
        async with s.options(f"{url}/{cont}/me.png", headers=preflight(
                origin, "PUT", "x-auth-token, content-type")) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "*"
            assert "PUT" in r.headers["Access-Control-Allow-Methods"].split(", ")
            assert "Vary" in r.headers and "Origin" not in r.headers["Vary"]
        async with s.put(f"{url}/{cont}/me.png", data=b"\x89PNG...", headers={
                "X-Auth-Token": token, "Origin": origin, "Content-Type": "image/png"}) as r:
            assert r.status == 201
            assert r.headers["Access-Control-Allow-Origin"] == "*"
            assert "etag" in r.headers["Access-Control-Expose-Headers"].split(", ")
    assert conn.get_object(cont, "me.png")[1] == b"\x89PNG..."


@pytest.fixture(scope="module")
def lax_proxy(cluster):
    """A second proxy on the same cluster with the operator's CORS options set."""
    proc = start_proxy_variant(
        cluster, "cors", {"strict_cors_mode": "false"},
        {"cors": {"cors_allow_origin": "http://ops.example, http://ops2.example",
                  "cors_expose_headers": "X-Ops-One, x-ops-two"}})
    yield f"http://127.0.0.1:{proc.port}"
    proc.stop()


async def test_operator_options(cluster, site, lax_proxy):
    base, cont, token = site
    async with aiohttp.ClientSession() as s:
        # cors_allow_origin: allowed for every container, even one with no CORS metadata.
        plain = f"{base}/plain-{uuid.uuid4().hex[:8]}"
        async with s.put(lax_proxy + plain, headers={"X-Auth-Token": token}) as r:
            assert r.status == 201
        async with s.options(lax_proxy + plain + "/x",
                             headers=preflight("http://ops2.example")) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "http://ops2.example"
        async with s.options(lax_proxy + plain + "/x",
                             headers=preflight("http://a.example")) as r:
            assert r.status == 401
        # Not strict: any origin is echoed on actual answers, with the operator's headers.
        async with s.get(f"{lax_proxy}{base}/{cont}/cat.jpg", headers={
                "X-Auth-Token": token, "Origin": "http://evil.example"}) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "http://evil.example"
            exposed = r.headers["Access-Control-Expose-Headers"].split(", ")
            assert "x-ops-one" in exposed and "x-ops-two" in exposed
        async with s.get(lax_proxy + "/info") as r:
            assert (await r.json())["swift"]["strict_cors_mode"] is False
    async with aiohttp.ClientSession() as s, s.get(cluster.proxy_url + "/info") as r:
        assert (await r.json())["swift"]["strict_cors_mode"] is True


async def test_info_answers_options_and_preflights(cluster, lax_proxy):
    """OPTIONS /info is a 200 with Allow, as Swift answers it; a page of another origin may
    preflight and read /info where the operator's cors_allow_origin names it."""
    status, h, _ = raw(cluster, "OPTIONS", "/info")
    assert status == 200 and h["Allow"] == "GET, HEAD, OPTIONS"
    # No container speaks for /info: the default proxy allows no origin.
    status, h, _ = raw(cluster, "OPTIONS", "/info", preflight("http://a.example"))
    assert status == 401 and "Access-Control-Allow-Origin" not in h
    assert raw(cluster, "POST", "/info")[0] == 405
    async with aiohttp.ClientSession() as s:
        async with s.options(lax_proxy + "/info", headers=preflight("http://ops.example")) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "http://ops.example"
            assert r.headers["Access-Control-Allow-Methods"] == "GET, HEAD, OPTIONS"
        async with s.options(lax_proxy + "/info",
                             headers=preflight("http://ops.example", "PUT")) as r:
            assert r.status == 401
        async with s.get(lax_proxy + "/info", headers={"Origin": "http://ops.example"}) as r:
            assert r.status == 200 and "swift" in await r.json()
            assert r.headers["Access-Control-Allow-Origin"] == "http://ops.example"
