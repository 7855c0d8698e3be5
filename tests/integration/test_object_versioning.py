"""Object versioning (X-Versions-Enabled) through a real `swiftlite up` proxy: an overwritten
image restored from its previous version, ?versions listings, delete markers, reads and
deletes by version id, and the hidden versions container that no client can reach."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
import uuid

import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from swiftlite.common.timestamp import Timestamp
from tests.helpers import wait_for
from tests.integration.test_proxy_api import raw, storage_path, token_and_url

DELETE_MARKER = "application/x-deleted;swift_versions_deleted=1"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
def versioned(cluster):
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"ov-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont, headers={"X-Versions-Enabled": "true"})
    return conn, cont, url, token


def versions(conn, cont: str, **params) -> list[dict]:
    query = "&".join(["versions", "format=json"] +
                     [f"{k}={urllib.parse.quote(str(v))}" for k, v in params.items()])
    _, body = conn.get_container(cont, query_string=query)
    return body


def put(conn, cont: str, name: str, data: bytes, ctype: str = "image/jpeg") -> str:
    resp: dict = {}
    conn.put_object(cont, name, data, content_type=ctype, response_dict=resp)
    return resp["headers"]["x-object-version-id"]


def test_overwritten_image_restored_from_previous_version(versioned):
    conn, cont, _, _ = versioned
    first, second = b"\xff\xd8 first image", b"\xff\xd8 second, overwriting image"
    v1 = put(conn, cont, "cat.jpg", first)
    v2 = put(conn, cont, "cat.jpg", second)
    assert v1 != v2
    headers, body = conn.get_object(cont, "cat.jpg")
    assert body == second and headers["x-object-version-id"] == v2
    # The previous version is still there, by its id.
    headers, body = conn.get_object(cont, "cat.jpg", query_string=f"version-id={v1}")
    assert body == first and headers["etag"] == md5(first)
    # Restore: PUT ?version-id with an empty body makes v1 current again (no new version).
    resp: dict = {}
    conn.put_object(cont, "cat.jpg", b"", query_string=f"version-id={v1}",
                    response_dict=resp)
    assert resp["status"] == 201 and resp["headers"]["x-object-version-id"] == v1
    headers, body = conn.get_object(cont, "cat.jpg")
    assert body == first and headers["x-object-version-id"] == v1
    listing = versions(conn, cont)
    assert [(i["version_id"], i["is_latest"], i["bytes"], i["hash"]) for i in listing] == [
        (v2, False, len(second), md5(second)), (v1, True, len(first), md5(first))]
    # The plain listing shows one object, with the current version's size and ETag.
    _, plain = conn.get_container(cont)
    assert [(i["name"], i["bytes"], i["hash"]) for i in plain] == \
        [("cat.jpg", len(first), md5(first))]


def test_listing_time_is_the_current_versions_own(versioned):
    """The plain listing's last_modified is the time of the version a HEAD reads, to the
    microsecond: a listing and a HEAD that disagreed across a second boundary made S3's
    LastModified differ between ListObjects and HeadObject now and then."""
    conn, cont, _, _ = versioned
    for i in range(3):
        put(conn, cont, f"img-{i}.jpg", b"\xff\xd8 image %d" % i)
    _, plain = conn.get_container(cont)
    assert len(plain) == 3
    for row in plain:
        head = conn.head_object(cont, row["name"])
        stamp = Timestamp.parse(head["x-timestamp"])
        assert row["last_modified"] == stamp.iso(), row
        assert head["x-object-version-id"] == stamp.normal


def test_versions_listing_and_delete_markers(versioned, cluster):
    conn, cont, url, token = versioned
    va = put(conn, cont, "a", b"aaa", "text/a1")
    vb1 = put(conn, cont, "b", b"b1", "text/b1")
    vb2 = put(conn, cont, "b", b"b22", "text/b2")
    resp: dict = {}
    conn.delete_object(cont, "b", response_dict=resp)
    marker = resp["headers"]["x-object-version-id"]
    with pytest.raises(ClientException) as err:
        conn.get_object(cont, "b")
    assert err.value.http_status == 404
    listing = versions(conn, cont)
    assert [(i["name"], i["version_id"], i["is_latest"], i["content_type"])
            for i in listing] == [
        ("a", va, True, "text/a1"), ("b", marker, True, DELETE_MARKER),
        ("b", vb2, False, "text/b2"), ("b", vb1, False, "text/b1")]
    # A delete marker reads as a 404 that names it.
    with pytest.raises(ClientException) as err:
        conn.head_object(cont, "b", query_string=f"version-id={marker}")
    assert err.value.http_status == 404
    # Pagination by marker and version_marker, and reverse.
    assert [i["version_id"] for i in versions(conn, cont, marker="b", version_marker=vb2)] \
        == [vb1]
    assert [i["version_id"] for i in versions(conn, cont, limit=2)] == [va, marker]
    assert [i["version_id"] for i in versions(conn, cont, reverse="true")] == \
        [vb1, vb2, marker, va]
    # Only JSON is offered for version listings, as in Swift.
    path = f"{storage_path(url)}/{cont}?versions"
    assert raw(cluster, "GET", path + "&format=xml", {"X-Auth-Token": token})[0] == 406
    status, headers, body = raw(cluster, "GET", path, {"X-Auth-Token": token})
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert len(json.loads(body)) == 4


def test_delete_by_version_id_and_container_delete(versioned):
    conn, cont, _, _ = versioned
    v1 = put(conn, cont, "o", b"one")
    v2 = put(conn, cont, "o", b"two")
    # Deleting an old version leaves the current one.
    resp: dict = {}
    conn.delete_object(cont, "o", query_string=f"version-id={v1}", response_dict=resp)
    assert resp["headers"]["x-object-current-version-id"] == v2
    assert conn.get_object(cont, "o")[1] == b"two"
    # The container cannot go while versions remain.
    with pytest.raises(ClientException) as err:
        conn.delete_container(cont)
    assert err.value.http_status == 409
    # Deleting the current version removes the object itself.
    conn.delete_object(cont, "o", query_string=f"version-id={v2}")
    with pytest.raises(ClientException) as err:
        conn.get_object(cont, "o")
    assert err.value.http_status == 404
    assert versions(conn, cont) == []
    conn.post_container(cont, headers={"X-Versions-Enabled": "false"})
    conn.delete_container(cont)
    with pytest.raises(ClientException):
        conn.head_container(cont)


def test_unversioned_object_becomes_null_version(cluster):
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"ov-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont)
    conn.put_object(cont, "o", b"before versioning")
    conn.post_container(cont, headers={"X-Versions-Enabled": "true"})
    assert conn.head_container(cont)["x-versions-enabled"] == "True"
    assert conn.get_object(cont, "o", query_string="version-id=null")[1] == \
        b"before versioning"
    v = put(conn, cont, "o", b"after")
    listing = versions(conn, cont)
    assert [i["version_id"] == v for i in listing] == [True, False]
    old = listing[1]["version_id"]
    assert conn.get_object(cont, "o", query_string=f"version-id={old}")[1] == \
        b"before versioning"
    # Bytes used count every version.
    wait_for(lambda: conn.head_container(cont)["x-container-bytes-used"] ==
             str(len(b"before versioning") + len(b"after")))


def test_reserved_names_unreachable_by_clients(versioned, cluster):
    """The versions container exists, but no client request names or lists it."""
    conn, cont, url, token = versioned
    put(conn, cont, "secret", b"hidden data")
    base = storage_path(url)
    auth = {"X-Auth-Token": token}
    hidden = urllib.parse.quote(f"\x00versions\x00{cont}", safe="")
    for method in ("GET", "HEAD", "PUT", "DELETE", "POST"):
        status, _, _ = raw(cluster, method, f"{base}/{hidden}", auth, b"")
        assert status == 412, method
        status, _, _ = raw(cluster, method, f"{base}/{hidden}/x", auth, b"")
        assert status == 412, method
    # No header a client can send opens the namespace.
    status, _, _ = raw(cluster, "GET", f"{base}/{hidden}",
                       {**auth, "X-Backend-Allow-Reserved-Names": "true"})
    assert status == 412
    # The account listing hides the versions container, whatever the marker.
    for query in ("", "&marker=%00", "&prefix=%00", "&reverse=true", "&end_marker=%00zzz"):
        status, _, body = raw(cluster, "GET", f"{base}?format=json{query}",
                              {**auth, "X-Backend-Allow-Reserved-Names": "true"})
        assert status == 200
        assert not any("\x00" in c["name"] for c in json.loads(body)), query
    # An object name with a NUL is refused too.
    status, _, _ = raw(cluster, "PUT", f"{base}/{cont}/%00secret%00x", auth, b"x")
    assert status == 412


def test_symlinks_to_versioned_objects_read_the_current_version(versioned, cluster):
    """A versioned name is a link to its version: a client's symlink (dynamic or static, in
    any container) that reaches it reads the version, a symlink kept as a version still
    leads to its target, and the link never opens the versions to anyone else."""
    conn, cont, url, token = versioned
    put(conn, cont, "target", b"target data v1", "text/t1")
    etag = conn.head_object(cont, "target")["etag"]
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    conn.put_container(plain)
    conn.put_object(plain, "dyn", b"", headers={"X-Symlink-Target": f"{cont}/target"})
    conn.put_object(plain, "static", b"", headers={"X-Symlink-Target": f"{cont}/target",
                                                   "X-Symlink-Target-Etag": etag})
    assert conn.get_object(plain, "dyn")[1] == b"target data v1"
    headers, body = conn.get_object(plain, "static")
    assert body == b"target data v1" and headers["content-type"] == "text/t1"
    # A symlink stored in the versioned container, overwritten, then restored by COPY.
    resp: dict = {}
    conn.put_object(cont, "link", b"", headers={"X-Symlink-Target": f"{cont}/target"},
                    content_type="application/symlink", response_dict=resp)
    sv = resp["headers"]["x-object-version-id"]
    assert conn.get_object(cont, "link")[1] == b"target data v1"
    put(conn, cont, "link", b"not a link any more")
    status, _, _ = raw(cluster, "COPY",
                       f"{storage_path(url)}/{cont}/link?version-id={sv}&symlink=get",
                       {"X-Auth-Token": token, "Destination": f"{cont}/link"})
    assert status == 201
    assert conn.get_object(cont, "link")[1] == b"target data v1"
    # The target moves on: the dynamic link follows, the static one no longer matches.
    put(conn, cont, "target", b"target data v2", "text/t2")
    assert conn.get_object(plain, "dyn")[1] == b"target data v2"
    with pytest.raises(ClientException) as caught:
        conn.get_object(plain, "static")
    assert caught.value.http_status == 409
    # A reader of the link's container only: the versioned target is judged as the caller.
    conn.post_container(plain, {"X-Container-Read": "test:tester3"})
    url3, token3 = token_and_url(cluster, "test:tester3", "testing3")
    conn3 = swiftclient.Connection(preauthurl=url3, preauthtoken=token3, retries=0)
    with pytest.raises(ClientException) as caught:
        conn3.get_object(plain, "dyn")
    assert caught.value.http_status == 403
    # The visible object never shows itself as a link into the reserved namespace.
    status, headers, _ = raw(cluster, "HEAD",
                             f"{storage_path(url)}/{cont}/target?symlink=get",
                             {"X-Auth-Token": token})
    assert status == 200 and "x-symlink-target" not in {k.lower() for k in headers}


def test_copy_of_a_versioned_link_is_no_way_into_the_versions(versioned, cluster):
    """COPY of a versioned name with ?symlink=get copies the version, never the link: no
    object elsewhere can point into the hidden container."""
    conn, cont, url, token = versioned
    put(conn, cont, "o", b"version data")
    other = f"plain-{uuid.uuid4().hex[:8]}"
    conn.put_container(other)
    status, _, _ = raw(cluster, "COPY", f"{storage_path(url)}/{cont}/o?symlink=get",
                       {"X-Auth-Token": token, "Destination": f"{other}/copy"})
    assert status == 201
    headers = conn.head_object(other, "copy", query_string="symlink=get")
    assert "x-symlink-target" not in headers
    assert conn.get_object(other, "copy")[1] == b"version data"


def test_container_bytes_quota_counts_the_versions(versioned):
    conn, cont, _, _ = versioned
    put(conn, cont, "o", b"aaaaa")
    put(conn, cont, "o", b"bbbbb")
    conn.post_container(cont, {"X-Container-Meta-Quota-Bytes": "10"})
    with pytest.raises(ClientException) as caught:
        put(conn, cont, "o", b"ccccc")
    assert caught.value.http_status == 413
    conn.post_container(cont, {"X-Container-Meta-Quota-Bytes": ""})
    put(conn, cont, "o", b"ccccc")


def test_slo_versions_by_id_part_number_and_manifest_delete(versioned):
    conn, cont, _, _ = versioned
    segs = f"segs-{uuid.uuid4().hex[:8]}"
    conn.put_container(segs)
    for n, data in (("a", b"A" * 10), ("b", b"B" * 20)):
        conn.put_object(segs, n, data)
    manifest = [{"path": f"{segs}/a"}, {"path": f"{segs}/b"}]
    resp: dict = {}
    conn.put_object(cont, "big", json.dumps(manifest), response_dict=resp,
                    query_string="multipart-manifest=put")
    v1 = resp["headers"]["x-object-version-id"]
    conn.put_object(cont, "big", json.dumps(manifest[:1]), response_dict=resp,
                    query_string="multipart-manifest=put")
    v2 = resp["headers"]["x-object-version-id"]
    # HEAD of a part of the older version: that version's manifest decides.
    headers = conn.head_object(cont, "big", query_string=f"part-number=2&version-id={v1}")
    assert headers["x-parts-count"] == "2"
    assert headers["content-range"] == "bytes 10-29/30"
    assert headers["x-object-version-id"] == v1
    # ?multipart-manifest=delete&version-id: that version and its segments, nothing else.
    _, body = conn.get_object(cont, "big", query_string=f"version-id={v1}")
    assert body == b"A" * 10 + b"B" * 20
    conn.delete_object(cont, "big", query_string=f"multipart-manifest=delete&version-id={v1}")
    assert [i["version_id"] for i in versions(conn, cont)] == [v2]
    assert [i["name"] for i in conn.get_container(segs)[1]] == []
