"""Bulk delete and archive extraction (Swift's `bulk`) through a real `swiftlite up` proxy.

The answers' formats were compared byte for byte with Swift 2.38.3's. A second proxy on the
same cluster has small limits and a short heartbeat interval, to see those at work quickly.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import http_request, start_proxy_variant, wait_for
from tests.integration.test_proxy_api import storage_path, token_and_url

SWIFT = os.path.join(os.path.dirname(sys.executable), "swift")
JSON = {"Accept": "application/json", "Content-Type": "text/plain"}


def call(base: str, method: str, path: str, headers: dict | None = None,
         body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    # A generous timeout: deleting or extracting a thousand items takes a while.
    return http_request(base, method, path, headers, body, timeout=120)


def report(base: str, method: str, path: str, token: str | None, body: bytes,
           **headers: str) -> dict:
    """A bulk request's JSON report (after any heartbeat whitespace); the HTTP status is 200
    whatever happened."""
    h = {**JSON, **headers}
    if token:
        h["X-Auth-Token"] = token
    status, resp_headers, data = call(base, method, path, h, body)
    assert status == 200 and resp_headers["Content-Type"] == "application/json"
    return json.loads(data)


def tarball(members: list[tuple[str, bytes | None]], mode: str = "w:gz",
            pax: dict[str, dict[str, str]] | None = None) -> bytes:
    """An archive of `members` (data None: a directory); `pax` adds records to members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
                continue
            info.size = len(data)
            info.pax_headers = (pax or {}).get(name, {})
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unique(prefix: str = "b") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def owner(cluster):
    url, token = token_and_url(cluster)
    return cluster.proxy_url, storage_path(url), token


def put_many(base: str, acct: str, token: str, container: str, names: list[str]) -> None:
    assert call(base, "PUT", f"{acct}/{container}", {"X-Auth-Token": token})[0] in (201, 202)

    def put(name: str) -> int:
        return call(base, "PUT", f"{acct}/{container}/{urllib.parse.quote(name)}",
                    {"X-Auth-Token": token}, name.encode())[0]

    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(put, names)) == {201}


def listing(base: str, acct: str, token: str, container: str) -> list[str]:
    status, _, body = call(base, "GET", f"{acct}/{container}?format=json",
                           {"X-Auth-Token": token})
    return [o["name"] for o in json.loads(body)] if status == 200 else []


def test_info_advertises_both_as_swift_does(cluster):
    info = json.loads(call(cluster.proxy_url, "GET", "/info")[2])
    assert info["bulk_delete"] == {"max_deletes_per_request": 10000, "max_failed_deletes": 1000}
    assert info["bulk_upload"] == {"max_containers_per_extraction": 10000,
                                   "max_failed_extractions": 1000}
    assert "bulk" not in info


# ---- bulk delete -----------------------------------------------------------------------------

def test_bulk_delete_a_thousand_objects_and_their_container(owner):
    base, acct, token = owner
    cont = unique()
    names = [f"obj-{i:04d}" for i in range(1000)]
    put_many(base, acct, token, cont, names)
    body = "".join(f"/{cont}/{n}\n" for n in names)
    # The container is listed first: it is still deleted after its objects.
    body = f"/{cont}\n" + body + f"/{cont}/missing-1\n{cont}/missing-2\n"
    result = report(base, "POST", f"{acct}?bulk-delete", token, body.encode())
    assert result == {"Response Status": "200 OK", "Response Body": "", "Number Deleted": 1001,
                      "Number Not Found": 2, "Errors": []}
    assert call(base, "HEAD", f"{acct}/{cont}", {"X-Auth-Token": token})[0] == 404


def test_not_found_is_counted_in_every_format(owner):
    base, acct, token = owner
    body = b"/nosuch-container/x\n/nosuch-container\n"
    h = {"X-Auth-Token": token, "Content-Type": "text/plain"}
    status, headers, data = call(base, "DELETE", f"{acct}?bulk-delete", h, body)
    assert (status, headers["Content-Type"]) == (200, "text/plain")
    assert data == b"Number Deleted: 0\nNumber Not Found: 2\nResponse Body: \n" \
                   b"Response Status: 200 OK\nErrors:\n"
    status, headers, data = call(base, "DELETE", f"{acct}?bulk-delete",
                                 {**h, "Accept": "application/xml"}, body)
    assert headers["Content-Type"] == "application/xml"
    assert data == (b"<delete>\n<number_deleted>0</number_deleted>\n"
                    b"<number_not_found>2</number_not_found>\n<response_body></response_body>\n"
                    b"<response_status>200 OK</response_status>\n<errors>\n</errors>\n"
                    b"</delete>\n")


def test_a_non_empty_container_is_an_error_and_objects_go_first(owner):
    base, acct, token = owner
    cont = unique()
    put_many(base, acct, token, cont, ["keep", "a b"])
    result = report(base, "DELETE", f"{acct}?bulk-delete", token,
                    f"/{cont}\n{cont}/a%20b\n".encode())
    assert result == {"Response Status": "400 Bad Request", "Response Body": "",
                      "Number Deleted": 1, "Number Not Found": 0,
                      "Errors": [[f"/{cont}", "409 Conflict"]]}
    assert listing(base, acct, token, cont) == ["keep"]


def test_another_accounts_objects_are_not_deleted(cluster, owner):
    base, acct, token = owner
    cont = unique()
    put_many(base, acct, token, cont, ["victim"])
    _, other = token_and_url(cluster, "test2:tester2", "testing2")
    # A user of another account, on the owner's account: refused item by item.
    result = report(base, "POST", f"{acct}?bulk-delete", other, f"/{cont}/victim\n".encode())
    assert result["Errors"] == [[f"/{cont}/victim", "403 Forbidden"]]
    assert result["Response Status"] == "400 Bad Request" and result["Number Deleted"] == 0
    # On their own account, paths that climb out of it reach nothing.
    result = report(base, "POST", "/v1/AUTH_test2?bulk-delete", other,
                    f"/../AUTH_test/{cont}/victim\n/%2E%2E/AUTH_test/{cont}/victim\n".encode())
    assert result["Number Deleted"] == 0
    assert {status for _, status in result["Errors"]} == {"400 Bad Request"}
    assert listing(base, acct, token, cont) == ["victim"]


def test_unauthenticated_requests_delete_and_create_nothing(owner):
    base, acct, token = owner
    cont = unique()
    put_many(base, acct, token, cont, ["o"])
    for bad in (None, "AUTH_tk" + "0" * 40):
        result = report(base, "DELETE", f"{acct}?bulk-delete", bad, f"/{cont}/o\n".encode())
        assert result["Errors"] == [[f"/{cont}/o", "401 Unauthorized"]]
        assert result["Number Deleted"] == 0
        result = report(base, "PUT", f"{acct}/{cont}-new?extract-archive=tar.gz", bad,
                        tarball([("f.txt", b"x")]))
        assert result["Response Status"] == "401 Unauthorized"
        assert result["Number Files Created"] == 0
    assert listing(base, acct, token, cont) == ["o"]
    assert call(base, "HEAD", f"{acct}/{cont}-new", {"X-Auth-Token": token})[0] == 404


def test_too_many_paths_is_swifts_413_and_deletes_nothing(owner):
    base, acct, token = owner
    cont = unique()
    put_many(base, acct, token, cont, ["first"])
    body = f"/{cont}/first\n".encode() + b"".join(b"/c/o%d\n" % i for i in range(10000))
    result = report(base, "POST", f"{acct}?bulk-delete", token, body)
    assert result["Response Status"] == "413 Request Entity Too Large"
    assert result["Response Body"] == "Maximum Bulk Deletes: 10000 per request"
    assert result["Number Deleted"] == 0
    assert listing(base, acct, token, cont) == ["first"]


def test_bad_names_and_bodies_are_reported(owner):
    base, acct, token = owner
    result = report(base, "POST", f"{acct}?bulk-delete", token, b"/c/%FF\n/c/a%00b\n/c/ok\n")
    assert result["Errors"] == [["/c/%FF", "412 Precondition Failed"],
                                ["/c/a%00b", "412 Precondition Failed"]]
    assert result["Number Not Found"] == 1
    assert report(base, "POST", f"{acct}?bulk-delete", token, b"") == {
        "Response Status": "400 Bad Request", "Response Body": "Invalid bulk delete.",
        "Number Deleted": 0, "Number Not Found": 0, "Errors": []}
    result = report(base, "POST", f"{acct}?bulk-delete", token, b"/c/o\n",
                    **{"Content-Type": "application/json"})
    assert result["Response Status"] == "406 Not Acceptable"


# ---- extract archive ---------------------------------------------------------------------------

def test_extract_a_thousand_file_tar_gz_into_a_container(owner):
    base, acct, token = owner
    cont = unique()
    members: list[tuple[str, bytes | None]] = [("photos", None)]
    members += [(f"photos/img-{i:04d}.jpg", b"%d" % i) for i in range(1000)]
    result = report(base, "PUT", f"{acct}/{cont}?extract-archive=tar.gz", token,
                    tarball(members))
    assert result == {"Response Status": "201 Created", "Response Body": "",
                      "Number Files Created": 1000, "Errors": []}
    names = listing(base, acct, token, cont)  # one page: the limit is 10000
    assert names == [f"photos/img-{i:04d}.jpg" for i in range(1000)]
    assert call(base, "GET", f"{acct}/{cont}/photos/img-0777.jpg",
                {"X-Auth-Token": token})[2] == b"777"


def test_extract_to_the_account_creates_containers_and_keeps_xattrs(owner):
    base, acct, token = owner
    c1, c2 = unique(), unique()
    members = [(f"./{c1}/a.txt", b"alpha"), (f"{c2}/deep/b.bin", b"beta"),
               ("top-level.txt", b"skipped")]
    pax = {f"{c2}/deep/b.bin": {"SCHILY.xattr.user.meta.color": "blue",
                                "SCHILY.xattr.user.mime_type": "image/x-test"}}
    result = report(base, "PUT", f"{acct}?extract-archive=tar.bz2", token,
                    tarball(members, "w:bz2", pax), **{"X-Object-Meta-Batch": "7"})
    assert result["Number Files Created"] == 2 and result["Errors"] == []
    assert listing(base, acct, token, c1) == ["a.txt"]
    assert listing(base, acct, token, c2) == ["deep/b.bin"]
    _, headers, body = call(base, "GET", f"{acct}/{c2}/deep/b.bin", {"X-Auth-Token": token})
    assert body == b"beta" and headers["Content-Type"] == "image/x-test"
    assert headers["X-Object-Meta-Color"] == "blue" and headers["X-Object-Meta-Batch"] == "7"


def test_extract_refuses_climbing_and_absolute_names(owner):
    base, acct, token = owner
    cont = unique()
    members = [("../escape.txt", b"1"), ("ok/../../escape.txt", b"2"), ("/etc/passwd", b"3"),
               ("fine.txt", b"4")]
    result = report(base, "PUT", f"{acct}/{cont}/in?extract-archive=tar", token,
                    tarball(members, "w"))
    assert result["Number Files Created"] == 1
    assert result["Response Status"] == "400 Bad Request"
    assert result["Errors"] == [[f"{cont}/in/../escape.txt", "400 Bad Request"],
                                [f"{cont}/in/ok/../../escape.txt", "400 Bad Request"],
                                [f"{cont}/in//etc/passwd", "400 Bad Request"]]
    assert listing(base, acct, token, cont) == ["in/fine.txt"]
    # At the account level a ".." container is refused the same way.
    result = report(base, "PUT", f"{acct}?extract-archive=tar", token,
                    tarball([("../x/y.txt", b"5")], "w"))
    assert result["Errors"] == [["../x/y.txt", "400 Bad Request"]]
    assert result["Number Files Created"] == 0


def test_bad_archives_are_reported(owner):
    base, acct, token = owner
    result = report(base, "PUT", f"{acct}/{unique()}?extract-archive=tar.gz", token,
                    b"not a gzip stream" * 50)
    assert result["Response Status"] == "400 Bad Request"
    assert result["Response Body"] == "Invalid Tar File: not a gzip file"
    result = report(base, "PUT", f"{acct}/{unique()}?extract-archive=tar", token,
                    tarball([("empty-dir", None)], "w"))
    assert result["Response Body"] == "Invalid Tar File: No Valid Files"
    status, _, body = call(base, "PUT", f"{acct}/{unique()}?extract-archive=zip",
                           {"X-Auth-Token": token}, b"PK")
    assert (status, body) == (400, b"Unsupported archive format")


# ---- limits and heartbeats (a second proxy with small settings) -----------------------------

@pytest.fixture(scope="module")
def tuned(cluster):
    proc = start_proxy_variant(
        cluster, "bulk", {"put_buffer_size": "4096"},  # bigger members stream
        {"bulk": {"yield_frequency": "0.05", "max_failed_deletes": "3",
                  "max_containers_per_extraction": "2", "max_failed_extractions": "2"}})
    yield f"http://127.0.0.1:{proc.port}"
    proc.stop()


def test_heartbeats_come_before_the_report(tuned, owner):
    _, acct, token = owner
    cont = unique()
    archive = tarball([(f"f{i:03d}", b"x") for i in range(100)])
    status, _, data = call(tuned, "PUT", f"{acct}/{cont}?extract-archive=tar.gz",
                           {"X-Auth-Token": token, "Accept": "application/json"}, archive)
    head, sep, tail = data.partition(b"\r\n\r\n")
    assert status == 200 and sep and head and head.strip(b" ") == b""
    assert json.loads(tail)["Number Files Created"] == 100
    # In XML the first beat is the declaration.
    status, _, data = call(tuned, "DELETE", f"{acct}?bulk-delete",
                           {"X-Auth-Token": token, "Accept": "application/xml",
                            "Content-Type": "text/plain"},
                           "".join(f"/{cont}/f{i:03d}\n" for i in range(100)).encode())
    assert data.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n')
    assert b"\r\n\r\n<delete>\n<number_deleted>100</number_deleted>\n" in data


def test_limits_stop_the_job(tuned, owner):
    _, acct, token = owner
    result = report(tuned, "POST", f"{acct}?bulk-delete", token,
                    b"".join(b"/c/%%F%d\n" % i for i in range(6)))
    assert result["Response Status"] == "400 Bad Request"
    assert result["Response Body"] == "Max delete failures exceeded"
    assert len(result["Errors"]) == 3
    names = [unique() for _ in range(3)]
    result = report(tuned, "PUT", f"{acct}?extract-archive=tar", token,
                    tarball([(f"{n}/f", b"x") for n in names], "w"))
    assert result["Response Body"] == "More than 2 containers to create from tar."
    assert result["Number Files Created"] == 2
    cont = unique()
    result = report(tuned, "PUT", f"{acct}/{cont}?extract-archive=tar", token,
                    tarball([("../a", b"1"), ("../b", b"2"), ("c", b"3")], "w"))
    assert len(result["Errors"]) == 2 and result["Number Files Created"] == 0
    assert listing(tuned, acct, token, cont) == []


def test_members_bigger_than_the_put_buffer_stream(tuned, owner):
    _, acct, token = owner
    cont = unique()
    blobs = {f"big-{i}": os.urandom(200_000 + i) for i in range(3)}
    blobs["small"] = b"tiny"
    result = report(tuned, "PUT", f"{acct}/{cont}?extract-archive=tar.gz", token,
                    tarball(list(blobs.items())))
    assert result["Number Files Created"] == 4 and result["Errors"] == []
    for name, data in blobs.items():
        body = call(tuned, "GET", f"{acct}/{cont}/{name}", {"X-Auth-Token": token})[2]
        assert hashlib.md5(body).hexdigest() == hashlib.md5(data).hexdigest()


# ---- python-swiftclient's `swift`, which uses bulk-delete when /info offers it -------------

def swift(cluster, *args: str, user: str = "test:tester", key: str = "testing") -> str:
    cmd = [SWIFT, "-A", cluster.auth_url, "-U", user, "-K", key, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(args)} failed: {r.stdout}\n{r.stderr}"
    return r.stdout


def bulk_deletes_logged(cluster, account: str) -> int:
    with open(os.path.join(cluster.root, "logs", "proxy.log"), errors="replace") as f:
        return sum(f"POST /v1/{account}?bulk-delete 200" in line for line in f)


def test_swift_delete_of_a_big_container_uses_bulk_delete(cluster, owner):
    base, acct, token = owner
    cont = unique()
    put_many(base, acct, token, cont, [f"o{i}" for i in range(60)])
    before = bulk_deletes_logged(cluster, "AUTH_test")
    swift(cluster, "delete", cont)
    assert call(base, "HEAD", f"{acct}/{cont}", {"X-Auth-Token": token})[0] == 404
    wait_for(lambda: bulk_deletes_logged(cluster, "AUTH_test") > before, 10,
             what="the bulk delete in the proxy's log")


def test_swift_delete_all(cluster):
    url, token = token_and_url(cluster, "test2:tester2", "testing2")
    base, acct = cluster.proxy_url, storage_path(url)
    conts = [unique("all") for _ in range(2)]
    for cont in conts:
        put_many(base, acct, token, cont, [f"o{i}" for i in range(30)])
    swift(cluster, "delete", "--all", user="test2:tester2", key="testing2")
    assert swift(cluster, "list", user="test2:tester2", key="testing2").split() == []
    # `--all` implies `--versions` and, with object versioning advertised (as Swift does),
    # swiftclient deletes each listed version by id, one request each, never in bulk;
    # test_swift_delete_of_a_big_container_uses_bulk_delete covers the bulk path.
