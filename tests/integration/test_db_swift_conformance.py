"""Container and account answers as Swift gives them, through a real cluster: Last-Modified,
X-Storage-Policy, Content-Type of listings (204s and HEADs too), listing parameters (limit,
NUL markers, path) and the stored-metadata limits of a POST."""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import math
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

import pytest
import swiftclient

from swiftlite.common.constraints import MAX_META_OVERALL_SIZE, MAX_META_VALUE_LENGTH
from tests.helpers import wait_for


def uname(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def auth(cluster):
    url, token = swiftclient.get_auth(cluster.auth_url, cluster.user, cluster.key)
    return urllib.parse.urlsplit(url).path, token


@pytest.fixture
def req(cluster, auth):
    path, token = auth

    def do(method: str, sub: str = "", headers: dict | None = None, query: str = ""):
        u = urllib.parse.urlsplit(cluster.proxy_url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            target = path + (f"/{urllib.parse.quote(sub)}" if sub else "")
            c.request(method, target + (f"?{query}" if query else ""),
                      headers={"X-Auth-Token": token, **(headers or {})})
            r = c.getresponse()
            return r.status, r, r.read()
        finally:
            c.close()
    return do


def http_seconds(value: str) -> float:
    return email.utils.parsedate_to_datetime(value).timestamp()


def test_container_last_modified_follows_put_and_post_only(conn, req):
    cont = uname()
    conn.put_container(cont)
    for method in ("HEAD", "GET"):
        st, r, _ = req(method, cont)
        assert st == 204
        # The put timestamp rounded up to the second.
        assert http_seconds(r.getheader("Last-Modified")) == \
            math.ceil(float(r.getheader("X-Put-Timestamp")))
    put_ts = float(conn.head_container(cont)["x-put-timestamp"])
    conn.post_container(cont, headers={"X-Container-Meta-Japan": "mitaka"})
    h = conn.head_container(cont)
    assert float(h["x-put-timestamp"]) > put_ts
    assert http_seconds(h["last-modified"]) == math.ceil(float(h["x-put-timestamp"]))
    conn.put_object(cont, "o", b"aaaaa")
    conn.post_object(cont, "o", headers={"X-Object-Meta-Us": "austin"})
    assert conn.head_container(cont)["last-modified"] == h["last-modified"]
    # The account listing's last_modified becomes the same instant (json and xml); the POST's
    # account update is asynchronous and reaches each account replica in its own time, and
    # each listing reads one replica: wait until both formats show it.
    want = http_seconds(h["last-modified"])

    def xml_row() -> ET.Element:
        st, _, body = req("GET", query=f"format=xml&prefix={cont}")
        assert st == 200
        node = ET.fromstring(body).find("container")
        assert node is not None
        return node

    wait_for(lambda: json_seconds(conn.get_account(prefix=cont)[1][0]["last_modified"]) == want
             and json_seconds(xml_row().find("last_modified").text) == want,
             20, what="the account rows to carry the POST's timestamp")
    assert xml_row().find("storage_policy").text == "Policy-0"


def json_seconds(value: str) -> float:
    """A listing's ISO time rounded up to the second, as Swift's suite compares them."""
    whole, frac = value.split(".")
    t = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC).timestamp()
    return t + (1 if int(frac) else 0)


def test_new_container_is_in_account_listing_at_once(conn):
    names = [uname("now") for _ in range(5)]
    for n in names:
        conn.put_container(n)
        assert n in [c["name"] for c in conn.get_account(prefix="now-")[1]]
    for n in names:
        conn.delete_container(n)
        assert n not in [c["name"] for c in conn.get_account(prefix="now-")[1]]


def test_storage_policy(conn, req):
    cont = uname()
    st, _, body = req("PUT", cont, {"X-Storage-Policy": "nada"})
    assert (st, body.strip()) == (400, b"Invalid X-Storage-Policy 'nada'")
    with pytest.raises(swiftclient.ClientException):
        conn.head_container(cont)
    for name in ("policy-0", "POLICY-0", ""):
        st, _, _ = req("PUT", cont, {"X-Storage-Policy": name})
        assert st in (201, 202)
    for method in ("HEAD", "GET"):
        st, r, _ = req(method, cont)
        assert r.getheader("X-Storage-Policy") == "Policy-0"
    assert all(c["storage_policy"] == "Policy-0" for c in conn.get_account()[1])


def test_listing_content_types_get_and_head(conn, req):
    cont = uname()
    conn.put_container(cont)
    for sub in (cont, ""):  # container, then account
        if not sub:
            conn.put_object(cont, "obj1", b"x")
        cases = [("", {}, "text/plain"), ("format=json", {}, "application/json"),
                 ("format=xml", {}, "application/xml"), ("format=JSON", {}, "application/json"),
                 ("format=bogus", {}, "text/plain"),
                 ("", {"Accept": "text/xml"}, "text/xml"),
                 ("", {"Accept": "application/json;q=0.5, application/xml"},
                  "application/xml")]
        for query, headers, ctype in cases:
            st, r, _ = req("HEAD", sub, headers, query)
            assert st == 204 and r.getheader("Content-Type") == f"{ctype}; charset=utf-8", \
                (sub, query, headers)
            st, r, _ = req("GET", sub, headers, query)
            assert r.getheader("Content-Type") == f"{ctype}; charset=utf-8"
        st, _, _ = req("GET", sub, {"Accept": "image/png"})
        assert st == 406
    # An empty container: plain is a 204 that still names its type; json is "[]".
    empty = uname()
    conn.put_container(empty)
    st, r, body = req("GET", empty)
    assert (st, body, r.getheader("Content-Type")) == (204, b"", "text/plain; charset=utf-8")
    st, r, body = req("GET", empty, query="format=json")
    assert (st, body) == (200, b"[]")


def test_listing_limit_and_markers(conn, req):
    cont = uname()
    conn.put_container(cont)
    for n in ("a1", "b1", "b2", "c1"):
        conn.put_object(cont, n, b"x")
    for sub in (cont, ""):
        st, _, body = req("GET", sub, query="limit=10001")
        assert (st, body.strip()) == (412, b"Maximum limit is 10000")
        for bad in ("5000.0", "-1", "abc", ""):  # not a number: the default limit
            st, _, _ = req("GET", sub, query=f"limit={bad}")
            assert st == 200, bad
        st, _, _ = req("HEAD", sub, query="limit=10001")  # HEAD lists nothing
        assert st == 204
    # "marker=name%00" is an inclusive bound; with reverse the marker is the upper one.
    st, _, body = req("GET", cont, query="reverse=on&marker=b2%00&end_marker=b0")
    assert (st, body.decode().split()) == (200, ["b2", "b1"])
    st, _, body = req("GET", cont, query="marker=b1%00&format=json")
    assert [o["name"] for o in json.loads(body)] == ["b2", "c1"]


PATH_TREE = ["/file1", "/file A", "/dir1/", "/dir2/", "/dir1/file2", "/dir1/subdir1/",
             "/dir1/subdir1/file2", "file1", "dir1/", "dir2/", "dir1/file2", "dir1/subdir1/",
             "dir1/subdir2/", "dir1/subdir1/file2", "dir1/subdir1/file3",
             "dir1/subdir1/subsubdir1/", "dir1/subdir1/subsubdir1/file5",
             "dir1/subdir with spaces/", "dir1/subdir with spaces/file B"]


def test_path_lists_one_level(conn, req):
    cont = uname()
    conn.put_container(cont)
    for n in PATH_TREE:
        conn.put_object(cont, n, b"12345678")

    def ls(path: str, **kw) -> list[str]:
        query = urllib.parse.urlencode({"format": "json", "path": path, **kw})
        st, _, body = req("GET", cont, query=query)
        return [o["name"] for o in json.loads(body)]

    assert ls("") == ["dir1/", "dir2/", "file1"]
    assert ls("/") == ["/dir1/", "/dir2/", "/file A", "/file1"]
    for p in ("dir1", "dir1/"):
        assert ls(p) == ["dir1/file2", "dir1/subdir with spaces/", "dir1/subdir1/",
                         "dir1/subdir2/"]
    assert ls("dir1/subdir1") == ["dir1/subdir1/file2", "dir1/subdir1/file3",
                                  "dir1/subdir1/subsubdir1/"]
    assert ls("dir1/subdir2") == []
    assert ls("dir1", limit=2) == ["dir1/file2", "dir1/subdir with spaces/"]
    assert ls("dir1/subdir1", marker="dir1/subdir1/file2") == \
        ["dir1/subdir1/file3", "dir1/subdir1/subsubdir1/"]
    # `path` wins over prefix and delimiter.
    assert ls("dir1/subdir1", prefix="x", delimiter="e") == ls("dir1/subdir1")


@pytest.mark.parametrize("kind", ["container", "account"])
def test_post_metadata_limit_counts_what_is_stored(conn, req, kind):
    """Swift's test_POST_bad_metadata3 / test_bad_metadata3: each POST is checked alone and
    then against the metadata already stored."""
    cont = uname()
    conn.put_container(cont)
    sub = cont if kind == "container" else ""
    prefix = f"X-{kind.capitalize()}-Meta-"
    headers: dict[str, str] = {}
    size = x = 0
    while size < MAX_META_OVERALL_SIZE - 4 - MAX_META_VALUE_LENGTH:
        size += 4 + MAX_META_VALUE_LENGTH
        headers[f"{prefix}{x:04d}"] = "k" * MAX_META_VALUE_LENGTH
        x += 1
    headers[f"{prefix}k"] = "v" * (MAX_META_OVERALL_SIZE - size - 1)
    try:
        assert req("POST", sub, headers)[0] == 204
        headers[f"{prefix}k"] = "x" * (MAX_META_OVERALL_SIZE - size)
        assert req("POST", sub, headers)[0] == 400
        assert req("POST", sub, {f"{prefix}k": "y" * (MAX_META_OVERALL_SIZE - size - 1)})[0] \
            == 204
        st, _, body = req("POST", sub, {f"{prefix}k": "z" * (MAX_META_OVERALL_SIZE - size)})
        assert (st, body.strip()) == (400, b"Total metadata too large; max 4096")
        st, r, _ = req("HEAD", sub)
        assert r.getheader(f"{prefix}k") == "y" * (MAX_META_OVERALL_SIZE - size - 1)
    finally:
        req("POST", sub, {f"X-Remove-{kind.capitalize()}-Meta-{k[len(prefix):]}": "x"
                          for k in headers})
