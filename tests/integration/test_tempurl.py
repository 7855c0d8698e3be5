"""TempURL through a real `swiftlite up` proxy: links made by the stock `swift tempurl` CLI
fetched with curl, and every way a link must fail closed (expired, wrong method, wrong
object, another account, tampered signature or expiry) answering 401 with nothing touched;
prefix and address-bound links, container keys, header filtering and /info."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import time
import urllib.parse
import uuid

import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from tests.integration.test_proxy_api import token_and_url
from tests.integration.test_swift_cli import SWIFT

KEY = "secret-account-key"
BODY = b"a private image " * 64


def curl(url: str, *args: str) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of curl fetching `url` (the real thing a user
    pastes)."""
    r = subprocess.run(["curl", "-s", "-g", "-D", "-", *args, url], capture_output=True,
                       timeout=30)
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers, body


def swift_tempurl(*args: str) -> str:
    r = subprocess.run([SWIFT, "tempurl", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def sign(method: str, expires: int, path: str, key: str = KEY,
         digest=hashlib.sha256, ip: str | None = None) -> str:
    body = f"{method}\n{expires}\n{path}"
    if ip:
        body = f"ip={ip}\n{body}"
    return hmac.new(key.encode(), body.encode(), digest).hexdigest()


@pytest.fixture(scope="module")
def env(cluster):
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    conn.post_account({"X-Account-Meta-Temp-URL-Key": KEY})
    cont = f"tu-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont)
    conn.put_object(cont, "photo é.jpg", BODY, content_type="image/jpeg",
                    headers={"X-Object-Meta-Public-Caption": "cat",
                             "X-Object-Meta-Owner-Note": "private"})
    conn.put_object(cont, "other.jpg", b"other")
    acct_path = urllib.parse.urlsplit(url).path
    return conn, cont, acct_path, cluster.proxy_url


def link(base: str, path: str, query: str) -> str:
    return base + urllib.parse.quote(path) + "?" + query


def test_swift_cli_link_fetched_with_curl(env):
    conn, cont, acct, base = env
    path = f"{acct}/{cont}/photo é.jpg"
    # The CLI signs and prints the path as given; the space and é are escaped for curl.
    path_out, _, query = swift_tempurl("GET", "60", path, KEY).partition("?")
    assert path_out == path
    out = urllib.parse.quote(path_out) + "?" + query
    status, headers, body = curl(base + out)
    assert status == 200 and body == BODY
    assert headers["content-type"] == "image/jpeg"
    # Swift's attachment disposition named after the object, and an Expires of the link's.
    assert headers["content-disposition"] == (
        "attachment; filename=\"photo %C3%A9.jpg\"; filename*=UTF-8''photo%20%C3%A9.jpg")
    assert "expires" in headers
    # Only public metadata is shown to a link holder.
    assert headers["x-object-meta-public-caption"] == "cat"
    assert "x-object-meta-owner-note" not in headers
    # A GET link also allows HEAD (curl -I), not DELETE.
    assert curl(base + out, "-I")[0] == 200
    assert curl(base + out, "-X", "DELETE")[0] == 401
    assert conn.head_object(cont, "photo é.jpg")["content-length"] == str(len(BODY))


def test_cli_iso8601_sha512_prefix_and_ip_range(env):
    _, cont, acct, base = env
    out = swift_tempurl("--digest", "sha512", "--iso8601", "--prefix-based",
                        "--ip-range", "127.0.0.0/8", "GET", "60", f"{acct}/{cont}/pho", KEY)
    assert "temp_url_prefix=pho" in out and "sha512:" in out
    prefix_url = out.split("?", 1)
    status, _, body = curl(base + prefix_url[0][:-3] + urllib.parse.quote("photo é.jpg")
                           + "?" + prefix_url[1])
    assert status == 200 and body == BODY
    # The prefix does not cover other.jpg.
    assert curl(base + prefix_url[0][:-3] + "other.jpg?" + prefix_url[1])[0] == 401
    # A link bound to addresses we do not come from is refused.
    out = swift_tempurl("--ip-range", "10.0.0.0/8", "GET", "60",
                        f"{acct}/{cont}/other.jpg", KEY)
    assert curl(base + out)[0] == 401


def test_invalid_links_are_401_and_touch_nothing(cluster, env):
    conn, cont, acct, base = env
    now = int(time.time())
    obj = f"{acct}/{cont}/other.jpg"
    good = sign("DELETE", now + 60, obj)
    cases = {
        "expired": (f"temp_url_sig={sign('DELETE', now - 1, obj)}&temp_url_expires={now - 1}"),
        "tampered sig": f"temp_url_sig={'0' if good[0] != '0' else '1'}{good[1:]}"
                        f"&temp_url_expires={now + 60}",
        "tampered expiry": f"temp_url_sig={good}&temp_url_expires={now + 61}",
        "GET signature": f"temp_url_sig={sign('GET', now + 60, obj)}"
                         f"&temp_url_expires={now + 60}",
        "wrong key": f"temp_url_sig={sign('DELETE', now + 60, obj, key='guess')}"
                     f"&temp_url_expires={now + 60}",
        "other object's signature": f"temp_url_sig={sign('DELETE', now + 60, obj + 'x')}"
                                    f"&temp_url_expires={now + 60}",
        "missing expiry": f"temp_url_sig={good}",
        "malformed": f"temp_url_sig=sha256:!!!&temp_url_expires={now + 60}",
    }
    for label, query in cases.items():
        status, headers, body = curl(link(base, obj, query), "-X", "DELETE")
        assert status == 401, label
        assert body == b"401 Unauthorized: Temp URL invalid\n", label
    assert conn.get_object(cont, "other.jpg")[1] == b"other"
    # The valid one does delete: the cases above failed for their flaw alone.
    assert curl(link(base, obj, f"temp_url_sig={good}&temp_url_expires={now + 60}"),
                "-X", "DELETE")[0] == 204
    with pytest.raises(ClientException) as exc:
        conn.head_object(cont, "other.jpg")
    assert exc.value.http_status == 404
    conn.put_object(cont, "other.jpg", b"other")


def test_link_never_reaches_another_account(cluster, env):
    _, cont, acct, base = env
    url2, token2 = token_and_url(cluster, "test2:tester2", "testing2")
    conn2 = swiftclient.Connection(preauthurl=url2, preauthtoken=token2, retries=0)
    conn2.post_account({"X-Account-Meta-Temp-URL-Key": "key-of-test2"})
    conn2.put_container("theirs")
    conn2.put_object("theirs", "x.jpg", b"theirs")
    acct2 = urllib.parse.urlsplit(url2).path
    exp = int(time.time()) + 60
    # Our key signing their path, and their path with our signature: both refused.
    for path, key in ((f"{acct2}/theirs/x.jpg", KEY),
                      (f"{acct2}/theirs/x.jpg", "wrong")):
        q = f"temp_url_sig={sign('GET', exp, path, key)}&temp_url_expires={exp}"
        assert curl(link(base, path, q))[0] == 401
    # Their own link works, for their object only.
    path = f"{acct2}/theirs/x.jpg"
    q = f"temp_url_sig={sign('GET', exp, path, 'key-of-test2')}&temp_url_expires={exp}"
    assert curl(link(base, path, q))[2] == b"theirs"
    assert curl(link(base, f"{acct}/{cont}/other.jpg", q))[0] == 401


def test_put_link_writes_one_object_and_refuses_manifests(env):
    conn, cont, acct, base = env
    exp = int(time.time()) + 60
    path = f"{acct}/{cont}/upload.jpg"
    q = f"temp_url_sig={sign('PUT', exp, path)}&temp_url_expires={exp}"
    status, _, _ = curl(link(base, path, q), "-X", "PUT", "--data-binary", "uploaded",
                        "-H", "X-Timestamp: 1000000000.00000")
    assert status == 201
    headers, body = conn.get_object(cont, "upload.jpg")
    assert body == b"uploaded" and float(headers["x-timestamp"]) > 1000000000
    for header in ("X-Object-Manifest: other/seg", f"X-Copy-From: {cont}/other.jpg",
                   "X-Symlink-Target: other/x"):
        status, _, body = curl(link(base, path, q), "-X", "PUT", "--data-binary", "",
                               "-H", header)
        assert status == 400, header
        assert b"is not allowed in this tempurl" in body
    # A PUT link does not let its holder read another object, nor the container.
    assert curl(link(base, f"{acct}/{cont}/other.jpg", q))[0] == 401
    assert curl(link(base, f"{acct}/{cont}", q))[0] == 401


def test_container_key_and_disposition_options(env):
    conn, cont, acct, base = env
    cont2 = cont + "-ck"
    conn.put_container(cont2, headers={"X-Container-Meta-Temp-URL-Key": "ckey"})
    conn.put_object(cont2, "a.txt", b"alpha")
    exp = int(time.time()) + 60
    path = f"{acct}/{cont2}/a.txt"
    q = f"temp_url_sig={sign('GET', exp, path, 'ckey')}&temp_url_expires={exp}"
    status, headers, body = curl(link(base, path, q) + "&inline")
    assert (status, body, headers["content-disposition"]) == (200, b"alpha", "inline")
    _, headers, _ = curl(link(base, path, q) + "&filename=report%20v2.txt")
    assert headers["content-disposition"] == (
        "attachment; filename=\"report v2.txt\"; filename*=UTF-8''report%20v2.txt")
    # The container's key signs nothing in another container.
    other = f"{acct}/{cont}/other.jpg"
    q2 = f"temp_url_sig={sign('GET', exp, other, 'ckey')}&temp_url_expires={exp}"
    assert curl(link(base, other, q2))[0] == 401


def test_info_advertises_tempurl(cluster):
    import json
    import urllib.request
    with urllib.request.urlopen(cluster.proxy_url + "/info") as r:
        info = json.load(r)
    assert info["tempurl"]["methods"] == ["GET", "HEAD", "PUT", "POST", "DELETE"]
    assert info["tempurl"]["allowed_digests"] == ["sha1", "sha256", "sha512"]
    assert info["tempurl"]["deprecated_digests"] == ["sha1"]
    assert info["tempurl"]["outgoing_allow_headers"] == ["x-object-meta-public-*"]


def test_link_drops_query_parameters_it_was_not_signed_for(env):
    """As Swift's: only the link's own parameters (and filename/inline) go on, so no
    `version-id`, `symlink=get`, `multipart-manifest=get` or `part-number` widens it."""
    conn, cont, acct, base = env
    vcont = cont + "-v"
    conn.put_container(vcont, headers={"X-Versions-Enabled": "true"})
    resp: dict = {}
    conn.put_object(vcont, "doc", b"first", response_dict=resp)
    v1 = resp["headers"]["x-object-version-id"]
    conn.put_object(vcont, "doc", b"second, current")
    conn.put_object(vcont, "ln", b"", headers={"X-Symlink-Target": f"{vcont}/doc"})
    exp = int(time.time()) + 60
    for name, extra, want in (("doc", f"&version-id={v1}", b"second, current"),
                              ("doc", "&part-number=1", b"second, current"),
                              ("ln", "&symlink=get", b"second, current"),
                              ("doc", "&multipart-manifest=get&format=raw",
                               b"second, current")):
        path = f"{acct}/{vcont}/{name}"
        q = f"temp_url_sig={sign('GET', exp, path)}&temp_url_expires={exp}"
        status, headers, body = curl(link(base, path, q) + extra)
        assert (status, body) == (200, want), extra
        assert "content-range" not in headers and "x-symlink-target" not in headers


def test_prefix_link_to_a_whole_container_through_staticweb(env):
    """A link signed for a container's whole prefix ('') opens its staticweb site: the
    container's path redirects to the trailing slash, which lists; without staticweb the
    container itself stays closed, and no other method or prefix is let in."""
    conn, cont, acct, base = env
    site = cont + "-web"
    conn.put_container(site, headers={"X-Container-Meta-Web-Listings": "true"})
    conn.put_object(site, "page.html", b"<p>hi</p>", content_type="text/html")
    exp = int(time.time()) + 60
    q = (f"temp_url_sig={sign('GET', exp, f'prefix:{acct}/{site}/')}"
         f"&temp_url_expires={exp}&temp_url_prefix=")
    status, headers, _ = curl(f"{base}{acct}/{site}?{q}")
    assert status == 301 and headers["location"].endswith(f"{acct}/{site}/?{q}")
    status, _, body = curl(f"{base}{acct}/{site}/?{q}")
    assert status == 200 and b"page.html" in body
    assert curl(f"{base}{acct}/{site}/page.html?{q}")[2] == b"<p>hi</p>"
    assert curl(f"{base}{acct}/{site}?{q}", "-X", "DELETE")[0] == 401
    conn.post_container(site, {"X-Remove-Container-Meta-Web-Listings": "x"})
    assert curl(f"{base}{acct}/{site}?{q}")[0] == 401
    assert curl(f"{base}{acct}/{site}/?{q}")[0] == 401
    # A prefix other than '' never reaches the container's own path.
    q2 = (f"temp_url_sig={sign('GET', exp, f'prefix:{acct}/{site}/p')}"
          f"&temp_url_expires={exp}&temp_url_prefix=p")
    assert curl(f"{base}{acct}/{site}/?{q2}")[0] == 401
