"""Symlinks through a real `swiftlite up` proxy: links followed as the caller, `?symlink=get`,
static links checked at PUT and at GET, loops, POST's 307, copies, listing keys, SLO targets."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from tests.helpers import wait_for
from tests.integration.test_proxy_api import raw, storage_path, token_and_url

BODY = b"target body"
ETAG = hashlib.md5(BODY).hexdigest()
EMPTY = hashlib.md5(b"").hexdigest()


@pytest.fixture(scope="module")
def env(cluster):
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"sym-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont)
    conn.put_object(cont, "tgt", BODY, content_type="application/target")
    return conn, cont, url, token


def link(conn, cont, name, target, **headers):
    conn.put_object(cont, name, b"", headers={"X-Symlink-Target": target, **headers})


def status_of(fn, *args, **kwargs) -> tuple[int, bytes]:
    try:
        fn(*args, **kwargs)
    except ClientException as exc:
        return exc.http_status, exc.http_response_content
    return 200, b""


def listing_row(conn, cont, name):
    return next(r for r in conn.get_container(cont)[1] if r["name"] == name)


def test_get_head_follow_and_symlink_get(env):
    conn, cont, url, _ = env
    link(conn, cont, "l1", f"{cont}/tgt")
    headers, body = conn.get_object(cont, "l1")
    assert body == BODY and headers["etag"] == ETAG
    assert headers["content-location"] == f"{storage_path(url)}/{cont}/tgt"
    assert conn.get_object(cont, "l1", headers={"Range": "bytes=7-10"})[1] == b"body"
    own, body = conn.get_object(cont, "l1", query_string="symlink=get")
    assert body == b"" and own["x-symlink-target"] == f"{cont}/tgt"
    assert own["content-type"] == "application/symlink"
    assert not any(k.startswith("x-object-sysmeta") for k in own)
    head = conn.head_object(cont, "l1")
    assert head["content-length"] == str(len(BODY))


def test_put_errors(env):
    conn, cont, _, _ = env
    assert status_of(conn.put_object, cont, "bad", b"x",
                     headers={"X-Symlink-Target": f"{cont}/tgt"}) == \
        (400, b"Symlink requests require a zero byte body")
    assert status_of(link, conn, cont, "bad", "tgt")[0] == 412
    assert status_of(link, conn, cont, "self", f"{cont}/self") == \
        (400, b"Symlink cannot target itself")
    assert status_of(conn.post_object, cont, "tgt",
                     headers={"X-Symlink-Target": "a/b"})[0] == 400


def test_loops_and_chains(env, cluster):
    conn, cont, _, _ = env
    link(conn, cont, "c1", f"{cont}/tgt")
    link(conn, cont, "c2", f"{cont}/c1")
    assert conn.get_object(cont, "c2")[1] == BODY  # symloop_max (2) links: fine
    link(conn, cont, "c3", f"{cont}/c2")
    assert status_of(conn.get_object, cont, "c3") == \
        (409, b"Too many levels of symbolic links, maximum allowed is 2")
    _, _, info = raw(cluster, "GET", "/info")
    assert json.loads(info)["symlink"] == {"symloop_max": 2, "static_links": True}


def test_static_links(env):
    conn, cont, url, _ = env
    assert status_of(link, conn, cont, "s0", f"{cont}/tgt",
                     **{"X-Symlink-Target-Etag": "nope"}) == \
        (409, f"Object Etag '{ETAG}' does not match X-Symlink-Target-Etag header "
              "'nope'".encode())
    assert status_of(link, conn, cont, "s0", f"{cont}/missing",
                     **{"X-Symlink-Target-Etag": EMPTY}) == \
        (409, b"X-Symlink-Target does not exist")
    conn.put_object(cont, "tgt2", BODY, content_type="text/t2")
    link(conn, cont, "s1", f"{cont}/tgt2", **{"X-Symlink-Target-Etag": f'"{ETAG}"'})
    own = conn.head_object(cont, "s1", query_string="symlink=get")
    assert own["x-symlink-target-etag"] == ETAG
    assert own["x-symlink-target-bytes"] == str(len(BODY))
    assert own["content-type"] == "text/t2"  # the target's, when none is given
    assert conn.get_object(cont, "s1")[1] == BODY
    row = wait_for(lambda: listing_row(conn, cont, "s1"), what="s1 listed")
    assert row["symlink_path"] == f"{storage_path(url)}/{cont}/tgt2"
    assert row["symlink_etag"] == ETAG and row["symlink_bytes"] == len(BODY)
    assert row["hash"] == EMPTY and row["bytes"] == 0
    conn.put_object(cont, "tgt2", b"changed")
    assert status_of(conn.get_object, cont, "s1")[0] == 409
    # POST to a link: 307 to the target, metadata on the link.
    status, headers, _ = raw_post(env, cont, "s1")
    assert status == 307 and headers["Location"] == f"{storage_path(url)}/{cont}/tgt2"
    assert headers["X-Symlink-Target-Etag"] == ETAG
    assert conn.head_object(cont, "s1", query_string="symlink=get")["x-object-meta-a"] == "b"


def raw_post(env, cont, name):
    import http.client
    import urllib.parse
    _, _, url, token = env
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request("POST", f"{u.path}/{cont}/{name}", headers={
            "X-Auth-Token": token, "X-Object-Meta-A": "b"})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def test_dynamic_listing_copy_and_delete(env):
    conn, cont, url, _ = env
    link(conn, cont, "d1", f"{cont}/tgt")
    row = wait_for(lambda: listing_row(conn, cont, "d1"), what="d1 listed")
    assert row["symlink_path"] == f"{storage_path(url)}/{cont}/tgt"
    assert "symlink_etag" not in row
    conn.copy_object(cont, "d1", f"/{cont}/d1data")  # the target's data
    headers, body = conn.get_object(cont, "d1data")
    assert body == BODY and "content-location" not in headers
    conn.put_object(cont, "d1link", b"", query_string="symlink=get",
                    headers={"X-Copy-From": f"{cont}/d1"})
    assert conn.head_object(cont, "d1link", query_string="symlink=get")[
        "x-symlink-target"] == f"{cont}/tgt"
    assert conn.get_object(cont, "d1link")[1] == BODY
    conn.delete_object(cont, "d1")
    assert conn.get_object(cont, "tgt")[1] == BODY


def test_acls_of_the_target_apply(env, cluster):
    conn, cont, url, _ = env
    url2, token2 = token_and_url(cluster, "test2:tester2", "testing2")
    conn2 = swiftclient.Connection(preauthurl=url2, preauthtoken=token2, retries=0)
    c2 = f"sym2-{uuid.uuid4().hex[:8]}"
    conn2.put_container(c2)
    acct1 = storage_path(url).rsplit("/", 1)[-1]
    link(conn2, c2, "x", f"{cont}/tgt", **{"X-Symlink-Target-Account": acct1})
    assert status_of(conn2.get_object, c2, "x")[0] == 403
    private = f"priv-{uuid.uuid4().hex[:8]}"
    conn.put_container(private)
    conn.put_object(private, "t", BODY)
    conn.post_container(private, {"X-Container-Read": "test2:tester2"})
    link(conn2, c2, "y", f"{private}/t", **{"X-Symlink-Target-Account": acct1})
    assert conn2.get_object(c2, "y")[1] == BODY


def test_static_link_to_an_slo(env):
    conn, cont, url, _ = env
    conn.put_object(cont, "seg", b"s" * 10)
    conn.put_object(cont, "man", json.dumps([{"path": f"/{cont}/seg"}]),
                    query_string="multipart-manifest=put")
    man_etag = conn.head_object(cont, "man", query_string="multipart-manifest=get")["etag"]
    link(conn, cont, "sl", f"{cont}/man", **{"X-Symlink-Target-Etag": man_etag})
    assert conn.get_object(cont, "sl")[1] == b"s" * 10
    row = wait_for(lambda: listing_row(conn, cont, "sl"), what="sl listed")
    assert row["symlink_bytes"] == 10 and row["symlink_etag"] == man_etag.strip('"')
    assert "slo_etag" in row
