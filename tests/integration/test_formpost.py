"""FormPOST through a real `swiftlite up` proxy: a browser-style multipart form (aiohttp's
FormData, fields before files as browsers send them) uploads files under a signed prefix,
with redirect, max_file_count, max_file_size and x_delete_after; bad or expired signatures
are 401 and store nothing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
import urllib.parse
import uuid

import aiohttp
import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from tests.integration.test_proxy_api import token_and_url

KEY = "form-key"


@pytest.fixture(scope="module")
def env(cluster):
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    conn.post_account({"X-Account-Meta-Temp-URL-Key": KEY})
    cont = f"fp-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont)
    return conn, cont, url


def form(path: str, files: list[tuple[str, bytes]], redirect: str = "",
         max_size: int = 1024, max_count: int = 10, expires: int | None = None,
         key: str = KEY, extra: dict[str, str] | None = None) -> aiohttp.FormData:
    expires = int(time.time()) + 60 if expires is None else expires
    sig = hmac.new(key.encode(), f"{path}\n{redirect}\n{max_size}\n{max_count}\n{expires}"
                   .encode(), hashlib.sha256).hexdigest()
    data = aiohttp.FormData()
    for name, value in (("redirect", redirect), ("max_file_size", str(max_size)),
                        ("max_file_count", str(max_count)), ("expires", str(expires)),
                        ("signature", sig), *(extra or {}).items()):
        data.add_field(name, value)
    for name, body in files:
        data.add_field("file", body, filename=name, content_type="image/png")
    return data


def post(url: str, data: aiohttp.FormData) -> tuple[int, dict[str, str], bytes]:
    async def go():
        async with aiohttp.ClientSession() as s, \
                s.post(url, data=data, allow_redirects=False) as resp:
            return resp.status, dict(resp.headers), await resp.read()
    return asyncio.run(go())


def names(conn, cont: str, prefix: str) -> list[str]:
    return [o["name"] for o in conn.get_container(cont, prefix=prefix)[1]]


def test_browser_form_uploads_files_under_prefix(env):
    conn, cont, url = env
    path = urllib.parse.urlsplit(url).path + f"/{cont}/user1/"
    files = [("a.png", b"\x89PNG one"), ("b.png", b"\x89PNG two")]
    status, _, body = post(url + f"/{cont}/user1/",
                           form(path, files, extra={"x_delete_after": "3600"}))
    assert (status, body) == (201, b"201 Created")
    assert names(conn, cont, "user1/") == ["user1/a.png", "user1/b.png"]
    headers, data = conn.get_object(cont, "user1/b.png")
    assert data == b"\x89PNG two" and headers["content-type"] == "image/png"
    assert int(headers["x-delete-at"]) > time.time() + 3000


def test_redirect_and_max_file_count(env):
    conn, cont, url = env
    path = urllib.parse.urlsplit(url).path + f"/{cont}/user2/"
    files = [("a.png", b"1"), ("b.png", b"2"), ("c.png", b"3")]
    status, headers, _ = post(url + f"/{cont}/user2/",
                              form(path, files, redirect="https://app.example/done?x=1",
                                   max_count=2))
    assert status == 303
    assert headers["Location"] == (
        "https://app.example/done?x=1&status=400&message=max%20file%20count%20exceeded")
    assert names(conn, cont, "user2/") == ["user2/a.png", "user2/b.png"]
    # Within the limit, the browser is sent on with status=201.
    status, headers, _ = post(url + f"/{cont}/user2/",
                              form(path, files[:1], redirect="https://app.example/done"))
    assert (status, headers["Location"]) == (303, "https://app.example/done?status=201&message=")


def test_oversize_file_is_refused_and_not_stored(env):
    conn, cont, url = env
    path = urllib.parse.urlsplit(url).path + f"/{cont}/user3/"
    big = b"x" * (3 * 1024 * 1024)  # several chunks: the cap trips mid-stream
    status, _, body = post(url + f"/{cont}/user3/",
                           form(path, [("big.png", big)], max_size=1024 * 1024))
    assert (status, body) == (400, b"FormPost: max_file_size exceeded")
    assert names(conn, cont, "user3/") == []
    with pytest.raises(ClientException) as exc:
        conn.head_object(cont, "user3/big.png")
    assert exc.value.http_status == 404


def test_bad_signatures_store_nothing(cluster, env):
    conn, cont, url = env
    path = urllib.parse.urlsplit(url).path + f"/{cont}/user4/"
    target = url + f"/{cont}/user4/"
    files = [("a.png", b"1")]
    cases = [
        (form(path, files, key="wrong"), b"FormPost: Invalid Signature"),
        (form(path, files, expires=int(time.time()) - 1), b"FormPost: Form Expired"),
        # Signed for another prefix: the path is part of the signature.
        (form(path + "other/", files), b"FormPost: Invalid Signature"),
        # Signed with a bigger max_file_size than the form now claims.
        (form(path, files, extra={"max_file_size": "99"}), b"FormPost: Invalid Signature"),
    ]
    for data, expected in cases:
        status, _, body = post(target, data)
        assert (status, body) == (401, expected)
    # Another account's key signs nothing here.
    url2, token2 = token_and_url(cluster, "test2:tester2", "testing2")
    swiftclient.Connection(preauthurl=url2, preauthtoken=token2, retries=0).post_account(
        {"X-Account-Meta-Temp-URL-Key": "test2-key"})
    assert post(target, form(path, files, key="test2-key"))[0] == 401
    assert names(conn, cont, "user4/") == []
