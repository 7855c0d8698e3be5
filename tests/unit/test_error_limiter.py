"""The proxy's error limiter: only faults of a node count, never answers a request provoked."""

from __future__ import annotations

import asyncio

from swiftlite.proxy.backend.nodes import ErrorLimiter, Verdicts, logical_path, verdicts

A = {"ip": "10.0.0.1", "port": 6200, "device": "d1"}
B = {"ip": "10.0.0.2", "port": 6200, "device": "d1"}
C = {"ip": "10.0.0.3", "port": 6200, "device": "d1"}


def test_plain_errors_limit_a_node():
    lim = ErrorLimiter(limit=3, interval=60)
    for _ in range(3):
        assert not lim.limited(A)
        lim.error(A, "timeout")
    assert lim.limited(A) and not lim.limited(B)


def test_one_fingerprint_counts_once():
    lim = ErrorLimiter(limit=3, interval=60)
    for _ in range(50):
        lim.error(A, "500", ("GET", "/a/c/o"))
    assert not lim.limited(A)
    for i in range(2):
        lim.error(A, "500", ("GET", f"/a/c/o{i}"))
    assert lim.limited(A)


def test_fatal_limits_at_once():
    lim = ErrorLimiter(limit=10, interval=60)
    lim.fatal(A, "507")
    assert lim.limited(A)


def test_every_replica_failing_one_request_counts_nothing():
    """A request all replicas answer 5xx (and handoffs 404) is the request's fault."""
    lim = ErrorLimiter(limit=2, interval=60)
    for i in range(20):
        v = Verdicts(lim)
        for node in (A, B, C):
            v.suspect(node, "GET", f"/a/c/o{i}", "500")
    assert not any(lim.limited(n) for n in (A, B, C))


def test_a_node_failing_what_others_serve_is_counted():
    lim = ErrorLimiter(limit=2, interval=60)
    for i in range(2):
        v = Verdicts(lim)
        v.suspect(A, "GET", f"/a/c/o{i}", "500")  # held...
        assert not lim.limited(A)
        v.served("GET", f"/a/c/o{i}")  # ...until B serves the same request
    assert lim.limited(A) and not lim.limited(B)


def test_served_first_then_failure_counts_at_once():
    lim = ErrorLimiter(limit=1, interval=60)
    v = Verdicts(lim)
    v.served("PUT", "/a/c/o")
    v.suspect(A, "PUT", "/a/c/o", "500")
    assert lim.limited(A)


def test_another_path_in_the_same_request_vindicates_nothing():
    """A copy's source GET failing everywhere is not excused... nor blamed by the PUT."""
    lim = ErrorLimiter(limit=1, interval=60)
    v = Verdicts(lim)
    v.suspect(A, "GET", "/a/c/src", "500")
    v.served("PUT", "/a/c/dst")
    v.served("GET", "/a/c/other")
    assert not lim.limited(A)


def test_verdicts_are_per_task_and_shared_by_children():
    lim = ErrorLimiter(limit=1, interval=60)

    async def request(fail_everywhere: bool) -> Verdicts:
        mine = verdicts(lim)

        async def replica(node):
            judge = verdicts(lim)
            assert judge is mine  # set before the gather: one per client request
            judge.suspect(node, "GET", "/a/c/o", "500")

        await asyncio.gather(replica(A), replica(B))
        if not fail_everywhere:
            verdicts(lim).served("GET", "/a/c/o")
        return mine

    async def main():
        first = await asyncio.create_task(request(True))
        assert not lim.limited(A)
        second = await asyncio.create_task(request(False))
        assert first is not second
        assert lim.limited(A) and lim.limited(B)

    asyncio.run(main())


def test_logical_path():
    assert logical_path("/d1/12/AUTH_a/c/o/x") == "/AUTH_a/c/o/x"
    assert logical_path("/d1/12/AUTH_a") == "/AUTH_a"


def test_network_faults_limit_every_device_of_the_server():
    lim = ErrorLimiter(limit=2, interval=60)
    a2 = {**A, "device": "d2"}
    other_port = {**A, "port": 6201}
    lim.error(A, "timeout", ("PUT", "/a/c/o1"), server=True)
    lim.error(a2, "timeout", ("PUT", "/a/c/o2"), server=True)
    # Two faults on two disks of one hung server: the server is out, all its devices.
    assert lim.limited(A) and lim.limited(a2) and lim.limited({**A, "device": "d9"})
    assert not lim.limited(other_port) and not lim.limited(B)


def test_device_faults_stay_on_the_device():
    lim = ErrorLimiter(limit=1, interval=60)
    lim.fatal(A, "507 Insufficient Storage")
    assert lim.limited(A) and not lim.limited({**A, "device": "d2"})


def test_a_network_suspicion_counts_against_the_server_once_served():
    lim = ErrorLimiter(limit=1, interval=60)
    v = Verdicts(lim)
    v.suspect(A, "GET", "/a/c/o", "read timeout", server=True)
    assert not lim.limited(A)
    v.served("GET", "/a/c/o")
    assert lim.limited({**A, "device": "d2"})
