"""Container server against real processes on loopback: lifecycle, listings, group commit,
bad input, account roll-ups (live and via async_pending)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import msgpack
import pytest
from yarl import URL

from swiftlite.common.async_pending import iter_updates
from swiftlite.common.clients.client import quote_path
from swiftlite.common.timestamp import Timestamp
from swiftlite.db.broker import COMMIT_DELAY_ENV
from tests.helpers import ServerProcess, async_wait_for, free_port

A = "AUTH_test"


@dataclass
class DBServers:
    root: str
    devices: str
    conf: str
    cport: int
    aport: int
    procs: dict[str, ServerProcess] = field(default_factory=dict)

    def url(self, *names: str, port: int | None = None, query: str = "") -> URL:
        raw = f"http://127.0.0.1:{port or self.cport}{quote_path(*names)}"
        return URL(raw + ("?" + query if query else ""), encoded=True)

    def aurl(self, *names: str, query: str = "") -> URL:
        return self.url(*names, port=self.aport, query=query)

    def account_headers(self, port: int | None = None) -> dict[str, str]:
        return {"X-Account-Host": f"127.0.0.1:{port or self.aport}",
                "X-Account-Device": "sda", "X-Account-Partition": "3"}


def start_db_servers(tmp_path, account: bool = True, extra: str = "") -> DBServers:
    devices = tmp_path / "node"
    (devices / "sda").mkdir(parents=True)
    conf = tmp_path / "db.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\nio_threads = 4\n"
                    "[container-server]\naccount_update_interval = 0.1\n"
                    "node_timeout = 2\n" + extra + "\n[account-server]\n")
    s = DBServers(str(tmp_path), str(devices), str(conf), free_port(), free_port())
    if account:
        s.procs["account"] = ServerProcess("account", s.conf, s.aport).start()
    s.procs["container"] = ServerProcess("container", s.conf, s.cport).start()
    return s


@pytest.fixture
def servers(tmp_path) -> Iterator[DBServers]:
    s = start_db_servers(tmp_path)
    yield s
    for p in s.procs.values():
        p.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def ts(offset: float = 0.0) -> str:
    return Timestamp.parse(time.time() + offset).internal


async def put_account(s, http, account=A):
    async with http.put(s.aurl("sda", "3", account), headers={"X-Timestamp": ts()}) as r:
        assert r.status == 201


async def put_container(s, http, c="c", account=A, headers=None, expect=201):
    h = {"X-Timestamp": ts(), **s.account_headers(), **(headers or {})}
    async with http.put(s.url("sda", "1", account, c), headers=h) as r:
        assert r.status == expect, await r.text()


async def put_obj(s, http, name, c="c", size=1, when=None, account=A, ctype="text/plain"):
    h = {"X-Timestamp": when or ts(), "X-Size": str(size), "X-Content-Type": ctype,
         "X-Etag": "d41d8cd98f00b204e9800998ecf8427e"}
    async with http.put(s.url("sda", "1", account, c, name), headers=h) as r:
        return r.status


async def head(http, url):
    async with http.head(url) as r:
        return r.status, r.headers


async def listing(http, url, **query):
    async with http.get(url, params=query) as r:
        body = await r.read()
        return r.status, r.headers, body


# -- lifecycle ---------------------------------------------------------------------------
async def test_container_lifecycle_and_metadata(servers, http):
    s = servers
    await put_account(s, http)
    t0 = ts()
    h = {"X-Timestamp": t0, "X-Container-Meta-Color": "red", "X-Container-Read": ".r:*",
         "X-Versions-Location": "old", **s.account_headers()}
    async with http.put(s.url("sda", "1", A, "c"), headers=h) as r:
        assert r.status == 201
    async with http.put(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(1)}) as r:
        assert r.status == 202
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert st == 204
    assert hd["X-Container-Object-Count"] == "0" and hd["X-Container-Meta-Color"] == "red"
    assert hd["X-Container-Read"] == ".r:*" and hd["X-Versions-Location"] == "old"
    assert hd["X-Put-Timestamp"] == Timestamp.parse(ts(1)).normal or hd["X-Put-Timestamp"]
    # Metadata merges newest-wins per key: an older POST changes nothing ...
    async with http.post(s.url("sda", "1", A, "c"), headers={
            "X-Timestamp": ts(-100), "X-Container-Meta-Color": "blue"}) as r:
        assert r.status == 204
    assert (await head(http, s.url("sda", "1", A, "c")))[1]["X-Container-Meta-Color"] == "red"
    # ... a newer one wins, and an empty value with a newer timestamp deletes the key.
    async with http.post(s.url("sda", "1", A, "c"), headers={
            "X-Timestamp": ts(2), "X-Container-Meta-Color": "green"}) as r:
        assert r.status == 204
    assert (await head(http, s.url("sda", "1", A, "c")))[1]["X-Container-Meta-Color"] == "green"
    async with http.post(s.url("sda", "1", A, "c"), headers={
            "X-Timestamp": ts(3), "X-Container-Meta-Color": ""}) as r:
        assert r.status == 204
    assert "X-Container-Meta-Color" not in (await head(http, s.url("sda", "1", A, "c")))[1]
    # Non-empty containers cannot be deleted; an object DELETE row empties it.
    assert await put_obj(s, http, "o", when=ts(4)) == 201
    async with http.delete(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(5)}) as r:
        assert r.status == 409
    async with http.delete(s.url("sda", "1", A, "c", "o"), headers={"X-Timestamp": ts(6)}) as r:
        assert r.status == 204
    async with http.delete(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(7)}) as r:
        assert r.status == 204
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert st == 404 and hd["X-Backend-Delete-Timestamp"] > hd["X-Backend-Put-Timestamp"]
    async with http.get(s.url("sda", "1", A, "c")) as r:
        assert r.status == 404
    async with http.post(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(8)}) as r:
        assert r.status == 404
    async with http.delete(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(9)}) as r:
        assert r.status == 404
    # A newer PUT re-creates it.
    async with http.put(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(10)}) as r:
        assert r.status == 201


async def test_absent_container_and_missing_device(servers, http):
    s = servers
    assert (await head(http, s.url("sda", "1", A, "nope")))[0] == 404
    assert await put_obj(s, http, "o", c="nope") == 404  # sender keeps an async_pending
    async with http.put(s.url("sdz", "1", A, "c"), headers={"X-Timestamp": ts()}) as r:
        assert r.status == 507


# -- listings ------------------------------------------------------------------------------
NAMES = ["a", "a/b", "a/c/d", "aa", "b/x", "c", "é", "é/1", "\u4e2d", "\U0001F600", "z"]


async def fill(s, http, names=NAMES, c="c"):
    await put_account(s, http)
    await put_container(s, http, c)
    rows = [{"name": n, "created_at": ts(), "size": len(n), "content_type": "text/plain",
             "etag": "e" * 32, "deleted": 0} for n in names]
    async with http.request("MERGE", s.url("sda", "1", A, c),
                            data=msgpack.packb(rows)) as r:
        assert r.status == 202, await r.text()


async def names(http, url, **query):
    st, hd, body = await listing(http, url, format="json", **query)
    assert st == 200, body
    return [r.get("name", r.get("subdir")) for r in json.loads(body)]


async def test_listing_order_and_formats(servers, http):
    s = servers
    await fill(s, http)
    url = s.url("sda", "1", A, "c")
    by_bytes = sorted(NAMES, key=lambda n: n.encode())
    assert await names(http, url) == by_bytes
    assert by_bytes[-3:] == ["é/1", "\u4e2d", "\U0001F600"]  # UTF-8 byte order
    st, hd, body = await listing(http, url)
    assert st == 200 and hd["Content-Type"] == "text/plain; charset=utf-8"
    assert body.decode().splitlines() == by_bytes
    st, hd, body = await listing(http, url, format="json")
    assert hd["Content-Type"] == "application/json; charset=utf-8"
    row = json.loads(body)[0]
    assert set(row) == {"name", "hash", "bytes", "content_type", "last_modified"}
    assert row["bytes"] == 1 and len(row["last_modified"]) == 26  # 2024-01-01T00:00:00.000000
    st, hd, body = await listing(http, url, format="xml", delimiter="/")
    assert hd["Content-Type"] == "application/xml; charset=utf-8"
    root = ET.fromstring(body)
    assert root.tag == "container" and root.get("name") == "c"
    assert root[0].tag == "object" and root[0].find("name").text == "a"
    assert root[1].tag == "subdir" and root[1].get("name") == "a/"
    for accept, ctype in [("application/json", "application/json"),
                          ("text/xml", "text/xml"),  # Swift keeps the asked type
                          ("application/xml", "application/xml"),
                          ("text/plain", "text/plain")]:
        async with http.get(url, headers={"Accept": accept}) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith(ctype)
    async with http.get(url, params={"format": "json"}, headers={"Accept": "text/plain"}) as r:
        assert r.headers["Content-Type"].startswith("application/json")  # query wins


async def test_listing_parameters(servers, http):
    s = servers
    await fill(s, http)
    url = s.url("sda", "1", A, "c")
    assert await names(http, url, delimiter="/") == [
        "a", "a/", "aa", "b/", "c", "z", "é", "é/", "\u4e2d", "\U0001F600"]
    assert await names(http, url, prefix="a/", delimiter="/") == ["a/b", "a/c/"]
    assert await names(http, url, prefix="a") == ["a", "a/b", "a/c/d", "aa"]
    assert await names(http, url, marker="b/x", end_marker="é") == ["c", "z"]
    assert await names(http, url, limit="2", marker="a") == ["a/b", "a/c/d"]
    assert await names(http, url, reverse="true", limit="3") == [
        "\U0001F600", "\u4e2d", "é/1"]
    assert await names(http, url, reverse="on", marker="c", end_marker="a/b") == [
        "b/x", "aa", "a/c/d"]
    assert await names(http, url, reverse="yes", delimiter="/", marker="b") == [
        "aa", "a/", "a"]
    assert await names(http, url, limit="0") == []


async def test_empty_listings(servers, http):
    s = servers
    await fill(s, http, names=[])
    url = s.url("sda", "1", A, "c")
    st, _, body = await listing(http, url)
    assert st == 204 and body == b""
    st, _, body = await listing(http, url, format="json")
    assert st == 200 and body == b"[]"
    st, _, body = await listing(http, url, prefix="zzz", format="xml")
    assert st == 200 and ET.fromstring(body).tag == "container" and len(ET.fromstring(body)) == 0


# -- group commit ----------------------------------------------------------------------------
@pytest.fixture
def slow_commit_servers(tmp_path, monkeypatch) -> Iterator[DBServers]:
    """Servers whose every item transaction takes half a second, as on a slow disk."""
    monkeypatch.setenv(COMMIT_DELAY_ENV, "500")
    s = start_db_servers(tmp_path)
    yield s
    for p in s.procs.values():
        p.stop()


async def test_concurrent_updates_all_land_with_group_commit(slow_commit_servers, http):
    s = slow_commit_servers
    await put_account(s, http)
    await put_container(s, http)
    # Each transaction takes 0.5 s, so updates arriving while one commits share the next
    # (on tmpfs with no delay, a busy client can deliver each after the last committed).
    n = 64
    sizes = [1000 + i for i in range(n)]
    statuses = await asyncio.gather(*(put_obj(s, http, f"obj-{i:03d}", size=sz)
                                      for i, sz in enumerate(sizes)))
    assert statuses == [201] * n
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert hd["X-Container-Object-Count"] == str(n)
    assert hd["X-Container-Bytes-Used"] == str(sum(sizes))
    assert hd["X-Backend-Updates-Merged"] == str(n)
    assert int(hd["X-Backend-Update-Commits"]) <= n // 4  # far fewer transactions than updates
    assert await names(http, s.url("sda", "1", A, "c")) == [f"obj-{i:03d}" for i in range(n)]


async def test_object_rows_newest_wins(servers, http):
    s = servers
    await put_account(s, http)
    await put_container(s, http)
    t1, t2 = ts(1), ts(2)
    assert await put_obj(s, http, "o", size=5, when=t2) == 201
    assert await put_obj(s, http, "o", size=9, when=t1) == 201  # stale: accepted, no change
    async with http.delete(s.url("sda", "1", A, "c", "o"), headers={"X-Timestamp": t1}) as r:
        assert r.status == 204
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert (hd["X-Container-Object-Count"], hd["X-Container-Bytes-Used"]) == ("1", "5")


# -- bad input -----------------------------------------------------------------------------
async def test_bad_input_rejected_and_changes_nothing(servers, http):
    s = servers
    await fill(s, http, names=["keep"])
    base = f"http://127.0.0.1:{s.cport}/sda/1/{A}/c"
    good = {"X-Size": "1", "X-Content-Type": "t", "X-Etag": "e"}
    cases = [
        ("PUT", base + "/" + "o" * 1025, {"X-Timestamp": ts(), **good}, 400),
        ("PUT", base + "/bad%FFname", {"X-Timestamp": ts(), **good}, 400),
        ("PUT", base + "/nul%00name", {"X-Timestamp": ts(), **good}, 400),
        ("PUT", base + "/o", {"X-Timestamp": "yesterday", **good}, 400),
        ("PUT", base + "/o", {**good}, 400),
        ("PUT", base + "/o", {"X-Timestamp": ts(), **good, "X-Size": "-1"}, 400),
        ("DELETE", base + "/o", {"X-Timestamp": "1.2.3"}, 400),
        ("PUT", f"http://127.0.0.1:{s.cport}/sda/1/{A}/" + "c" * 257, {"X-Timestamp": ts()}, 400),
        ("PUT", f"http://127.0.0.1:{s.cport}/sda/x/{A}/c2", {"X-Timestamp": ts()}, 400),
        ("POST", base, {"X-Timestamp": ts(), "X-Container-Meta-" + "k" * 129: "v"}, 400),
        ("POST", base, {"X-Timestamp": "abc", "X-Container-Meta-K": "v"}, 400),
        ("DELETE", base, {"X-Timestamp": "-5"}, 400),
        ("GET", base + "?limit=10001", {}, 412),
        ("GET", base + "?prefix=%FF", {}, 400),
        ("GET", base + "?marker=%FF", {}, 400),
        ("MERGE", base, {}, 400),  # empty body is not a msgpack list
    ]
    for method, url, headers, want in cases:
        async with http.request(method, URL(url, encoded=True), headers=headers) as r:
            body = await r.text()
            assert r.status == want, (method, url, r.status, body)
            assert body.strip(), "a reason is given"
    bad_batch = [{"name": "fine", "created_at": ts(), "size": 1},
                 {"name": "x\x00y", "created_at": ts(), "size": 1}]
    async with http.request("MERGE", s.url("sda", "1", A, "c"),
                            data=msgpack.packb(bad_batch)) as r:
        assert r.status == 400
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert hd["X-Container-Object-Count"] == "1" and "X-Container-Meta-K" not in hd
    assert await names(http, s.url("sda", "1", A, "c")) == ["keep"]
    assert (await head(http, s.url("sda", "1", A, "c2")))[0] == 404


# -- account roll-ups ------------------------------------------------------------------------
async def account_row(http, s, c="c"):
    st, _, body = await listing(http, s.aurl("sda", "3", A), format="json")
    if st != 200:
        return None
    return next((r for r in json.loads(body) if r["name"] == c), None)


async def test_account_follows_container_changes(servers, http):
    s = servers
    await put_account(s, http)
    await put_container(s, http)
    row = await account_row(http, s)
    assert row is not None and row["count"] == 0  # reported synchronously on PUT
    for i in range(5):
        assert await put_obj(s, http, f"o{i}", size=10) == 201

    async def caught_up():
        r = await account_row(http, s)
        return r is not None and (r["count"], r["bytes"]) == (5, 50)
    await async_wait_for(caught_up, timeout=10, what="account stats")
    st, hd = await head(http, s.aurl("sda", "3", A))
    assert hd["X-Account-Object-Count"] == "5" and hd["X-Account-Bytes-Used"] == "50"
    for i in range(5):
        async with http.delete(s.url("sda", "1", A, "c", f"o{i}"),
                               headers={"X-Timestamp": ts()}) as r:
            assert r.status == 204
    async with http.delete(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(1)}) as r:
        assert r.status == 204
    assert await account_row(http, s) is None
    st, hd = await head(http, s.aurl("sda", "3", A))
    assert hd["X-Account-Container-Count"] == "0" and hd["X-Account-Object-Count"] == "0"


async def test_container_put_for_missing_account_is_404(servers, http):
    await put_container(servers, http, account="AUTH_nobody", expect=404)


async def test_account_down_saves_async_pending(servers, http):
    s = servers
    dead = free_port()  # nothing listens here
    h = {"X-Timestamp": ts(), **s.account_headers(port=dead)}
    async with http.put(s.url("sda", "1", A, "c"), headers=h) as r:
        assert r.status == 201  # the container exists; the account hears later
    dev = os.path.join(s.devices, "sda")
    records = [rec for _, rec in iter_updates(dev)]
    assert len(records) == 1
    rec = records[0]
    assert rec["method"] == "PUT" and rec["path"] == f"/{A}/c"
    assert rec["targets"] == [{"ip": "127.0.0.1", "port": dead, "device": "sda",
                               "partition": 3}]
    assert rec["headers"]["X-Object-Count"] == "0" and rec["headers"]["X-Put-Timestamp"]
    # Later stat changes are coalesced and saved too (still down).
    assert await put_obj(s, http, "o", size=7) == 201

    def saved_stat():
        return any(r["headers"]["X-Bytes-Used"] == "7" for _, r in iter_updates(dev))
    await async_wait_for(saved_stat, timeout=10, what="async_pending stat report")


async def test_tombstones_reclaimed_after_reclaim_age(tmp_path, http):
    s = start_db_servers(tmp_path, account=False,
                         extra="reclaim_age = 5\nreclaim_interval = 0.1\n")
    try:
        async with http.put(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts()}) as r:
            assert r.status == 201
        old, recent = ts(-60), ts(-1)
        for name, when in (("old", old), ("recent", recent)):
            assert await put_obj(s, http, name, when=ts(-120)) == 201
            async with http.delete(s.url("sda", "1", A, "c", name),
                                   headers={"X-Timestamp": when}) as r:
                assert r.status == 204
        async with http.post(s.url("sda", "1", A, "c"), headers={
                "X-Timestamp": old, "X-Container-Meta-Gone": ""}) as r:
            assert r.status == 204
        db = next(os.path.join(d, f) for d, _, fs in os.walk(s.devices) for f in fs
                  if f.endswith(".db"))

        def tombstones() -> list[str]:
            conn = sqlite3.connect(db)
            try:
                rows = conn.execute("SELECT name FROM object WHERE deleted = 1").fetchall()
                meta = json.loads(conn.execute("SELECT metadata FROM stat").fetchone()[0])
            finally:
                conn.close()
            return sorted([r[0] for r in rows] + list(meta))
        # Only the tombstone older than reclaim_age (and the old deleted key) go.
        await async_wait_for(lambda: tombstones() == ["recent"], timeout=10,
                             what="old tombstones reclaimed")
        st, hd = await head(http, s.url("sda", "1", A, "c"))
        assert hd["X-Container-Object-Count"] == "0"
    finally:
        for p in s.procs.values():
            p.stop()


async def test_account_reports_are_coalesced(servers, http):
    s = servers
    await put_account(s, http)
    await put_container(s, http)
    statuses = await asyncio.gather(*(put_obj(s, http, f"o{i}", size=2) for i in range(32)))
    assert statuses == [201] * 32

    async def caught_up():
        r = await account_row(http, s)
        return r is not None and (r["count"], r["bytes"]) == (32, 64)
    await async_wait_for(caught_up, timeout=10, what="account stats")
    log = s.procs["account"].log_text()
    reports = log.count(f"PUT /sda/3/{A}/c ")
    assert 1 < reports < 12, reports  # the container PUT plus a few coalesced stat reports


async def test_merge_sections_update_each_replica_and_report_each(tmp_path, http):
    """One MERGE for several replicas of a container held by this server (one per device):
    every DB gets its own rows, and a DB that cannot take them is reported alone."""
    s = start_db_servers(tmp_path)
    try:
        (tmp_path / "node" / "sdb").mkdir()
        await put_account(s, http)
        for dev in ("sda", "sdb"):
            h = {"X-Timestamp": ts(), **s.account_headers()}
            async with http.put(s.url(dev, "1", A, "multi"), headers=h) as r:
                assert r.status == 201
        row = {"name": "o1", "created_at": ts(), "size": 3, "content_type": "text/plain",
               "etag": "e" * 32, "deleted": 0}
        body = msgpack.packb([["sda", 1, [row]], ["sdb", 1, [dict(row, name="o2")]],
                              ["sdz", 1, [row]], ["sda", 7, [row]]])
        async with http.request("MERGE", s.url("sda", "1", A, "multi"), data=body,
                                headers={"X-Backend-Sections": "4"}) as r:
            assert r.status == 202
            # sdz is no device (507); partition 7 of sda holds no such container (404).
            assert r.headers["X-Backend-Section-Statuses"] == "202,202,507,404"
        assert await names(http, s.url("sda", "1", A, "multi")) == ["o1"]
        assert await names(http, s.url("sdb", "1", A, "multi")) == ["o2"]
        async with http.request("MERGE", s.url("sda", "1", A, "multi"),
                                data=msgpack.packb([["sda", 1]]),
                                headers={"X-Backend-Sections": "1"}) as r:
            assert r.status == 400
    finally:
        for p in s.procs.values():
            p.stop()


async def test_post_moves_put_timestamp_and_the_account_row_follows(servers, http):
    """Swift's Last-Modified is the last PUT or POST: a POST advances put_timestamp (never
    for a deleted container, never backwards) and the account listing learns it."""
    s = servers
    await put_account(s, http)
    await put_container(s, http)
    t_post = ts(5)
    async with http.post(s.url("sda", "1", A, "c"), headers={
            "X-Timestamp": t_post, "X-Container-Meta-K": "v"}) as r:
        assert r.status == 204
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert hd["X-Put-Timestamp"] == Timestamp.parse(t_post).normal
    assert hd["Last-Modified"] == Timestamp.parse(t_post).http_date()
    assert hd["X-Storage-Policy"] == "Policy-0"
    async with http.post(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(-50)}) as r:
        assert r.status == 204  # an older POST leaves it alone
    assert (await head(http, s.url("sda", "1", A, "c")))[1]["X-Put-Timestamp"] == \
        Timestamp.parse(t_post).normal

    async def account_has_post_time() -> bool:
        row = await account_row(http, s)
        return row is not None and row["last_modified"] == Timestamp.parse(t_post).iso()
    await async_wait_for(account_has_post_time, 10, what="account row with the POST's time")
    async with http.delete(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(10)}) as r:
        assert r.status == 204
    async with http.post(s.url("sda", "1", A, "c"), headers={"X-Timestamp": ts(20)}) as r:
        assert r.status == 404
    st, hd = await head(http, s.url("sda", "1", A, "c"))
    assert st == 404 and hd["X-Backend-Put-Timestamp"] == Timestamp.parse(t_post).internal


async def test_storage_policy_checked_on_put(servers, http):
    s = servers
    await put_account(s, http)
    async with http.put(s.url("sda", "1", A, "c"), headers={
            "X-Timestamp": ts(), "X-Storage-Policy": "gold", **s.account_headers()}) as r:
        assert (r.status, (await r.text()).strip()) == (400, "Invalid X-Storage-Policy 'gold'")
    assert (await head(http, s.url("sda", "1", A, "c")))[0] == 404
    await put_container(s, http, headers={"X-Storage-Policy": "policy-0"})
    assert (await head(http, s.url("sda", "1", A, "c")))[1]["X-Storage-Policy"] == "Policy-0"
