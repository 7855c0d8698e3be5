"""UTF-8 names and metadata through a real cluster: what a client sends comes back byte for
byte (swiftclient for the usual paths, raw HTTP to see the exact header bytes), and bytes
that are not UTF-8 in a metadata value are a 400, never a 500."""

from __future__ import annotations

import http.client
import json
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

import pytest
import swiftclient

JA, KO, EMOJI = "日本語のメタ", "한국어 값", "😀🎉 ok"


def uname(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def raw(cluster, method: str, path: str, headers: dict | None = None,
        body: bytes | None = None) -> tuple[int, http.client.HTTPResponse, bytes]:
    """One request with exact header bytes (bytes values go on the wire as they are)."""
    u = urllib.parse.urlsplit(cluster.proxy_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r, r.read()
    finally:
        c.close()


def wire(resp: http.client.HTTPResponse, name: str) -> bytes | None:
    """A response header's bytes as received (http.client decodes them as latin-1)."""
    v = resp.getheader(name)
    return None if v is None else v.encode("latin-1")


@pytest.fixture(scope="module")
def auth(cluster):
    url, token = swiftclient.get_auth(cluster.auth_url, cluster.user, cluster.key)
    return urllib.parse.urlsplit(url).path, token


def q(*names: str) -> str:
    return "/".join(urllib.parse.quote(n, safe="") for n in names)


def test_object_metadata_round_trips_through_put_post_head_get(conn):
    cont, obj = uname("容器"), f"{uname('객체')}/😀.jpg"
    conn.put_container(cont)
    conn.put_object(cont, obj, b"image bytes", headers={
        "X-Object-Meta-Ja": JA, "X-Object-Meta-Ko": KO, "X-Object-Meta-Emoji": EMOJI,
        "Content-Type": "image/jpeg"})
    for headers in (conn.head_object(cont, obj), conn.get_object(cont, obj)[0]):
        assert (headers["x-object-meta-ja"], headers["x-object-meta-ko"],
                headers["x-object-meta-emoji"]) == (JA, KO, EMOJI)
    assert conn.get_object(cont, obj)[1] == b"image bytes"
    # A POST replaces the user metadata as a set.
    conn.post_object(cont, obj, headers={"X-Object-Meta-Ko": "새 값 🌏"})
    h = conn.head_object(cont, obj)
    assert h["x-object-meta-ko"] == "새 값 🌏"
    assert "x-object-meta-ja" not in h and "x-object-meta-emoji" not in h
    assert conn.get_object(cont, obj)[0]["x-object-meta-ko"] == "새 값 🌏"


def test_metadata_header_bytes_come_back_exactly_as_sent(cluster, conn, auth):
    path, token = auth
    cont = uname("bytes")
    conn.put_container(cont)
    sent = "日本 한국 😀".encode()
    st, _, body = raw(cluster, "PUT", f"{path}/{cont}/o", {
        "X-Auth-Token": token, "X-Object-Meta-Mixed": sent, "Content-Length": "1"}, b"x")
    assert st == 201, body
    for method in ("HEAD", "GET"):
        st, resp, _ = raw(cluster, method, f"{path}/{cont}/o", {"X-Auth-Token": token})
        assert st == 200 and wire(resp, "X-Object-Meta-Mixed") == sent
    st, _, _ = raw(cluster, "POST", f"{path}/{cont}", {
        "X-Auth-Token": token, "X-Container-Meta-Mixed": sent})
    assert st == 204
    st, resp, _ = raw(cluster, "HEAD", f"{path}/{cont}", {"X-Auth-Token": token})
    assert wire(resp, "X-Container-Meta-Mixed") == sent
    st, _, _ = raw(cluster, "POST", path, {"X-Auth-Token": token,
                                           "X-Account-Meta-Mixed": sent})
    assert st == 204
    st, resp, _ = raw(cluster, "HEAD", path, {"X-Auth-Token": token})
    assert wire(resp, "X-Account-Meta-Mixed") == sent
    raw(cluster, "POST", path, {"X-Auth-Token": token, "X-Remove-Account-Meta-Mixed": "x"})


def test_container_and_account_metadata_round_trip(conn):
    cont = uname("メタ")
    conn.put_container(cont, headers={"X-Container-Meta-Ja": JA})
    conn.post_container(cont, headers={"X-Container-Meta-Ko": KO,
                                       "X-Container-Meta-Emoji": EMOJI})
    h = conn.head_container(cont)
    assert (h["x-container-meta-ja"], h["x-container-meta-ko"],
            h["x-container-meta-emoji"]) == (JA, KO, EMOJI)
    assert conn.get_container(cont)[0]["x-container-meta-emoji"] == EMOJI
    conn.post_account(headers={"X-Account-Meta-Ko": KO, "X-Account-Meta-Emoji": EMOJI})
    try:
        h = conn.head_account()
        assert (h["x-account-meta-ko"], h["x-account-meta-emoji"]) == (KO, EMOJI)
        assert conn.get_account()[0]["x-account-meta-ko"] == KO
    finally:
        conn.post_account(headers={"X-Remove-Account-Meta-Ko": "x",
                                   "X-Remove-Account-Meta-Emoji": "x"})


def test_invalid_utf8_metadata_is_400_and_stores_nothing(cluster, conn, auth):
    path, token = auth
    cont = uname("bad")
    conn.put_container(cont)
    bad = b"ok\xff\xfe"
    cut = "日本".encode()[:4]  # a character cut in half
    for value in (bad, cut):
        st, _, body = raw(cluster, "PUT", f"{path}/{cont}/o", {
            "X-Auth-Token": token, "X-Object-Meta-Bad": value, "Content-Length": "1"}, b"x")
        assert st == 400 and b"UTF-8" in body, (st, body)
    with pytest.raises(swiftclient.ClientException) as exc:
        conn.head_object(cont, "o")
    assert exc.value.http_status == 404
    conn.put_object(cont, "o", b"x", headers={"X-Object-Meta-Good": JA})
    cases = [(f"{path}/{cont}/o", "X-Object-Meta-Bad"),
             (f"{path}/{cont}", "X-Container-Meta-Bad"),
             (path, "X-Account-Meta-Bad")]
    for where, header in cases:
        st, _, body = raw(cluster, "POST", where, {"X-Auth-Token": token, header: bad})
        assert st == 400 and b"UTF-8" in body, (where, st, body)
    assert conn.head_object(cont, "o")["x-object-meta-good"] == JA
    assert "x-container-meta-bad" not in conn.head_container(cont)
    assert "x-account-meta-bad" not in conn.head_account()


def test_utf8_names_in_listings_every_format(cluster, conn, auth):
    path, token = auth
    cont = uname("一覧😀")
    conn.put_container(cont)
    names = ["abc", "日本/写真.jpg", "日本/動画.mp4", "한국어.png", "😀/🎉", "é"]
    for n in names:
        conn.put_object(cont, n, n.encode(), headers={"Content-Type": "image/png"})
    by_bytes = sorted(names, key=lambda n: n.encode())
    # json (swiftclient's own format), plain and xml.
    assert [o["name"] for o in conn.get_container(cont)[1]] == by_bytes
    st, _, body = raw(cluster, "GET", f"{path}/{q(cont)}", {"X-Auth-Token": token})
    assert st == 200 and body.decode("utf-8").splitlines() == by_bytes
    st, _, body = raw(cluster, "GET", f"{path}/{q(cont)}?format=xml", {"X-Auth-Token": token})
    root = ET.fromstring(body)
    assert root.get("name") == cont
    assert [o.find("name").text for o in root.iter("object")] == by_bytes
    # Delimiter, prefix and markers with UTF-8.
    listing = conn.get_container(cont, delimiter="/")[1]
    assert [o.get("subdir") or o["name"] for o in listing] == \
        ["abc", "é", "日本/", "한국어.png", "😀/"]
    assert [o["name"] for o in conn.get_container(cont, prefix="日本/")[1]] == \
        ["日本/写真.jpg", "日本/動画.mp4"]
    assert [o["name"] for o in conn.get_container(cont, marker="日本/写真.jpg",
                                                  end_marker="😀")[1]] == \
        ["日本/動画.mp4", "한국어.png"]
    st, _, body = raw(cluster, "GET", f"{path}/{q(cont)}?reverse=on&limit=2&format=json&"
                      f"marker={urllib.parse.quote('😀/🎉')}", {"X-Auth-Token": token})
    assert [o["name"] for o in json.loads(body)] == ["한국어.png", "日本/動画.mp4"]
    # The new container is in the account listing at once, in every format.
    assert cont in [c["name"] for c in conn.get_account(prefix="一覧")[1]]
    st, _, body = raw(cluster, "GET", f"{path}?prefix={urllib.parse.quote('一覧')}",
                      {"X-Auth-Token": token})
    assert cont in body.decode("utf-8").splitlines()
    st, _, body = raw(cluster, "GET", f"{path}?format=xml&prefix={urllib.parse.quote('一覧')}",
                      {"X-Auth-Token": token})
    assert cont in [c.find("name").text for c in ET.fromstring(body).iter("container")]
