"""Legacy versioned writes through a real `swiftlite up` proxy: X-Versions-Location (stack)
and X-History-Location (history) on containers, archives of overwritten objects, restores by
DELETE or COPY, delete markers, ACLs, large-object manifests versioned as manifests, and the
operator switch."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from urllib.parse import quote

import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from tests.helpers import http_request, start_proxy_variant
from tests.integration.test_proxy_api import raw, storage_path, token_and_url

MARKER = "application/x-deleted;swift_versions_deleted=1"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def prefix(name: str) -> str:
    return f"{len(name.encode()):03x}{name}/"


def new_name(kind: str) -> str:
    return f"vw-{kind}-{uuid.uuid4().hex[:8]}"


def status_of(call, *args, **kwargs) -> int:
    try:
        call(*args, **kwargs)
    except ClientException as exc:
        return exc.http_status
    return 200


@pytest.fixture(scope="module")
def conns(cluster):
    def connect(user: str, key: str) -> swiftclient.Connection:
        url, token = token_and_url(cluster, user, key)
        return swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    return {"owner": connect("test:tester", "testing"),
            "other": connect("test2:tester2", "testing2"),  # another account
            "user3": connect("test:tester3", "testing3")}   # no rights in AUTH_test


@pytest.fixture
def versioned(conns):
    """(conn, container, archive): a stack-mode container and its archive."""
    conn = conns["owner"]
    cont, archive = new_name("c"), new_name("v")
    conn.put_container(archive)
    conn.put_container(cont, headers={"X-Versions-Location": archive})
    return conn, cont, archive


def archived(conn, archive: str, name: str) -> list[dict]:
    return conn.get_container(archive, prefix=prefix(name))[1]


def test_info_advertises_the_flags(cluster):
    status, _, body = raw(cluster, "GET", "/info")
    assert status == 200
    assert json.loads(body)["versioned_writes"] == {
        "allowed_flags": ["x-versions-location", "x-history-location"]}


def test_container_headers_set_show_switch_and_remove(conns, cluster):
    conn = conns["owner"]
    cont, archive = new_name("c"), new_name("v")
    conn.put_container(cont, headers={"X-Versions-Location": quote(archive + " é")})
    # Shown as sent (swiftclient would decode it: look at the raw answer).
    _, head, _ = raw(cluster, "HEAD", f"{storage_path(conn.url)}/{cont}",
                     {"X-Auth-Token": conn.token})
    assert head["X-Versions-Location"] == quote(archive + " é")
    assert not any(k.lower().startswith("x-container-sysmeta") for k in head)
    head = conn.head_container(cont)
    conn.post_container(cont, {"X-History-Location": archive})
    head = conn.head_container(cont)
    assert head["x-history-location"] == archive and "x-versions-location" not in head
    conn.post_container(cont, {"X-Remove-Versions-Location": "x"})
    assert "x-history-location" not in conn.head_container(cont)
    conn.post_container(cont, {"X-Versions-Location": archive})
    conn.post_container(cont, {"X-Versions-Location": ""})
    assert "x-versions-location" not in conn.head_container(cont)
    # A location and a removal together: the location wins.
    conn.post_container(cont, {"X-Versions-Location": archive,
                               "X-Remove-Versions-Location": "x"})
    assert conn.head_container(cont)["x-versions-location"] == archive


def test_container_headers_refused(conns, cluster):
    conn = conns["owner"]
    cont, archive = new_name("c"), new_name("v")
    conn.put_container(cont)
    with pytest.raises(ClientException) as both:
        conn.post_container(cont, {"X-Versions-Location": archive,
                                   "X-History-Location": archive})
    assert both.value.http_status == 400
    assert b"Only one of" in both.value.http_response_content
    with pytest.raises(ClientException) as slash:
        conn.post_container(cont, {"X-Versions-Location": "a/b"})
    assert slash.value.http_status == 412
    assert "x-versions-location" not in conn.head_container(cont)
    # Only who may POST the container sets it: a user with write access to it may not.
    conn.post_container(cont, {"X-Container-Write": "test2:tester2"})
    path = f"{storage_path(conn.url)}/{quote(cont)}"
    token = conns["other"].token
    status, _, _ = raw(cluster, "POST", path, {"X-Auth-Token": token,
                                               "X-Versions-Location": archive})
    assert status == 403
    assert "x-versions-location" not in conn.head_container(cont)


def test_overwritten_image_restored_from_its_previous_version(versioned):
    conn, cont, archive = versioned
    first, second = os.urandom(40_000), os.urandom(30_000)
    conn.put_object(cont, "cat.jpg", first, content_type="image/jpeg",
                    headers={"X-Object-Meta-Camera": "X100", "Content-Disposition": "inline"})
    conn.put_object(cont, "cat.jpg", second, content_type="image/png")
    conn.post_object(cont, "cat.jpg", {"X-Object-Meta-Edited": "yes"})  # no new version
    (item,) = archived(conn, archive, "cat.jpg")
    assert item["name"].startswith("007cat.jpg/") and item["content_type"] == "image/jpeg"
    assert item["hash"] == md5(first) and item["bytes"] == len(first)
    headers, body = conn.get_object(archive, item["name"])
    assert body == first and headers["x-object-meta-camera"] == "X100"
    assert conn.get_object(cont, "cat.jpg")[1] == second

    conn.delete_object(cont, "cat.jpg")  # stack mode: the previous version comes back
    headers, body = conn.get_object(cont, "cat.jpg")
    assert body == first
    assert headers["content-type"] == "image/jpeg"
    assert headers["x-object-meta-camera"] == "X100"
    assert headers["content-disposition"] == "inline"
    assert "x-object-meta-edited" not in headers
    assert archived(conn, archive, "cat.jpg") == []
    conn.delete_object(cont, "cat.jpg")  # nothing left to restore: deleted
    assert status_of(conn.get_object, cont, "cat.jpg") == 404


def test_versions_in_order_and_utf8_names(versioned):
    conn, cont, archive = versioned
    name = "ünïcode/ñame"
    for body in (b"v1", b"v2", b"v3", b"v4"):
        conn.put_object(cont, name, body)
    items = archived(conn, archive, name)
    # 15 UTF-8 bytes (12 characters): 00f
    assert [i["name"].split("/")[0] for i in items] == ["00f\u00fcn\u00efcode"] * 3
    assert [conn.get_object(archive, i["name"])[1] for i in items] == [b"v1", b"v2", b"v3"]
    for expected in (b"v3", b"v2", b"v1"):
        conn.delete_object(cont, name)
        assert conn.get_object(cont, name)[1] == expected
    conn.delete_object(cont, name)
    assert status_of(conn.delete_object, cont, name) == 404


def test_copy_over_a_versioned_object_archives_it(versioned):
    conn, cont, archive = versioned
    conn.put_object(cont, "o", b"original")
    conn.put_object(cont, "src", b"copied")
    conn.copy_object(cont, "src", f"/{cont}/o")
    assert conn.get_object(cont, "o")[1] == b"copied"
    (item,) = archived(conn, archive, "o")
    # Restoring by COPY from the archive archives the current one in turn.
    conn.copy_object(archive, item["name"], f"/{cont}/o")
    assert conn.get_object(cont, "o")[1] == b"original"
    bodies = [conn.get_object(archive, i["name"])[1] for i in archived(conn, archive, "o")]
    assert bodies == [b"original", b"copied"]


def test_history_mode_keeps_everything_and_marks_deletes(conns):
    conn = conns["owner"]
    cont, archive = new_name("c"), new_name("v")
    conn.put_container(archive)
    conn.put_container(cont, headers={"X-History-Location": archive})
    conn.put_object(cont, "o", b"one", content_type="text/one")
    conn.put_object(cont, "o", b"two", content_type="text/two")
    conn.delete_object(cont, "o")
    assert status_of(conn.get_object, cont, "o") == 404
    assert status_of(conn.delete_object, cont, "o") == 404  # still marked
    items = archived(conn, archive, "o")
    assert [i["content_type"] for i in items] == ["text/one", "text/two", MARKER, MARKER]
    assert [i["bytes"] for i in items] == [3, 3, 0, 0]

    # Back to stack mode: a DELETE removes the newest marker only while an older one is
    # under it; then the last version before the markers comes back.
    conn.post_container(cont, {"X-Versions-Location": archive})
    conn.delete_object(cont, "o")
    assert len(archived(conn, archive, "o")) == 3
    assert status_of(conn.get_object, cont, "o") == 404
    conn.delete_object(cont, "o")
    assert conn.get_object(cont, "o")[1] == b"two"
    assert [i["content_type"] for i in archived(conn, archive, "o")] == ["text/one"]


def test_missing_archive_refuses_the_overwrite(conns):
    conn = conns["owner"]
    cont = new_name("c")
    conn.put_container(cont, headers={"X-Versions-Location": new_name("missing")})
    conn.put_object(cont, "o", b"first")  # nothing to archive yet
    assert status_of(conn.put_object, cont, "o", b"second") == 412
    assert conn.get_object(cont, "o")[1] == b"first"
    conn.post_container(cont, {"X-History-Location": new_name("missing")})
    assert status_of(conn.delete_object, cont, "o") == 412
    assert conn.get_object(cont, "o")[1] == b"first"


def test_acls_judge_the_versioned_container_not_the_archive(conns, versioned):
    conn, cont, archive = versioned
    conn.post_container(cont, {"X-Container-Write": "test2:tester2",
                               "X-Container-Read": "test2:tester2"})
    other = swiftclient.Connection(preauthurl=conn.url, preauthtoken=conns["other"].token,
                                   retries=0)
    other.put_object(cont, "o", b"first")
    other.put_object(cont, "o", b"second")  # archived, though it may not write the archive
    assert len(archived(conn, archive, "o")) == 1
    assert status_of(other.get_object, archive, archived(conn, archive, "o")[0]["name"]) == 403

    user3 = swiftclient.Connection(preauthurl=conn.url, preauthtoken=conns["user3"].token,
                                   retries=0)
    assert status_of(user3.put_object, cont, "o", b"third") == 403
    assert status_of(user3.delete_object, cont, "o") == 403
    assert status_of(user3.put_object, cont, "o", b"",
                     headers={"X-Copy-From": f"{cont}/o"}) == 403
    assert len(archived(conn, archive, "o")) == 1 and \
        conn.get_object(cont, "o")[1] == b"second"

    other.delete_object(cont, "o")  # restores from an archive it cannot touch itself
    assert conn.get_object(cont, "o")[1] == b"first"
    assert archived(conn, archive, "o") == []


def test_slo_manifest_versioned_as_a_manifest(versioned):
    conn, cont, archive = versioned
    segs = {"a": b"a" * 2000, "b": b"b" * 3000}
    seg_cont = new_name("segs")
    conn.put_container(seg_cont)
    for n, data in segs.items():
        conn.put_object(seg_cont, f"seg-{n}", data)

    def manifest(n: str) -> str:
        return json.dumps([{"path": f"/{seg_cont}/seg-{n}", "etag": md5(segs[n]),
                            "size_bytes": len(segs[n])}])
    conn.put_object(cont, "big", manifest("a"), query_string="multipart-manifest=put")
    listed = {i["name"]: i for i in conn.get_container(cont)[1]}["big"]
    conn.put_object(cont, "big", manifest("b"), query_string="multipart-manifest=put")
    assert conn.get_object(cont, "big")[1] == segs["b"]
    (item,) = archived(conn, archive, "big")
    assert item["bytes"] == listed["bytes"] == len(segs["a"])  # the SLO's size, as listed
    headers, body = conn.get_object(archive, item["name"],
                                    query_string="multipart-manifest=get")
    assert headers["x-static-large-object"] == "True"
    assert json.loads(body)[0]["name"] == f"/{seg_cont}/seg-a"
    assert conn.get_object(archive, item["name"])[1] == segs["a"]
    conn.delete_object(cont, "big")
    headers, body = conn.get_object(cont, "big")
    assert body == segs["a"] and headers["x-static-large-object"] == "True"


def test_dlo_manifest_versioned_as_a_manifest(versioned):
    conn, cont, archive = versioned
    conn.put_object(cont, "parts/1", b"11")
    conn.put_object(cont, "parts/2", b"22")
    conn.put_object(cont, "dlo", b"plain")
    conn.put_object(cont, "dlo", b"", headers={"X-Object-Manifest": f"{cont}/parts/"})
    assert conn.get_object(cont, "dlo")[1] == b"1122"
    conn.put_object(cont, "dlo", b"plain again")
    items = archived(conn, archive, "dlo")
    headers, body = conn.get_object(archive, items[-1]["name"])
    assert body == b"1122" and headers["x-object-manifest"] == f"{cont}/parts/"
    conn.delete_object(cont, "dlo")
    headers, body = conn.get_object(cont, "dlo")
    assert body == b"1122" and "x-object-manifest" in headers


def test_switched_off_by_the_operator(cluster, conns):
    proxy = start_proxy_variant(cluster, "vw-off",
                                filters={"versioned_writes":
                                         {"allow_versioned_writes": "false"}})
    try:
        base = f"http://127.0.0.1:{proxy.port}"
        status, _, body = http_request(base, "GET", "/info")
        assert "versioned_writes" not in json.loads(body)
        path = f"{storage_path(conns['owner'].url)}/{new_name('c')}"
        status, _, body = http_request(base, "PUT", path,
                                       {"X-Auth-Token": conns["owner"].token,
                                        "X-Versions-Location": "archive"})
        assert status == 412 and body == b"Versioned Writes is disabled"
    finally:
        proxy.stop()
