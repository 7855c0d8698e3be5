"""Account server against a real process: lifecycle, metadata, container reports, listings."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

import aiohttp
import pytest
from yarl import URL

from swiftlite.common.clients.client import quote_path
from swiftlite.common.timestamp import Timestamp
from tests.helpers import ServerProcess, free_port

A = "AUTH_acct"


def ts(offset: float = 0.0) -> str:
    return Timestamp.parse(time.time() + offset).internal


@pytest.fixture
def base(tmp_path):
    devices = tmp_path / "node"
    (devices / "sda").mkdir(parents=True)
    conf = tmp_path / "a.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[account-server]\nio_threads = 2\n")
    port = free_port()
    proc = ServerProcess("account", str(conf), port).start()
    yield f"http://127.0.0.1:{port}"
    proc.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def url(base: str, *names: str, query: str = "") -> URL:
    return URL(base + quote_path(*names) + ("?" + query if query else ""), encoded=True)


async def report(http, base, c, put="0", delete="0", count=0, nbytes=0, stats=None):
    h = {"X-Put-Timestamp": put, "X-Delete-Timestamp": delete, "X-Object-Count": str(count),
         "X-Bytes-Used": str(nbytes), "X-Timestamp": stats or ts()}
    async with http.put(url(base, "sda", "0", A, c), headers=h) as r:
        return r.status


async def listing(http, base, **query):
    async with http.get(url(base, "sda", "0", A), params=query) as r:
        return r.status, r.headers, await r.read()


async def test_account_lifecycle(base, http):
    assert await report(http, base, "c", put=ts()) == 404  # no account yet
    async with http.head(url(base, "sda", "0", A)) as r:
        assert r.status == 404
    async with http.put(url(base, "sda", "0", A), headers={
            "X-Timestamp": ts(), "X-Account-Meta-Owner": "me"}) as r:
        assert r.status == 201
    async with http.put(url(base, "sda", "0", A), headers={"X-Timestamp": ts(1)}) as r:
        assert r.status == 202
    async with http.post(url(base, "sda", "0", A), headers={
            "X-Timestamp": ts(-50), "X-Account-Meta-Owner": "old"}) as r:
        assert r.status == 204
    async with http.head(url(base, "sda", "0", A)) as r:
        assert r.status == 204
        assert r.headers["X-Account-Meta-Owner"] == "me"  # older POST lost
        assert r.headers["X-Account-Container-Count"] == "0"
        assert r.headers["X-Timestamp"] and r.headers["X-Put-Timestamp"]
    async with http.delete(url(base, "sda", "0", A), headers={"X-Timestamp": ts(2)}) as r:
        assert r.status == 204
    async with http.head(url(base, "sda", "0", A)) as r:
        assert r.status == 404
    assert await report(http, base, "c", put=ts(3)) == 404  # deleted account takes nothing
    async with http.post(url(base, "sda", "0", A), headers={"X-Timestamp": ts(3)}) as r:
        assert r.status == 404


async def test_container_reports_and_listing(base, http):
    async with http.put(url(base, "sda", "0", A), headers={"X-Timestamp": ts()}) as r:
        assert r.status == 201
    t = [ts(i) for i in range(6)]
    assert await report(http, base, "c1", put=t[1], count=3, nbytes=30, stats=t[1]) == 201
    assert await report(http, base, "c2", put=t[1], count=1, nbytes=5, stats=t[1]) == 201
    assert await report(http, base, "d-x", put=t[1], stats=t[1]) == 201
    assert await report(http, base, "é", put=t[1], stats=t[1]) == 201
    # A stale stat report changes nothing; a newer one wins.
    assert await report(http, base, "c1", put=t[1], count=99, nbytes=99, stats=t[0]) == 201
    assert await report(http, base, "c2", put=t[1], count=2, nbytes=7, stats=t[2]) == 201
    async with http.head(url(base, "sda", "0", A)) as r:
        assert (r.headers["X-Account-Container-Count"], r.headers["X-Account-Object-Count"],
                r.headers["X-Account-Bytes-Used"]) == ("4", "5", "37")
    st, hd, body = await listing(http, base, format="json")
    rows = json.loads(body)
    assert [r["name"] for r in rows] == ["c1", "c2", "d-x", "é"]
    assert rows[0] == {"name": "c1", "count": 3, "bytes": 30,
                       "last_modified": Timestamp.parse(t[1]).iso(),
                       "storage_policy": "Policy-0"}
    st, hd, body = await listing(http, base, delimiter="-")
    assert st == 200 and body.decode().splitlines() == ["c1", "c2", "d-", "é"]
    st, hd, body = await listing(http, base, format="xml", prefix="c", reverse="1", limit="1")
    root = ET.fromstring(body)
    assert root.tag == "account" and root.get("name") == A
    assert [(e.find("name").text, e.find("count").text) for e in root] == [("c2", "2")]
    st, hd, body = await listing(http, base, marker="c2", end_marker="é", format="json")
    assert [r["name"] for r in json.loads(body)] == ["d-x"]
    # Delete newer than put: gone from listing and totals. An older delete is ignored.
    assert await report(http, base, "c2", put=t[1], delete=t[0], stats=t[3]) == 201
    assert "c2" in (await listing(http, base))[2].decode().split()
    assert await report(http, base, "c2", put=t[1], delete=t[4], stats=t[4]) == 201
    st, hd, body = await listing(http, base)
    assert body.decode().split() == ["c1", "d-x", "é"]
    assert hd["X-Account-Container-Count"] == "3" and hd["X-Account-Object-Count"] == "3"
    st, hd, body = await listing(http, base, prefix="zz")
    assert st == 204


async def test_bad_input(base, http):
    async with http.put(url(base, "sda", "0", A), headers={"X-Timestamp": ts()}) as r:
        assert r.status == 201
    cases = [
        ("PUT", f"{base}/sda/0/{A}/c", {"X-Put-Timestamp": "nope"}, 400),
        ("PUT", f"{base}/sda/0/{A}/c", {"X-Put-Timestamp": ts(), "X-Object-Count": "x"}, 400),
        ("PUT", f"{base}/sda/0/{A}/c", {}, 400),
        ("PUT", f"{base}/sda/0/{A}/" + "c" * 257, {"X-Put-Timestamp": ts()}, 400),
        ("PUT", f"{base}/sda/0/{A}/c%FF", {"X-Put-Timestamp": ts()}, 400),
        ("PUT", f"{base}/sda/0/bad%00acct", {"X-Timestamp": ts()}, 400),
        ("POST", f"{base}/sda/0/{A}", {"X-Timestamp": "x"}, 400),
        ("GET", f"{base}/sda/0/{A}?limit=10001", {}, 412),
        ("GET", f"{base}/sda/0/{A}?limit=%FF", {}, 400),
        ("PUT", f"{base}/sdq/0/{A}", {"X-Timestamp": ts()}, 507),
    ]
    for method, raw, headers, want in cases:
        async with http.request(method, URL(raw, encoded=True), headers=headers) as r:
            assert r.status == want, (method, raw, await r.text())
    st, hd, body = await listing(http, base)
    assert st == 204 and hd["X-Account-Container-Count"] == "0"
