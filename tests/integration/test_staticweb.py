"""StaticWeb through a real `swiftlite up` proxy: index pages, HTML listings (escaped names,
CSS), directory redirects, error pages, and anonymous versus X-Web-Mode requests."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest
import swiftclient

from tests.integration.test_proxy_api import raw, storage_path, token_and_url


@pytest.fixture(scope="module")
def site(cluster):
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"web-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont, {"X-Container-Read": ".r:*,.rlistings",
                              "X-Container-Meta-Web-Listings": "true",
                              "X-Container-Meta-Web-Listings-Css": "style.css",
                              "X-Container-Meta-Web-Error": "error.html"})
    conn.put_object(cont, "index.html", b"<p>home</p>", content_type="text/html")
    conn.put_object(cont, "404error.html", b"nothing here", content_type="text/html")
    conn.put_object(cont, "dir", b"", content_type="application/directory")
    conn.put_object(cont, "dir/f1", b"one")
    conn.put_object(cont, 'dir/<b>&"x', b"two")
    conn.put_object(cont, "sub/f2", b"f2")
    return conn, cont, storage_path(url), token


def get(cluster, path, headers=None):
    return raw(cluster, "GET", path, headers)


def test_listing_escaped_with_css(cluster, site):
    conn, cont, base, _ = site
    status, headers, body = get(cluster, f"{base}/{cont}/dir/")
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert f"Listing of {base}/{cont}/dir/" in text
    assert '<a href="./f1">f1</a>' in text
    assert f'<a href="./{quote("<b>&" + chr(34) + "x")}">&lt;b&gt;&amp;&quot;x</a>' in text
    assert "<b>&" not in text
    assert '<link rel="stylesheet" type="text/css" href="../style.css" />' in text
    assert 'href="../"' in text


def test_redirects_and_index(cluster, site):
    conn, cont, base, _ = site
    for path in (f"{base}/{cont}", f"{base}/{cont}/dir", f"{base}/{cont}/sub"):
        status, headers, _ = get(cluster, path)
        assert status == 301 and headers["Location"].endswith(path + "/")
    status, _, body = get(cluster, f"{base}/{cont}/sub/")
    assert status == 200 and '<a href="./f2">f2</a>' in body.decode()
    conn.post_container(cont, {"X-Container-Meta-Web-Index": "index.html"})
    try:
        status, _, body = get(cluster, f"{base}/{cont}/")
        assert status == 200 and body == b"<p>home</p>"
    finally:
        conn.post_container(cont, {"X-Remove-Container-Meta-Web-Index": "x"})


def test_error_page(cluster, site):
    _, cont, base, _ = site
    status, _, body = get(cluster, f"{base}/{cont}/missing")
    assert status == 404 and body == b"nothing here"


def test_authenticated_only_in_web_mode(cluster, site):
    _, cont, base, token = site
    status, headers, body = get(cluster, f"{base}/{cont}/", {"X-Auth-Token": token})
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b"dir/f1" in body
    status, headers, body = get(cluster, f"{base}/{cont}/dir/",
                                {"X-Auth-Token": token, "X-Web-Mode": "true"})
    assert status == 200 and b"Listing of" in body


def test_private_container_is_not_served(cluster, site):
    conn, _, base, _ = site
    cont = f"priv-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont, {"X-Container-Meta-Web-Listings": "true"})
    conn.put_object(cont, "a", b"a")
    assert get(cluster, f"{base}/{cont}/")[0] == 401
