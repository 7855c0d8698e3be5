"""The ratelimit feature against a real cluster: a burst of writes into one container (or
of container creations in one account) is held to its rate, and what would wait past
max_sleep_time_seconds is 498; other containers, accounts and whitelisted accounts go on
unhindered; a blacklisted account gets 497; limits by container size start where the size
says; with memcached the limit is shared by every proxy.

Each proxy here runs one worker with `max_sleep_time_seconds = 1` and no burst buffer: of a
burst of N requests at R per second, about R + 1 are served (turns 0, 1/R, ... 1 s away) and
the rest refused, whatever the machine's speed. The bounds asserted leave room for a burst
that arrives spread out over a second or so."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import swiftclient

from tests.helpers import free_port, http_request, start_memcached, start_proxy_variant, wait_for

A = "/v1/AUTH_test"


def _limited(cluster, name: str, proxy: dict[str, str] | None = None, **options: str):
    opts = {"max_sleep_time_seconds": "1", "rate_buffer_seconds": "0", **options}
    return start_proxy_variant(cluster, name, proxy, {"ratelimit": opts})


def _burst(url: str, token: str, method: str, paths: list[str]) -> list[int]:
    def one(path: str) -> int:
        return http_request(url, method, path, {"X-Auth-Token": token}, b"x")[0]
    with ThreadPoolExecutor(len(paths)) as pool:
        return list(pool.map(one, paths))


def _token(cluster, user: str = "test:tester", key: str = "testing") -> str:
    return swiftclient.get_auth(cluster.auth_url, user, key)[1]


def test_writes_into_a_hot_container_are_held_to_the_rate(cluster):
    conn = cluster.connection()
    for c in ("hot", "cold"):
        conn.put_container(c)
    proxy = _limited(cluster, "rl-writes", container_ratelimit_0="4")
    url = f"http://127.0.0.1:{proxy.port}"
    tok = _token(cluster)
    try:
        statuses = _burst(url, tok, "PUT", [f"{A}/hot/o{i}" for i in range(16)])
        assert 2 <= statuses.count(201) <= 9 and statuses.count(498) >= 7, statuses
        assert set(statuses) == {201, 498}
        # Another container, and reads of this one, are not held up by it.
        assert http_request(url, "PUT", f"{A}/cold/o", {"X-Auth-Token": tok}, b"x")[0] == 201
        assert http_request(url, "GET", f"{A}/hot/o0", {"X-Auth-Token": tok})[0] in (200, 404)
        status, headers, body = http_request(url, "PUT", f"{A}/hot/late",
                                             {"X-Auth-Token": tok}, b"x")
        assert status in (201, 498)
        # /info tells clients the limits.
        info = json.loads(urllib.request.urlopen(url + "/info").read())
        assert info["ratelimit"]["container_ratelimits"] == [[0, 4.0]]
    finally:
        proxy.stop()
    # Refused writes stored nothing: only the served ones are listed.
    names = {o["name"] for o in conn.get_container("hot")[1]}
    assert len(names) == statuses.count(201) + (status == 201)


def test_a_copy_counts_in_its_destination_container(cluster):
    """One write per 5 s: a PUT takes the destination's turn, so a COPY into it right after
    is refused, while the source container, only read, keeps its own turn for a write."""
    conn = cluster.connection()
    conn.put_container("source")
    conn.put_container("copies")
    conn.put_object("source", "img", b"pixels")
    proxy = _limited(cluster, "rl-copy", container_ratelimit_0="0.2")
    url = f"http://127.0.0.1:{proxy.port}"
    auth = {"X-Auth-Token": _token(cluster)}
    try:
        assert http_request(url, "PUT", f"{A}/copies/first", auth, b"x")[0] == 201
        status = http_request(url, "COPY", f"{A}/source/img",
                              {**auth, "Destination": "copies/second"})[0]
        assert status == 498
        assert http_request(url, "PUT", f"{A}/source/new", auth, b"x")[0] == 201
    finally:
        proxy.stop()
    assert {o["name"] for o in conn.get_container("copies")[1]} == {"first"}


def test_refused_requests_take_no_turn(cluster):
    """A client hammering past the limit does not push later turns out: once the burst is
    over, the container's next writer waits about one turn, not the bursts' length."""
    conn = cluster.connection()
    conn.put_container("hammered")
    proxy = _limited(cluster, "rl-hammered", container_ratelimit_0="2")
    url = f"http://127.0.0.1:{proxy.port}"
    tok = _token(cluster)
    try:
        for _ in range(3):
            statuses = _burst(url, tok, "PUT", [f"{A}/hammered/o{i}" for i in range(12)])
            assert statuses.count(498) >= 6, statuses
        # 36 requests at 2/s would reach 18 s ahead if refusals kept their turns.
        wait_for(lambda: http_request(url, "PUT", f"{A}/hammered/next",
                                      {"X-Auth-Token": tok}, b"x")[0] == 201,
                 5, what="a write within a few turns of the burst")
    finally:
        proxy.stop()


def test_requests_the_core_refuses_take_no_turn(cluster):
    """Strangers (no token, or another account's) hammering a tenant's container and
    account are refused by the core and use up none of the tenant's turns: its own writes
    right after go through at once."""
    conn = cluster.connection()
    conn.put_container("victim")
    proxy = _limited(cluster, "rl-strangers", container_ratelimit_0="4", account_ratelimit="4")
    url = f"http://127.0.0.1:{proxy.port}"
    stranger = _token(cluster, "test2:tester2", "testing2")
    try:
        for token in (stranger, "AUTH_tk" + "0" * 32):
            statuses = _burst(url, token, "PUT", [f"{A}/victim/o{i}" for i in range(20)] +
                              [f"{A}/made-by-stranger{i}" for i in range(20)])
            assert set(statuses) <= {401, 403}, statuses
        tok = _token(cluster)
        for i in range(3):  # turns 0, 0.25 and 0.5 s away: none refused
            assert http_request(url, "PUT", f"{A}/victim/mine{i}", {"X-Auth-Token": tok},
                                b"x")[0] == 201
            assert http_request(url, "PUT", f"{A}/mine{i}", {"X-Auth-Token": tok})[0] == 201
    finally:
        proxy.stop()


def test_container_creations_per_account_and_white_and_black_lists(cluster):
    proxy = _limited(cluster, "rl-account", account_ratelimit="3",
                     account_whitelist="AUTH_test2", account_blacklist="AUTH_test5")
    url = f"http://127.0.0.1:{proxy.port}"
    tok = _token(cluster)
    try:
        statuses = _burst(url, tok, "PUT", [f"{A}/made{i}" for i in range(12)])
        assert 2 <= statuses.count(201) <= 7 and statuses.count(498) >= 5, statuses
        # A whitelisted account is never held up.
        tok2 = _token(cluster, "test2:tester2", "testing2")
        statuses = _burst(url, tok2, "PUT", [f"/v1/AUTH_test2/free{i}" for i in range(12)])
        assert set(statuses) == {201}, statuses
        # A blacklisted one writes nothing; its reads of objects are not this feature's.
        tok5 = _token(cluster, "test5:tester5", "testing5")
        status, _, body = http_request(url, "PUT", "/v1/AUTH_test5/c",
                                       {"X-Auth-Token": tok5})
        assert (status, body) == (497, b"Your account has been blacklisted")
    finally:
        proxy.stop()


def test_listing_limits_start_at_their_container_size(cluster):
    conn = cluster.connection()
    conn.put_container("small")
    conn.put_container("big")
    for i in range(5):
        conn.put_object("big", f"o{i}", b"x")
    wait_for(lambda: int(conn.head_container("big")["x-container-object-count"]) == 5, 30,
             what="the big container's count")
    proxy = _limited(cluster, "rl-listing", container_listing_ratelimit_5="2")
    url = f"http://127.0.0.1:{proxy.port}"
    tok = _token(cluster)
    try:
        assert set(_burst(url, tok, "GET", [f"{A}/small"] * 10)) == {204}  # 0 objects
        statuses = _burst(url, tok, "GET", [f"{A}/big"] * 10)
        assert 1 <= statuses.count(200) <= 6 and statuses.count(498) >= 4, statuses
    finally:
        proxy.stop()


def test_two_proxies_share_the_limit_through_memcached(cluster):
    conn = cluster.connection()
    conn.put_container("shared")
    port, memcached = start_memcached()
    mc = {"memcache_servers": f"127.0.0.1:{port}"}
    proxies = []
    tok = _token(cluster)
    try:
        a = _limited(cluster, "rl-a", mc, container_ratelimit_0="4")
        proxies.append(a)
        b = _limited(cluster, "rl-b", mc, container_ratelimit_0="4")
        proxies.append(b)
        paths = [f"{A}/shared/o{i}" for i in range(20)]
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(
                lambda args: _burst(*args),
                [(f"http://127.0.0.1:{a.port}", tok, "PUT", paths[:10]),
                 (f"http://127.0.0.1:{b.port}", tok, "PUT", paths[10:])]))
        statuses = got[0] + got[1]
        # One limit for both: about 5 served in all (each alone would serve about 5).
        assert 2 <= statuses.count(201) <= 8, statuses
        assert got[0].count(498) and got[1].count(498), got
    finally:
        for p in proxies:
            p.stop()
        os.killpg(memcached.pid, signal.SIGTERM)
        memcached.wait(timeout=10)


def test_without_a_reachable_memcached_each_worker_limits_alone(cluster):
    conn = cluster.connection()
    conn.put_container("nomc")
    dead = {"memcache_servers": f"127.0.0.1:{free_port()}"}  # nothing listens there
    proxy = _limited(cluster, "rl-nomc", dead, container_ratelimit_0="4")
    url = f"http://127.0.0.1:{proxy.port}"
    try:
        statuses = _burst(url, _token(cluster), "PUT", [f"{A}/nomc/o{i}" for i in range(16)])
        assert 2 <= statuses.count(201) <= 9 and statuses.count(498) >= 7, statuses
    finally:
        proxy.stop()
