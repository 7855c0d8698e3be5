"""Dynamic large objects through a real `swiftlite up` proxy: `swift upload -S`, GET/HEAD of
the concatenation, ranges across segments, the manifest itself, and segments streamed one at a
time (never gathered in the proxy's memory)."""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import aiohttp
import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from tests.helpers import wait_for
from tests.integration.test_proxy_api import raw, storage_path, token_and_url
from tests.integration.test_swift_cli import swift

SEGMENTS = [b"a" * 10, b"b" * 7, b"c" * 13]
BODY = b"".join(SEGMENTS)


def dlo_etag(segments: list[bytes]) -> str:
    md5 = hashlib.md5()
    for s in segments:
        md5.update(hashlib.md5(s).hexdigest().encode())
    return f'"{md5.hexdigest()}"'


@pytest.fixture(scope="module")
def dlo(cluster):
    """`man` in `cont`: a manifest over three segments in `cont_segments`."""
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"dlo-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont)
    conn.put_container(cont + "_segments")
    for i, data in enumerate(SEGMENTS):
        conn.put_object(cont + "_segments", f"man/{i:08d}", data)
    conn.put_object(cont + "_segments", "other/0", b"not mine")
    conn.put_object(cont, "man", b"manifest body", content_type="image/jpeg",
                    headers={"X-Object-Manifest": f"{cont}_segments/man/",
                             "X-Object-Meta-Kind": "big"})
    # The object servers must keep the header, or nothing here can work.
    stored = conn.head_object(cont, "man", query_string="multipart-manifest=get")
    assert stored.get("x-object-manifest") == f"{cont}_segments/man/", \
        "object servers dropped X-Object-Manifest (swiftlite/obj/server.py _user_metadata " \
        "stores only PASSED_HEADERS[:2])"
    return conn, cont, storage_path(url), token


def test_get_and_head_concatenate_the_segments(dlo):
    conn, cont, _, _ = dlo
    headers, body = conn.get_object(cont, "man")
    assert body == BODY
    assert headers["content-length"] == str(len(BODY))
    assert headers["etag"] == dlo_etag(SEGMENTS)
    assert headers["content-type"] == "image/jpeg"
    assert headers["x-object-meta-kind"] == "big"
    assert headers["x-object-manifest"] == f"{cont}_segments/man/"
    head = conn.head_object(cont, "man")
    assert head["content-length"] == str(len(BODY)) and head["etag"] == dlo_etag(SEGMENTS)
    # The manifest itself, on request.
    headers, body = conn.get_object(cont, "man", query_string="multipart-manifest=get")
    assert body == b"manifest body"
    assert headers["etag"] == hashlib.md5(b"manifest body").hexdigest()


def test_ranges_across_segments(cluster, dlo):
    _, cont, base, token = dlo
    path = f"{base}/{cont}/man"
    for spec, want in (("8-24", BODY[8:25]), ("0-0", BODY[:1]), ("17-", BODY[17:]),
                       ("-5", BODY[-5:]), ("10-16", BODY[10:17]), ("25-99", BODY[25:])):
        status, h, body = raw(cluster, "GET", path, {"X-Auth-Token": token,
                                                     "Range": f"bytes={spec}"})
        assert (status, body) == (206, want), spec
        first = len(BODY) - len(want) if spec.startswith("-") else int(spec.split("-")[0])
        assert h["Content-Range"] == f"bytes {first}-{first + len(want) - 1}/{len(BODY)}"
        assert h["Content-Length"] == str(len(want))
    # Several ranges: the whole object, 200, as Swift.
    status, _, body = raw(cluster, "GET", path, {"X-Auth-Token": token,
                                                 "Range": "bytes=0-1,5-6"})
    assert (status, body) == (200, BODY)
    status, h, _ = raw(cluster, "GET", path, {"X-Auth-Token": token, "Range": "bytes=30-40"})
    assert status == 416 and h["Content-Range"] == f"bytes */{len(BODY)}"


def test_conditions_use_the_dlo_etag(cluster, dlo):
    _, cont, base, token = dlo
    path = f"{base}/{cont}/man"
    etag = dlo_etag(SEGMENTS)
    for method in ("GET", "HEAD"):
        assert raw(cluster, method, path, {"X-Auth-Token": token,
                                           "If-None-Match": etag})[0] == 304
        assert raw(cluster, method, path, {"X-Auth-Token": token,
                                           "If-Match": etag})[0] == 200
        assert raw(cluster, method, path, {"X-Auth-Token": token,
                                           "If-Match": '"nope"'})[0] == 412


def test_manifest_header_checked_and_changed_by_post(cluster, dlo):
    conn, cont, base, token = dlo
    for bad in ("nocontainer", "c/", "/c/p", "c//p", "c/p?x", "c/p&x"):
        status, _, body = raw(cluster, "PUT", f"{base}/{cont}/bad", {
            "X-Auth-Token": token, "X-Object-Manifest": bad, "Content-Length": "0"})
        assert (status, body) == (400, b"X-Object-Manifest must be in the format "
                                       b"container/prefix"), bad
    conn.put_object(cont, "plain", b"plain body")
    conn.post_object(cont, "plain", {"X-Object-Manifest": f"{cont}_segments/man/"})
    assert conn.get_object(cont, "plain")[1] == BODY
    # A POST without the header turns it back into an ordinary object (Swift's fast-POST).
    conn.post_object(cont, "plain", {"X-Object-Meta-A": "b"})
    assert conn.get_object(cont, "plain")[1] == b"plain body"


def test_empty_listing_and_segment_acls(cluster, dlo):
    conn, cont, base, token = dlo
    conn.put_object(cont, "none", b"", headers={"X-Object-Manifest": f"{cont}_segments/zz"})
    headers, body = conn.get_object(cont, "none")
    assert body == b"" and headers["etag"] == f'"{hashlib.md5().hexdigest()}"'
    # A reader of the manifest's container who may not list the segments' gets the
    # listing's refusal, not the segments.
    url3, t3 = token_and_url(cluster, "test:tester3", "testing3")
    conn.post_container(cont, {"X-Container-Read": "test:tester3"})
    status, _, _ = raw(cluster, "GET", f"{base}/{cont}/man", {"X-Auth-Token": t3})
    assert status == 403
    conn.post_container(cont + "_segments", {"X-Container-Read": "test:tester3"})
    status, _, body = raw(cluster, "GET", f"{base}/{cont}/man", {"X-Auth-Token": t3})
    assert (status, body) == (200, BODY)
    # A missing segment container: its 404.
    conn.put_object(cont, "lost", b"", headers={"X-Object-Manifest": "no-such-cont/x"})
    with pytest.raises(ClientException) as exc:
        conn.get_object(cont, "lost")
    assert exc.value.http_status == 404


async def test_segments_are_fetched_as_the_body_is_sent(cluster, dlo):
    """The proxy reads a segment only when the client is ready for it: with the client
    paused in the first segment, a later segment deleted then is missing from the body
    (which is cut short), so nothing past what was sent was gathered in memory."""
    conn, cont, base, token = dlo
    big = os.urandom(8 * 1024 * 1024)
    for i in range(3):
        conn.put_object(cont + "_segments", f"lazy/{i}", big)
    conn.put_object(cont, "lazy", b"", headers={"X-Object-Manifest": f"{cont}_segments/lazy/"})
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as s, \
            s.get(cluster.proxy_url + f"{base}/{cont}/lazy",
                  headers={"X-Auth-Token": token}) as r:
        assert r.status == 200 and r.content_length == 3 * len(big)
        got = await r.content.readexactly(64 * 1024)
        assert got == big[:64 * 1024]
        conn.delete_object(cont + "_segments", "lazy/2")
        wait_for(lambda: "lazy/2" not in [o["name"] for o in conn.get_container(
            cont + "_segments", prefix="lazy/")[1]], 10, what="segment deleted")
        received = len(got)
        with pytest.raises(aiohttp.ClientPayloadError):
            async for chunk in r.content.iter_chunked(1 << 20):
                received += len(chunk)
        # Cut short, and nothing gathered past what was sent: the two segments before the
        # deleted one, but for what the transport held when the cut aborted the connection
        # (an abort, so a cut body never looks complete, drops aiohttp's unsent buffer).
        assert 2 * len(big) - 256 * 1024 <= received < 3 * len(big)


def test_swift_upload_segments_round_trip(cluster, tmp_path):
    data = os.urandom(4500)
    (tmp_path / "photo.jpg").write_bytes(data)
    cont = f"cli-{uuid.uuid4().hex[:8]}"
    # --use-dlo: with SLO advertised, `swift upload -S` makes an SLO by default.
    swift(cluster, "upload", "--use-dlo", "-S", "1000", cont, "photo.jpg", cwd=str(tmp_path))
    conn = cluster.connection()
    segments = conn.get_container(cont + "_segments")[1]
    assert len(segments) == 5 and sum(s["bytes"] for s in segments) == len(data)
    head = conn.head_object(cont, "photo.jpg")
    assert "x-object-manifest" in head and head["content-length"] == str(len(data))
    down = tmp_path / "down"
    down.mkdir()
    # `swift download` checks a DLO's ETag (the MD5 of its segments' ETags) as it reads.
    out = swift(cluster, "download", cont, "photo.jpg", cwd=str(down))
    assert "photo.jpg" in out
    assert (down / "photo.jpg").read_bytes() == data


def test_info_does_not_list_dlo_as_swift(cluster):
    """Swift's /info has no `dlo` key (DLO is always on there), nor has ours."""
    status, _, body = raw(cluster, "GET", "/info")
    assert status == 200
    info = json.loads(body)
    assert "slo" in info and "dlo" not in info
