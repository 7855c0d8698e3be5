"""Static large objects through a real `swiftlite up` proxy: manifest checks on PUT, reads of
the joined object (ranges, parts, conditions, nested and inline-data segments), the manifest
itself, deletes with the segments, copies, the stock `swift` CLI, and a 2 GiB object served in
bounded proxy memory."""

from __future__ import annotations

import asyncio
import base64
import email.parser
import hashlib
import json
import os
import uuid

import aiohttp
import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from tests.helpers import wait_for
from tests.integration.test_proxy_api import raw, token_and_url
from tests.integration.test_swift_cli import swift

SEGS = {"a": b"a" * 1000, "b": b"b" * 700, "c": b"c" * 1300}
BODY = SEGS["a"] + SEGS["b"] + SEGS["c"]


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def slo_etag(parts: list[str]) -> str:
    return md5("".join(parts).encode())


@pytest.fixture(scope="module")
def slo(cluster):
    """`man` in `cont`: a manifest over segments a, b, c (each in `cont`)."""
    url, token = token_and_url(cluster)
    conn = swiftclient.Connection(preauthurl=url, preauthtoken=token, retries=0)
    cont = f"slo-{uuid.uuid4().hex[:8]}"
    conn.put_container(cont)
    for name, data in SEGS.items():
        conn.put_object(cont, f"seg_{name}", data)
    manifest = [{"path": f"/{cont}/seg_{n}", "etag": md5(d), "size_bytes": len(d)}
                for n, d in SEGS.items()]
    conn.put_object(cont, "man", json.dumps(manifest), content_type="image/jpeg",
                    query_string="multipart-manifest=put",
                    headers={"X-Object-Meta-Kind": "big"})
    return conn, cont, url, token


def put_manifest(conn, cont: str, name: str, items: list, headers=None,
                 query: str = "multipart-manifest=put"):
    """PUT a manifest; (status, body) whatever the outcome."""
    resp: dict = {}
    try:
        body = items if isinstance(items, str) else json.dumps(items)
        conn.put_object(cont, name, body, query_string=query,
                        headers=headers or {}, response_dict=resp)
    except ClientException as exc:
        return exc.http_status, exc.http_response_content
    return resp["status"], b""


def test_get_and_head_join_the_segments(slo):
    conn, cont, _, _ = slo
    expected = f'"{slo_etag([md5(d) for d in SEGS.values()])}"'
    headers, body = conn.get_object(cont, "man")
    assert body == BODY
    assert headers["etag"] == expected
    assert headers["content-length"] == str(len(BODY))
    assert headers["x-static-large-object"] == "True"
    assert headers["content-type"] == "image/jpeg"
    assert headers["x-object-meta-kind"] == "big"
    head = conn.head_object(cont, "man")
    assert head["etag"] == expected and head["content-length"] == str(len(BODY))
    assert not any(k.startswith("x-object-sysmeta") for k in head)  # the gatekeeper's job


def test_listing_shows_the_total_and_slo_etag_also_after_a_post(slo):
    conn, cont, _, _ = slo
    manifest_md5 = conn.head_object(cont, "man", query_string="multipart-manifest=get")["etag"]
    expected = f'"{slo_etag([md5(d) for d in SEGS.values()])}"'

    def row():
        return next(o for o in conn.get_container(cont)[1] if o["name"] == "man")
    assert row()["bytes"] == len(BODY)
    assert row()["hash"] == manifest_md5 and row()["slo_etag"] == expected
    conn.post_object(cont, "man", {"Content-Type": "image/png", "X-Object-Meta-Kind": "big"})
    assert row()["content_type"] == "image/png"
    assert row()["bytes"] == len(BODY) and row()["slo_etag"] == expected
    # A POST without a type keeps the one an earlier POST set, and the manifest stays one.
    conn.post_object(cont, "man", {"X-Object-Meta-Kind": "big"})
    head = conn.head_object(cont, "man")
    assert head["content-type"] == "image/png" and head["x-static-large-object"] == "True"
    conn.post_object(cont, "man", {"Content-Type": "image/jpeg", "X-Object-Meta-Kind": "big"})


def test_usage_counts_the_segments_once(slo):
    """The listing shows an SLO's total, but the usage of its container counts only the
    manifest's own bytes: the segments are counted where they are stored."""
    conn, cont, _, _ = slo
    other = f"{cont}-manifests"
    conn.put_container(other)
    assert put_manifest(conn, other, "m", [{"path": f"/{cont}/seg_a"}])[0] == 201
    own = int(conn.head_object(other, "m",
                               query_string="multipart-manifest=get")["content-length"])
    assert conn.get_container(other)[1][0]["bytes"] == len(SEGS["a"])
    wait_for(lambda: conn.head_container(other)["x-container-bytes-used"] == str(own), 10,
             what="container usage to count the manifest's own size")


def test_ranges_across_segments(slo):
    conn, cont, _, _ = slo
    headers, body = conn.get_object(cont, "man", headers={"Range": "bytes=995-1704"})
    assert body == BODY[995:1705]
    assert headers["content-range"] == f"bytes 995-1704/{len(BODY)}"
    _, body = conn.get_object(cont, "man", headers={"Range": "bytes=-1400"})
    assert body == BODY[-1400:]
    headers, body = conn.get_object(cont, "man", headers={"Range": "bytes=0-2,1699-1701"})
    msg = email.parser.BytesParser().parsebytes(
        f"Content-Type: {headers['content-type']}\r\n\r\n".encode() + body)
    parts = [p.get_payload(decode=True) for p in msg.get_payload()]
    assert parts == [BODY[0:3], BODY[1699:1702]]
    with pytest.raises(ClientException) as exc:
        conn.get_object(cont, "man", headers={"Range": "bytes=5000-"})
    assert exc.value.http_status == 416


def test_part_numbers(slo):
    conn, cont, path, token = slo
    headers, body = conn.get_object(cont, "man", query_string="part-number=2")
    assert body == SEGS["b"]
    assert headers["content-range"] == f"bytes 1000-1699/{len(BODY)}"
    assert headers["x-parts-count"] == "3"
    status, _, text = raw_cut(path, token, cont, "man?part-number=4")
    assert status == 416 and text == b"The requested part number is not satisfiable"
    status, _, text = raw_cut(path, token, cont, "man?part-number=0")
    assert status == 400


def test_conditions_are_judged_on_the_slo_etag(slo):
    conn, cont, _, _ = slo
    etag = conn.head_object(cont, "man")["etag"]
    with pytest.raises(ClientException) as exc:
        conn.get_object(cont, "man", headers={"If-None-Match": etag})
    assert exc.value.http_status == 304
    with pytest.raises(ClientException) as exc:
        conn.get_object(cont, "man", headers={"If-Match": '"nope"'})
    assert exc.value.http_status == 412
    _, body = conn.get_object(cont, "man", headers={"If-Match": etag})
    assert body == BODY


def test_nested_ranged_and_inline_data_segments(slo):
    conn, cont, _, _ = slo
    inner = f"/{cont}/man"
    items = [{"data": base64.b64encode(b"HEAD").decode()},
             {"path": inner, "range": "995-1004"},
             {"path": f"/{cont}/seg_c", "range": "-3"},
             {"path": inner}]
    status, _ = put_manifest(conn, cont, "nested", items)
    assert status == 201
    expected = b"HEAD" + BODY[995:1005] + SEGS["c"][-3:] + BODY
    _, body = conn.get_object(cont, "nested")
    assert body == expected
    _, body = conn.get_object(cont, "nested", headers={"Range": "bytes=2-20"})
    assert body == expected[2:21]
    stored = json.loads(conn.get_object(cont, "nested",
                                        query_string="multipart-manifest=get")[1])
    assert stored[1]["sub_slo"] is True and stored[1]["range"] == "995-1004"


@pytest.mark.parametrize("items,status,reason", [
    ([{"path": "/{c}/seg_a", "etag": "0" * 32}], 400, b"Etag Mismatch"),
    ([{"path": "/{c}/seg_a", "size_bytes": 1}], 400, b"Size Mismatch"),
    ([{"path": "/{c}/missing"}], 400, b"404 Not Found"),
    ([{"path": "/{c}/seg_a", "range": "5000-6000"}], 400, b"Unsatisfiable Range"),
    ([{"path": "/{c}/seg_a", "colour": "red"}], 400, b'extraneous keys "colour"'),
    ([{"path": "/{c}/bad-one"}], 400, b"must not include itself"),
    ([{"path": "no-object"}], 400, b"Path must be of the form"),
    ([{"data": "not base64!"}], 400, b"data must be valid base64"),
    ("not json", 400, b"Manifest must be valid JSON"),
    ([{"path": "/{c}/seg_a"}] * 1001, 413, b"must be <= 1000"),
])
def test_bad_manifests_are_refused_and_store_nothing(slo, items, status, reason):
    conn, cont, _, _ = slo
    if isinstance(items, list):
        items = [{k: (v.format(c=cont) if isinstance(v, str) and k == "path" else v)
                  for k, v in i.items()} for i in items]
    got, body = put_manifest(conn, cont, "bad-one", items)
    assert got == status and reason in body, body
    with pytest.raises(ClientException) as exc:
        conn.head_object(cont, "bad-one")
    assert exc.value.http_status == 404


def test_reserved_header_and_client_etag(slo):
    conn, cont, _, _ = slo
    with pytest.raises(ClientException) as exc:
        conn.put_object(cont, "fake", b"[]", headers={"X-Static-Large-Object": "true"})
    assert exc.value.http_status == 400
    items = [{"path": f"/{cont}/seg_a"}]
    assert put_manifest(conn, cont, "etagged", items, {"ETag": "0" * 32})[0] == 422
    good = slo_etag([md5(SEGS["a"])])
    assert put_manifest(conn, cont, "etagged", items, {"ETag": good})[0] == 201


def test_heartbeat_reports_after_whitespace(slo):
    conn, cont, path, token = slo

    async def go(items):
        async with aiohttp.ClientSession() as s, s.put(
                f"{path}/{cont}/hb?multipart-manifest=put&heartbeat=on",
                data=json.dumps(items), headers={"X-Auth-Token": token,
                                                 "Accept": "application/json"}) as r:
            return r.status, await r.read()
    status, body = asyncio.run(go([{"path": f"/{cont}/seg_a"}]))
    lead, _, report = body.partition(b"\r\n\r\n")
    assert status == 202 and not lead.strip()
    assert json.loads(report)["Response Status"] == "201 Created"
    status, body = asyncio.run(go([{"path": f"/{cont}/nope"}]))
    report = json.loads(body.partition(b"\r\n\r\n")[2])
    assert report["Response Status"] == "400 Bad Request"
    assert report["Errors"] == [[f"/{cont}/nope", "404 Not Found"]]


def test_raw_manifest_puts_back_as_the_same_object(slo):
    conn, cont, _, _ = slo
    headers, body = conn.get_object(cont, "man",
                                    query_string="multipart-manifest=get&format=raw")
    assert headers["etag"] == md5(body)
    assert {tuple(sorted(i)) for i in json.loads(body)} == {("etag", "path", "size_bytes")}
    conn.put_object(cont, "again", body, query_string="multipart-manifest=put")
    assert conn.get_object(cont, "again")[1] == BODY


def test_copies_join_the_data_or_copy_the_manifest(slo):
    conn, cont, _, _ = slo
    conn.copy_object(cont, "man", f"/{cont}/joined")
    head = conn.head_object(cont, "joined")
    assert "x-static-large-object" not in head and head["etag"] == md5(BODY)
    # A query on an X-Copy-From PUT applies to the source's GET, as in Swift.
    conn.put_object(cont, "manifest-copy", b"", headers={"X-Copy-From": f"{cont}/man"},
                    query_string="multipart-manifest=get")
    head = conn.head_object(cont, "manifest-copy")
    assert head["x-static-large-object"] == "True"
    assert conn.get_object(cont, "manifest-copy")[1] == BODY
    conn.put_object(cont, "part-copy", b"", headers={"X-Copy-From": f"{cont}/man"},
                    query_string="part-number=3")
    assert conn.get_object(cont, "part-copy")[1] == SEGS["c"]


def test_segments_of_another_account_need_read_access(cluster, slo):
    _, _, _, my_token = slo
    other = cluster.connection("test2:tester2", "testing2")
    suffix = uuid.uuid4().hex[:6]
    other.put_container(f"open-{suffix}", headers={"X-Container-Write": "test:tester"})
    other.put_container(f"priv-{suffix}")
    other.put_object(f"priv-{suffix}", "seg", b"secret")
    # Segments are looked up in the account the manifest lands in, as the caller.
    their_url = other.get_auth()[0]
    items = json.dumps([{"path": f"/priv-{suffix}/seg"}])

    def put() -> tuple[int, bytes]:
        try:
            swiftclient.put_object(their_url, my_token, f"open-{suffix}", "m", items,
                                   query_string="multipart-manifest=put")
        except ClientException as exc:
            return exc.http_status, exc.http_response_content
        return 201, b""
    status, body = put()
    assert status == 400 and b"403 Forbidden" in body
    other.post_container(f"priv-{suffix}", {"X-Container-Read": "test:tester"})
    assert put()[0] == 201
    assert other.get_object(f"open-{suffix}", "m")[1] == b"secret"


def test_changed_segment_gives_409_or_a_short_body(cluster, slo):
    conn, cont, path, token = slo
    for name in ("x1", "x2"):
        conn.put_object(cont, name, b"x" * 100)
    items = [{"path": f"/{cont}/x1"}, {"path": f"/{cont}/x2"}]
    assert put_manifest(conn, cont, "fragile", items)[0] == 201
    conn.put_object(cont, "x2", b"y" * 100)  # the second segment changes
    status, _, body = raw_cut(path, token, cont, "fragile")
    assert status == 200 and body != b"x" * 200  # never the full, wrong body
    conn.put_object(cont, "x1", b"z" * 100)  # now the first one
    status, _, _ = raw_cut(path, token, cont, "fragile")
    assert status == 409


def raw_cut(path: str, token: str, cont: str, rest: str):
    """GET `cont/rest` (a query may follow the name), tolerating a cut connection:
    (status, headers, what arrived)."""
    async def go():
        async with aiohttp.ClientSession() as s, s.get(
                f"{path}/{cont}/{rest}", headers={"X-Auth-Token": token}) as r:
            got = b""
            try:
                async for chunk in r.content.iter_any():
                    got += chunk
            except aiohttp.ClientPayloadError:
                pass
            return r.status, r.headers, got
    return asyncio.run(go())


def test_multipart_delete_removes_segments_and_manifest(slo):
    conn, cont, url, token = slo
    for n in ("d1", "d2"):
        conn.put_object(cont, n, n.encode() * 10)
    assert put_manifest(conn, cont, "inner", [{"path": f"/{cont}/d2"}])[0] == 201
    assert put_manifest(conn, cont, "outer", [{"path": f"/{cont}/d1"},
                                              {"path": f"/{cont}/inner"}])[0] == 201

    async def go():
        async with aiohttp.ClientSession() as s, s.delete(
                f"{url}/{cont}/outer?multipart-manifest=delete",
                headers={"X-Auth-Token": token, "Accept": "application/json"}) as r:
            return r.status, json.loads(await r.read())
    status, report = asyncio.run(go())
    assert status == 200 and report["Number Deleted"] == 4 and report["Errors"] == []
    names = {o["name"] for o in conn.get_container(cont)[1]}
    assert not names & {"d1", "d2", "inner", "outer"}


def test_info_advertises_slo(cluster):
    status, _, body = raw(cluster, "GET", "/info")
    info = json.loads(body)
    assert status == 200
    assert info["slo"]["max_manifest_segments"] == 1000
    assert info["slo"]["min_segment_size"] == 1


def proxy_rss(cluster) -> int:
    """Resident bytes of the proxy and its worker processes."""
    root = cluster.info["proxy"]["pid"]
    pids = {root}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == root:
                        pids.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


@pytest.mark.slow
def test_a_2_gib_slo_streams_in_bounded_proxy_memory(cluster, slo):
    """32 references to one 64 MiB segment: 2 GiB read through the proxy, whose resident
    memory must grow by less than 64 MiB (segments stream, never gathered)."""
    conn, cont, path, token = slo
    seg = os.urandom(1 << 20) * 64
    conn.put_object(cont, "big-seg", seg)
    items = [{"path": f"/{cont}/big-seg", "etag": md5(seg)}] * 32
    assert put_manifest(conn, cont, "two-gib", items)[0] == 201
    before = proxy_rss(cluster)

    async def go():
        peak = before
        total = 0
        digest = hashlib.md5()
        async with aiohttp.ClientSession() as s, s.get(
                f"{path}/{cont}/two-gib", headers={"X-Auth-Token": token}) as r:
            assert r.status == 200 and r.content_length == 32 * len(seg)
            async for chunk in r.content.iter_chunked(1 << 20):
                total += len(chunk)
                if total % (64 << 20) < len(chunk):
                    digest.update(chunk)  # sample the bytes, hashing 2 GiB is slow
                    peak = max(peak, proxy_rss(cluster))
        return total, peak
    total, peak = asyncio.run(go())
    assert total == 32 * len(seg)
    assert peak - before < 64 << 20, f"proxy grew by {(peak - before) >> 20} MiB"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--use-slo", "--use-dlo"])
def test_swift_cli_200_mib_large_object_round_trip(cluster, tmp_path, mode):
    data = os.urandom(1 << 20) * 200
    (tmp_path / "video.mp4").write_bytes(data)
    cont = f"cli-{uuid.uuid4().hex[:8]}"
    swift(cluster, "upload", mode, "-S", str(64 << 20), cont, "video.mp4",
          cwd=str(tmp_path))
    conn = cluster.connection()
    head = conn.head_object(cont, "video.mp4")
    kind = "x-static-large-object" if mode == "--use-slo" else "x-object-manifest"
    assert kind in head and head["content-length"] == str(len(data))
    assert len(conn.get_container(cont + "_segments")[1]) == 4
    down = tmp_path / "down"
    down.mkdir()
    swift(cluster, "download", cont, "video.mp4", cwd=str(down))
    assert (down / "video.mp4").read_bytes() == data
    # `swift delete` of a large object removes its segments too.
    swift(cluster, "delete", cont, "video.mp4")
    assert conn.get_container(cont + "_segments")[1] == []
