"""The object server as a real process: the backend HTTP contract, end to end."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import os
import select
import signal
import socket
import time
import urllib.parse

import aiohttp
import msgpack
import pytest
from aiohttp import web

from swiftlite.common.async_pending import iter_updates
from swiftlite.common.hashing import hash_path
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import digests, fileformat, reading
from tests.backend_signing import raw_signature
from tests.helpers import ServerProcess, async_wait_for, free_port, healthy, wait_for

MAX = 300_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("objsrv")
    devices = root / "devices"
    for d in ("sda", "sdb"):
        (devices / d).mkdir(parents=True)
    conf = root / "object-server.conf"
    conf.write_text(f"""[DEFAULT]
devices = {devices}
[object-server]
max_object_size = {MAX}
read_chunk_size = 64k
write_batch_size = 64k
container_update_timeout = 0.5
conn_timeout = 0.3
node_timeout = 1
""")
    port = free_port()
    proc = ServerProcess("object", str(conf), port).start()
    proc.devices = str(devices)
    yield proc
    proc.stop()


@pytest.fixture
async def client():
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        yield s


_n = [0]


def ts(offset: float = 0.0) -> str:
    _n[0] += 1
    return Timestamp(int((time.time() + offset) * 100000) + _n[0]).internal


def name() -> str:
    _n[0] += 1
    return f"obj-{os.getpid()}-{_n[0]}"


async def call(client, server, method, path, headers=None, data=None):
    url = f"http://127.0.0.1:{server.port}{path}"
    async with client.request(method, url, headers=headers or {}, data=data) as r:
        return r.status, r.headers, await r.read()


def tmp_files(server, dev="sda"):
    tdir = os.path.join(server.devices, dev, "tmp")
    return os.listdir(tdir) if os.path.isdir(tdir) else []


async def test_lifecycle(server, client):
    o = name()
    path = f"/sda/1/a/c/{o}"
    t1 = ts()
    st, h, _ = await call(client, server, "PUT", path, {
        "X-Timestamp": t1, "Content-Type": "image/png", "X-Object-Meta-Color": "blue",
        "Content-Disposition": "inline", "Content-Encoding": "gzip"}, b"pixels")
    assert st == 201 and h["ETag"] == hashlib.md5(b"pixels").hexdigest()
    st, h, body = await call(client, server, "GET", path)
    assert st == 200 and body == b"pixels"
    assert h["Content-Type"] == "image/png" and h["X-Object-Meta-Color"] == "blue"
    assert h["Content-Disposition"] == "inline" and h["Content-Encoding"] == "gzip"
    assert h["X-Timestamp"] == Timestamp.parse(t1).normal == h["X-Backend-Timestamp"]
    assert h["Last-Modified"] == Timestamp.parse(t1).http_date()
    st, h, body = await call(client, server, "HEAD", path)
    assert st == 200 and h["Content-Length"] == "6" and body == b""
    st, _, _ = await call(client, server, "POST", path, {
        "X-Timestamp": ts(), "X-Object-Meta-Size": "big", "Content-Type": "image/jpeg"})
    assert st == 202
    st, h, body = await call(client, server, "GET", path)
    assert h["X-Object-Meta-Size"] == "big" and "X-Object-Meta-Color" not in h
    assert h["Content-Type"] == "image/jpeg" and body == b"pixels"
    t_del = ts()
    st, _, _ = await call(client, server, "DELETE", path, {"X-Timestamp": t_del})
    assert st == 204
    st, h, _ = await call(client, server, "GET", path)
    assert st == 404 and h["X-Backend-Timestamp"] == t_del
    st, h, _ = await call(client, server, "HEAD", f"/sda/1/a/c/{name()}")
    assert st == 404 and "X-Backend-Timestamp" not in h
    st, h, _ = await call(client, server, "DELETE", path, {"X-Timestamp": ts()})
    assert st == 404
    st, h, _ = await call(client, server, "POST", path, {"X-Timestamp": ts()})
    assert st == 404 and h["X-Backend-Timestamp"] > t_del


async def test_conflicts(server, client):
    path = f"/sda/2/a/c/{name()}"
    t = ts()
    assert (await call(client, server, "PUT", path, {"X-Timestamp": t}, b"1"))[0] == 201
    for old in (t, ts(-100)):
        st, h, _ = await call(client, server, "PUT", path, {"X-Timestamp": old}, b"2")
        assert st == 409 and h["X-Backend-Timestamp"] == t
        st, h, _ = await call(client, server, "DELETE", path, {"X-Timestamp": old})
        assert st == 409 and h["X-Backend-Timestamp"] == t
    st, _, _ = await call(client, server, "POST", path, {"X-Timestamp": ts(-50)})
    assert st == 409
    assert (await call(client, server, "GET", path))[2] == b"1"
    st, _, _ = await call(client, server, "PUT", path,
                          {"X-Timestamp": ts(), "If-None-Match": "*"}, b"3")
    assert st == 412
    assert (await call(client, server, "GET", path))[2] == b"1"
    assert tmp_files(server) == []


async def test_etag_mismatch_and_size_limits(server, client):
    path = f"/sda/3/a/c/{name()}"
    st, _, _ = await call(client, server, "PUT", path,
                          {"X-Timestamp": ts(), "ETag": "0" * 32}, b"data")
    assert st == 422
    st, _, _ = await call(client, server, "PUT", path,
                          {"X-Timestamp": ts(), "ETag": hashlib.md5(b"data").hexdigest()},
                          b"data")
    assert st == 201
    st, _, _ = await call(client, server, "PUT", path, {"X-Timestamp": ts()}, b"x" * (MAX + 1))
    assert st == 413

    async def chunks():
        for _ in range(6):
            yield b"y" * 60_000

    st, _, _ = await call(client, server, "PUT", path, {"X-Timestamp": ts()}, chunks())
    assert st == 413
    assert (await call(client, server, "GET", path))[2] == b"data"
    assert tmp_files(server) == []


async def test_chunked_upload_and_large_streamed_get(server, client):
    path = f"/sda/4/a/c/{name()}"
    parts = [os.urandom(50_000) for _ in range(4)]
    body = b"".join(parts)

    async def gen():
        for p in parts:
            yield p

    st, h, _ = await call(client, server, "PUT", path, {"X-Timestamp": ts()}, gen())
    assert st == 201 and h["ETag"] == hashlib.md5(body).hexdigest()
    st, h, got = await call(client, server, "GET", path)
    assert st == 200 and got == body and h["Content-Length"] == str(len(body))
    st, h, got = await call(client, server, "GET", path, {"Range": "bytes=70000-140000"})
    assert st == 206 and got == body[70000:140001]
    assert h["Content-Range"] == f"bytes 70000-140000/{len(body)}"


async def test_ranges(server, client):
    path = f"/sda/5/a/c/{name()}"
    body = bytes(range(100))
    await call(client, server, "PUT", path, {"X-Timestamp": ts(), "Content-Type": "a/b"}, body)
    st, h, got = await call(client, server, "GET", path, {"Range": "bytes=10-19"})
    assert st == 206 and got == body[10:20] and h["Content-Range"] == "bytes 10-19/100"
    st, _, got = await call(client, server, "GET", path, {"Range": "bytes=-5"})
    assert st == 206 and got == body[-5:]
    st, h, _ = await call(client, server, "GET", path, {"Range": "bytes=200-300"})
    assert st == 416 and h["Content-Range"] == "bytes */100"
    st, _, got = await call(client, server, "GET", path, {"Range": "bytes=9-1"})
    assert st == 200 and got == body  # malformed: ignored
    st, h, got = await call(client, server, "GET", path, {"Range": "bytes=0-1,50-52"})
    assert st == 206 and h["Content-Type"].startswith("multipart/byteranges")
    assert int(h["Content-Length"]) == len(got)
    boundary = h["Content-Type"].split("boundary=")[1].encode()
    pieces = got.split(b"--" + boundary)
    assert pieces[-1].strip() == b"--"
    assert b"Content-Range: bytes 0-1/100\r\n\r\n" + body[0:2] + b"\r\n" in pieces[1]
    assert b"Content-Range: bytes 50-52/100\r\n\r\n" + body[50:53] + b"\r\n" in pieces[2]


async def test_conditionals(server, client):
    path = f"/sda/6/a/c/{name()}"
    t = ts()
    _, h, _ = await call(client, server, "PUT", path, {"X-Timestamp": t}, b"cond")
    etag = h["ETag"]
    lm = Timestamp.parse(t).http_date()
    assert (await call(client, server, "GET", path, {"If-Match": f'"{etag}"'}))[0] == 200
    assert (await call(client, server, "GET", path, {"If-Match": '"nope"'}))[0] == 412
    st, h, body = await call(client, server, "GET", path, {"If-None-Match": etag})
    assert st == 304 and body == b"" and h["ETag"] == etag
    assert (await call(client, server, "HEAD", path, {"If-Modified-Since": lm}))[0] == 304
    assert (await call(client, server, "GET", path,
                       {"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}))[0] == 412


async def test_expired_object_is_404(server, client):
    path = f"/sda/7/a/c/{name()}"
    t = Timestamp(100_000 * 1_000_000_000).internal  # 2001
    st, _, _ = await call(client, server, "PUT", path,
                          {"X-Timestamp": t, "X-Delete-At": "1000000100"}, b"old")
    assert st == 201
    assert (await call(client, server, "GET", path))[0] == 404
    st, _, _ = await call(client, server, "PUT", path,
                          {"X-Timestamp": ts(), "X-Delete-At": "1000000100"}, b"x")
    assert st == 400  # X-Delete-At before the request's own timestamp


def raw_request(server, method, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", "1")
        conn.endheaders(b"x")
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path,headers,status", [
    ("/nodev/1/a/c/o", {}, 507),
    ("/sda/x1/a/c/o", {}, 400),
    ("/sda/-1/a/c/o", {}, 400),
    ("/sda/4294967296/a/c/o", {}, 400),
    ("/sda/1/a/c/%2e%2e/x", {}, 400),
    ("/sda/1/a/c/x/../../../../etc", {}, 400),
    ("/%2e%2e/1/a/c/o", {}, 400),
    ("/sda/1/a/c/o", {"X-Timestamp": "yesterday"}, 400),
    ("/sda/1/a/c/o", {"X-Timestamp": ""}, 400),
    ("/sda/1/a/c/o%ff", {}, 400),
    ("/sda/1/a/c", {}, 400),
])
def test_bad_requests(server, path, headers, status):
    headers = {"X-Timestamp": ts(), **headers}
    if not headers["X-Timestamp"]:
        del headers["X-Timestamp"]
    assert raw_request(server, "PUT", path, headers)[0] == status
    assert not os.path.exists(os.path.join(server.devices, "nodev"))
    assert tmp_files(server) == []


def test_short_body_stores_nothing(server):
    """A client that sends less than its Content-Length (then half-closes) stores nothing."""
    o = name()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        t = ts()
        sock.sendall((f"PUT /sda/12/a/c/{o} HTTP/1.1\r\nHost: x\r\nX-Timestamp: {t}\r\n"
                      + raw_signature("PUT", f"/sda/12/a/c/{o}", t)
                      + "Content-Length: 100000\r\n\r\n").encode() + b"x" * 70000)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    finally:
        sock.close()
    assert reply == b"" or reply.split(b" ")[1] in (b"400", b"499")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", f"/sda/12/a/c/{o}")
    assert conn.getresponse().status == 404
    conn.close()
    # The connection may close while the cancelled write is still in a pool thread; its
    # cleanup then finishes just after, but it must finish.
    wait_for(lambda: tmp_files(server) == [], timeout=10, what="the temp file's removal")


@pytest.fixture
async def receiver():
    """A stand-in container server that records the updates it gets."""
    seen: list[tuple[str, str, dict]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.method, request.raw_path, dict(request.headers)))
        return web.Response(status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port, seen
    await runner.cleanup()


async def test_container_updates_and_async_pending(server, client, receiver):
    port, seen = receiver
    o = name() + " sp"
    path = f"/sda/8/a/c/{o.replace(' ', '%20')}"
    upd = {"X-Container-Host": f"127.0.0.1:{port}", "X-Container-Device": "cdev",
           "X-Container-Partition": "77"}
    t = ts()
    st, h, _ = await call(client, server, "PUT", path,
                          {"X-Timestamp": t, "Content-Type": "text/x", **upd}, b"12345")
    assert st == 201
    await async_wait_for(lambda: seen, 5, what="container PUT update")
    method, raw, hdrs = seen[0]
    assert method == "PUT" and raw == f"/cdev/77/a/c/{o.replace(' ', '%20')}"
    assert hdrs["X-Timestamp"] == t and hdrs["X-Size"] == "5"
    assert hdrs["X-Content-Type"] == "text/x" and hdrs["X-Etag"] == h["ETag"]
    t2 = ts()
    assert (await call(client, server, "DELETE", path, {"X-Timestamp": t2, **upd}))[0] == 204
    await async_wait_for(lambda: len(seen) == 2, 5, what="container DELETE update")
    assert seen[1][0] == "DELETE" and seen[1][2]["X-Timestamp"] == t2
    # Nobody listening: the write still succeeds and the update is saved for the updater.
    dead = {**upd, "X-Container-Host": f"127.0.0.1:{free_port()}"}
    t3 = ts()
    assert (await call(client, server, "PUT", path, {"X-Timestamp": t3, **dead}, b"z"))[0] == 201
    dev = os.path.join(server.devices, "sda")

    def saved():
        return [r for _, r in iter_updates(dev) if r["timestamp"] == t3]

    (rec,) = await async_wait_for(saved, 10, what="async_pending record")
    assert rec["method"] == "PUT" and rec["path"] == f"/a/c/{o.replace(' ', '%20')}"
    assert rec["targets"][0]["device"] == "cdev" and rec["targets"][0]["partition"] == 77
    assert rec["headers"]["X-Size"] == "1"


@pytest.mark.parametrize("merge_status", [202, 503])
async def test_container_updates_batch_behind_one_in_flight(server, client, merge_status):
    """Updates queued behind a slow one go as one MERGE batch (and are saved if it fails)."""
    gate = asyncio.Event()
    seen: list[tuple[str, str, bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.method, request.raw_path, body))
        if len(seen) == 1:
            await gate.wait()  # hold the first update until every PUT has answered
        return web.Response(status=merge_status if request.method == "MERGE" else 201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        upd = {"X-Container-Host": f"127.0.0.1:{port}", "X-Container-Device": "cdev",
               "X-Container-Partition": "5"}
        names = [name() for _ in range(12)]
        stamps = {o: ts() for o in names}
        results = await asyncio.gather(*(
            call(client, server, "PUT", f"/sda/11/a/cb/{o}",
                 {"X-Timestamp": stamps[o], **upd}, b"abc") for o in names))
        assert all(r[0] == 201 for r in results)
        gate.set()

        def rows():
            out = {}
            for method, raw, body in seen:
                if method == "MERGE":
                    assert raw == "/cdev/5/a/cb"
                    out.update({r["name"]: r for r in msgpack.unpackb(body)})
                else:
                    out[raw.rsplit("/", 1)[1]] = {"created_at": None}
            return out if len(out) == len(names) else None

        got = await async_wait_for(rows, 10, what="every update, batched")
        merges = [b for m, _, b in seen if m == "MERGE"]
        assert merges and len(seen) < len(names)
        batched = [o for o in names if got[o]["created_at"] is not None]
        for o in batched:
            assert got[o]["created_at"] == stamps[o] and got[o]["size"] == 3
            assert got[o]["etag"] == hashlib.md5(b"abc").hexdigest() and got[o]["deleted"] == 0
        if merge_status >= 300:
            dev = os.path.join(server.devices, "sda")

            def saved():
                recs = {r["path"].rsplit("/", 1)[1] for _, r in iter_updates(dev)
                        if r["path"].startswith("/a/cb/")}
                return recs if recs >= set(batched) else None

            await async_wait_for(saved, 10, what="failed batch saved per object")
    finally:
        await runner.cleanup()


async def test_container_updates_for_two_replicas_on_one_server_share_a_merge(server, client):
    """Updates for two replicas of a container on one container server, queued behind a slow
    one, go as one sectioned MERGE; a section the server refuses is saved, the other not."""
    gate = asyncio.Event()
    seen: list[tuple[str, str, dict, bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.method, request.raw_path, dict(request.headers), body))
        if len(seen) == 1:
            await gate.wait()
        if request.method == "MERGE" and "X-Backend-Sections" in request.headers:
            sections = msgpack.unpackb(body)
            return web.Response(status=202, headers={"X-Backend-Section-Statuses": ",".join(
                "503" if dev == "cdev2" else "202" for dev, _, _ in sections)})
        return web.Response(status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        names = [name() for _ in range(10)]
        dev_of = {o: "cdev" if i % 2 else "cdev2" for i, o in enumerate(names)}
        results = await asyncio.gather(*(
            call(client, server, "PUT", f"/sda/11/a/cs/{o}",
                 {"X-Timestamp": ts(), "X-Container-Host": f"127.0.0.1:{port}",
                  "X-Container-Device": dev_of[o], "X-Container-Partition": "5"}, b"abc")
            for o in names))
        assert all(r[0] == 201 for r in results)
        gate.set()

        def sectioned():
            return [(h, b) for m, _, h, b in seen if m == "MERGE"
                    and "X-Backend-Sections" in h] or None

        (headers, body), *_ = await async_wait_for(sectioned, 10, what="a sectioned MERGE")
        sections = {dev: [r["name"] for r in rows] for dev, part, rows in msgpack.unpackb(body)}
        assert set(sections) == {"cdev", "cdev2"}  # both replicas in one request
        dev = os.path.join(server.devices, "sda")

        def saved():
            recs = {r["path"].rsplit("/", 1)[1] for _, r in iter_updates(dev)
                    if r["path"].startswith("/a/cs/")}
            return recs if recs >= set(sections["cdev2"]) else None

        recs = await async_wait_for(saved, 10, what="the refused section saved")
        assert not recs & set(sections["cdev"])  # the accepted section is not
    finally:
        await runner.cleanup()


async def test_quarantine_on_corrupt_full_get(server, client):
    o = name()
    path = f"/sdb/9/a/c/{o}"
    body = b"A" * 1000
    st, _, got = await call(client, server, "PUT", path, {"X-Timestamp": ts()}, body)
    assert st == 201, (st, got)
    dev = os.path.join(server.devices, "sdb")
    h = hash_path("a", "c", o)
    (f,) = reading.current_paths(dev, 9, h)
    with open(f, "r+b") as fh:  # bit rot inside the body; the trailer stays valid
        fh.write(b"B")
    st, _, got = await call(client, server, "GET", path, {"Range": "bytes=1-2"})
    assert st == 206 and got == b"AA"  # ranges are not verified
    # A full GET checks the MD5 before answering: the corrupt copy is never sent.
    st, _, got = await call(client, server, "GET", path)
    assert st == 404 and b"B" not in got
    assert not os.path.exists(fileformat.hash_dir(dev, 9, h))
    assert (await call(client, server, "GET", path))[0] == 404
    assert any(n.startswith(h) for n in os.listdir(os.path.join(dev, "quarantined", "objects")))
    st, _, raw = await call(client, server, "MERGE", "/sdb/9/digests")
    assert msgpack.unpackb(raw) == digests.recompute(dev, 9)


async def test_corrupt_large_object_is_never_delivered_whole(server, client):
    """Streamed bodies: the last chunk waits for the MD5; on mismatch the connection is cut."""
    o = name()
    path = f"/sdb/9/a/c/{o}"
    body = os.urandom(min(MAX, 1024 * 1024))  # several 64 KiB read chunks
    assert (await call(client, server, "PUT", path, {"X-Timestamp": ts()}, body))[0] == 201
    dev = os.path.join(server.devices, "sdb")
    h = hash_path("a", "c", o)
    (f,) = reading.current_paths(dev, 9, h)
    with open(f, "r+b") as fh:
        fh.seek(100)
        fh.write(bytes([body[100] ^ 0xFF]))
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async with client.get(f"http://127.0.0.1:{server.port}{path}") as resp:
            assert resp.status == 200
            async for chunk in resp.content.iter_any():
                got += chunk
    assert len(got) < len(body)
    assert not os.path.exists(fileformat.hash_dir(dev, 9, h))
    assert (await call(client, server, "GET", path))[0] == 404


async def test_digests(server, client):
    """MERGE .../digests, Swift's REPLICATE: the partition's suffix digests, or named
    suffixes re-derived from disk first."""
    dev = os.path.join(server.devices, "sdb")
    names = [name() for _ in range(12)]
    for o in names:
        await call(client, server, "PUT", f"/sdb/10/a/c/{o}", {"X-Timestamp": ts()}, o.encode())
    await call(client, server, "DELETE", f"/sdb/10/a/c/{names[0]}", {"X-Timestamp": ts()})
    await call(client, server, "POST", f"/sdb/10/a/c/{names[1]}", {"X-Timestamp": ts()})
    st, h, raw = await call(client, server, "MERGE", "/sdb/10/digests")
    got = msgpack.unpackb(raw)
    assert st == 200 and got == digests.recompute(dev, 10)
    assert set(got) == {hash_path("a", "c", o)[-3:] for o in names}
    assert all(len(v) == 16 for v in got.values())
    # Drift (a file the journal never heard of) shows only after an explicit suffix listing.
    hx = hash_path("a", "c", names[2])
    with open(os.path.join(fileformat.hash_dir(dev, 10, hx), ts(1000) + ".ts"), "wb") as fh:
        fh.write(fileformat.pack_trailer({}))
    assert msgpack.unpackb((await call(client, server, "MERGE", "/sdb/10/digests"))[2]) == got
    st, _, raw = await call(client, server, "MERGE", f"/sdb/10/digests/{hx[-3:]}-abc")
    assert st == 200 and msgpack.unpackb(raw) == digests.recompute(dev, 10) != got
    assert (await call(client, server, "MERGE", "/sdb/10/digests/zz"))[0] == 400
    assert (await call(client, server, "MERGE", "/nodev/10/digests"))[0] == 507
    st, _, raw = await call(client, server, "MERGE", "/sdb/999/digests")
    assert st == 200 and msgpack.unpackb(raw) == {}


def test_burst_of_connections_is_queued_not_dropped(server):
    """A burst of new connections while the server is busy must wait in the accept queue:
    with a short queue the kernel drops SYNs and each dropped client stalls a whole second
    (a retransmit), which the proxy would take for a dead node."""
    os.killpg(server.proc.pid, signal.SIGSTOP)  # busy (every worker): accepts nothing
    socks = []
    try:
        for _ in range(400):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", server.port))
            socks.append(s)

        def established() -> int:
            _, writable, _ = select.select([], socks, [], 0)
            return sum(1 for s in writable if s.getsockopt(socket.SOL_SOCKET,
                                                           socket.SO_ERROR) == 0)
        # Handshakes complete in the kernel, accepted or not, while the queue has room.
        wait_for(lambda: established() == len(socks), timeout=0.9,
                 what="all 400 handshakes (none waiting on a SYN retransmit)")
    finally:
        os.killpg(server.proc.pid, signal.SIGCONT)
        for s in socks:
            s.close()
    assert healthy(server.port)


def raw_call(server, method: str, path: str, headers: dict, body: bytes = b""):
    """Exact header bytes (bytes values go out as they are; answers are read as latin-1)."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        return r.status, {k: v.encode("latin-1") for k, v in r.getheaders()}, data
    finally:
        c.close()


async def test_utf8_metadata_stored_as_sent_and_bad_utf8_refused(server):
    path = f"/sda/1/a/c/{name()}-日本"
    quoted = urllib.parse.quote(path)
    sent = "日本語 한국어 😀".encode()
    st, _, body = raw_call(server, "PUT", quoted, {
        "X-Timestamp": ts(), "X-Object-Meta-Mixed": sent, "Content-Type": "image/png",
        "Content-Length": "1"}, b"x")
    assert st == 201, body
    for method in ("GET", "HEAD"):
        st, h, _ = raw_call(server, method, quoted, {})
        assert st == 200 and h["X-Object-Meta-Mixed"] == sent
    st, _, _ = raw_call(server, "POST", quoted, {"X-Timestamp": ts(),
                                                 "X-Object-Meta-Post": "🎉".encode()})
    assert st == 202
    assert raw_call(server, "HEAD", quoted, {})[1]["X-Object-Meta-Post"] == "🎉".encode()
    for header in ("X-Object-Meta-Bad", "Content-Type", "Content-Disposition"):
        for method in ("PUT", "POST"):
            st, _, body = raw_call(server, method, quoted, {
                "X-Timestamp": ts(), header: b"a\xffb", "Content-Length": "1"}, b"x")
            assert st == 400 and b"UTF-8" in body, (method, header, st, body)
    st, h, _ = raw_call(server, "HEAD", quoted, {})
    assert h["X-Object-Meta-Post"] == "🎉".encode() and h["Content-Type"] == b"image/png"
