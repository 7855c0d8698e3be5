"""The asyncio memcached client against a real memcached, and its failing open."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import pytest

from swiftlite.common.clients.memcache import (
    MAX_KEYS_PER_GETS,
    MemcacheClient,
    check_key,
    parse_servers,
)
from tests.helpers import start_memcached


@pytest.fixture
def memcached():
    port, proc = start_memcached()
    yield port, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_parse_servers_and_keys():
    assert parse_servers("10.0.0.1:11211, [::1]:2000,\nhost") == \
        [("10.0.0.1", 11211), ("::1", 2000), ("host", 11211)]
    assert parse_servers("") == []
    for bad in ("", "a b", "x" * 251, "a\nb"):
        with pytest.raises(ValueError):
            check_key(bad)


def test_commands_against_real_memcached(memcached):
    port, _ = memcached

    async def main() -> None:
        # Generous timeouts: a loaded CI machine must not turn a slow answer into a miss.
        mc = MemcacheClient([("127.0.0.1", port)], connect_timeout=5, io_timeout=5)
        assert await mc.gets("k") is None
        assert await mc.add("k", b"one", 10)
        assert not await mc.add("k", b"two", 10)  # present: add refuses
        value, unique = await mc.gets("k")
        assert value == b"one"
        assert await mc.set("k", b"three", 10)
        assert not await mc.cas("k", b"four", unique, 10)  # changed since gets
        value, unique = await mc.gets("k")
        assert value == b"three"
        assert await mc.cas("k", b"four", unique, 10)
        assert await mc.get("k") == b"four"
        # lookup tells a miss from a failure: here, a hit and a miss.
        assert await mc.lookup("k") == (True, b"four")
        assert await mc.lookup("never-set") == (True, None)
        big = os.urandom(200_000) + b"\r\nEND\r\n"  # binary, with protocol-looking bytes
        assert await mc.set("big", big, 10)
        assert await mc.get("big") == big
        assert await mc.delete("k") and await mc.delete("k")  # absent counts as gone
        assert await mc.gets("k") is None
        assert not await mc.cas("k", b"x", unique, 10)  # NOT_FOUND
        # Concurrent commands share a bounded pool of connections.
        results = await asyncio.gather(*(mc.set(f"c{i}", b"%d" % i, 10) for i in range(100)))
        assert all(results)
        got = await asyncio.gather(*(mc.get(f"c{i}") for i in range(100)))
        assert got == [b"%d" % i for i in range(100)]
        assert 1 <= len(mc.servers[0].idle) <= mc.servers[0].max_idle
        await mc.close()

    asyncio.run(main())


def _stat(port: int, name: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += s.recv(65536)
    for line in data.decode().splitlines():
        if line.startswith(f"STAT {name} "):
            return int(line.split()[2])
    raise KeyError(name)


def test_lookups_of_one_loop_pass_share_a_round_trip(memcached):
    """Forty lookups asked for at once (twenty keys, some twice, some absent, one value
    bigger than a socket read) get their own answers from `gets` commands of many keys
    each; a waiter cancelled meanwhile costs the others nothing."""
    port, _ = memcached

    async def main() -> None:
        mc = MemcacheClient([("127.0.0.1", port)], connect_timeout=5, io_timeout=5)
        big = os.urandom(300_000) + b"\r\nVALUE x 0 1 1\r\n"
        values = {f"b{i}": (big if i == 7 else b"v%d" % i) for i in range(0, 20, 2)}
        for k, v in values.items():
            assert await mc.set(k, v, 10)
        await mc.close()  # the next command needs a new connection: counted below
        conns, cmds = _stat(port, "total_connections"), _stat(port, "cmd_get")
        keys = [f"b{i % 20}" for i in range(40)]
        tasks = [asyncio.ensure_future(mc.gets(k)) for k in keys]
        doomed = asyncio.ensure_future(mc.gets("b2"))
        await asyncio.sleep(0)  # every lookup is waiting for its answer
        doomed.cancel()
        got = await asyncio.gather(*tasks)
        assert [g[0] if g else None for g in got] == [values.get(k) for k in keys]
        assert len({g[1] for g in got if g}) == len(values)  # each key's own cas unique
        # Twenty keys make two commands (at most MAX_KEYS_PER_GETS each), sent at once on
        # one pipelined connection, plus the two stats connections since `conns`; each
        # distinct key is asked for once.
        assert -(-20 // MAX_KEYS_PER_GETS) == 2
        assert _stat(port, "total_connections") - conns == 1 + 2
        assert _stat(port, "cmd_get") - cmds == 20
        assert doomed.cancelled()
        assert (await mc.gets("b2"))[0] == b"v2"
        await mc.close()

    asyncio.run(main())


def test_batches_of_successive_loop_passes_are_pipelined_on_one_connection(memcached):
    """Lookups asked for in five loop passes, none waiting for an earlier answer, go out as
    five commands on one connection, and each hears its own key's value."""
    port, _ = memcached

    async def main() -> None:
        mc = MemcacheClient([("127.0.0.1", port)], connect_timeout=5, io_timeout=5)
        for i in range(5):
            assert await mc.set(f"p{i}", b"value %d" % i, 10)
        conns, cmds = _stat(port, "total_connections"), _stat(port, "cmd_get")
        tasks = []
        for i in range(5):
            tasks += [asyncio.ensure_future(mc.gets(f"p{i}")),
                      asyncio.ensure_future(mc.gets("absent"))]
            await asyncio.sleep(0)  # the next lookups make a batch of their own
        got = await asyncio.gather(*tasks)
        assert [g[0] if g else None for g in got] == \
            [v for i in range(5) for v in (b"value %d" % i, None)]
        assert _stat(port, "total_connections") - conns == 1 + 2  # + the two stats calls
        assert _stat(port, "cmd_get") - cmds == 10
        await mc.close()

    asyncio.run(main())


def test_a_lookup_connection_answering_nonsense_fails_open(memcached):
    """A server that answers a lookup with bytes that are no answer: a miss, the connection
    dropped, the server skipped for retry_interval; then lookups work again."""
    port, _ = memcached
    fake = socket.socket()
    fake.bind(("127.0.0.1", 0))
    fake.listen(4)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        mc = MemcacheClient([("127.0.0.1", fake.getsockname()[1])], connect_timeout=5,
                            io_timeout=5, retry_interval=0.2)
        lookup = asyncio.ensure_future(mc.gets("k"))
        fake.setblocking(False)
        conn, _ = await loop.sock_accept(fake)
        assert (await loop.sock_recv(conn, 100)).startswith(b"gets k")
        await loop.sock_sendall(conn, b"VALUE k 0 nonsense\r\n")
        assert await lookup is None
        assert await loop.sock_recv(conn, 100) == b""  # dropped by the client
        assert await mc.gets("k") is None  # skipped: no new connection is tried
        conn.close()
        # A working server behind the same client after the retry interval.
        mc.servers[0].port = port
        assert await mc.set("k", b"v", 10)
        deadline = time.monotonic() + 10
        while (hit := await mc.gets("k")) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert hit is not None and hit[0] == b"v"
        await mc.close()

    asyncio.run(main())
    fake.close()


def test_fails_open_when_down_refused_or_silent(memcached):
    port, proc = memcached

    async def main() -> None:
        mc = MemcacheClient([("127.0.0.1", port)], connect_timeout=2, io_timeout=2,
                            retry_interval=0.5)
        assert await mc.set("k", b"v", 10)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # The pooled connection is dead, then connecting is refused: misses, not errors.
        assert await mc.gets("k") is None
        assert await mc.get("k") is None
        assert await mc.lookup("k") == (False, None)  # a failure, not a miss
        assert not await mc.set("k", b"v", 10)
        assert not await mc.delete("k")
        # A server that accepts but never answers costs one io_timeout, then reads skip it.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        # (A 1 s io_timeout keeps "waited" and "did not wait" apart on a loaded machine.)
        mc2 = MemcacheClient([("127.0.0.1", silent.getsockname()[1])], connect_timeout=1,
                             io_timeout=1, retry_interval=30)
        t0 = time.monotonic()
        assert await mc2.gets("k") is None
        assert time.monotonic() - t0 >= 0.95
        t0 = time.monotonic()
        assert await mc2.gets("k") is None
        assert not await mc2.add("k", b"v", 10)  # a fill is skipped too
        assert time.monotonic() - t0 < 0.5  # marked down: no second wait
        # Writes still try (an invalidation skipped could leave another host stale).
        t0 = time.monotonic()
        assert not await mc2.delete("k")
        assert time.monotonic() - t0 >= 0.95
        silent.close()
        await mc.close()
        await mc2.close()

    asyncio.run(main())


def test_keys_spread_over_servers_and_stay_put():
    mc = MemcacheClient([("10.0.0.1", 11211), ("10.0.0.2", 11211), ("10.0.0.3", 11211)])
    keys = [f"key{i}".encode() for i in range(3000)]
    placed = {k: mc.server_for(k) for k in keys}
    counts = [sum(1 for s in placed.values() if s is srv) for srv in mc.servers]
    assert all(800 < c < 1200 for c in counts)
    # Removing a server moves only its own keys.
    fewer = MemcacheClient([("10.0.0.1", 11211), ("10.0.0.2", 11211)])
    for k, srv in placed.items():
        if srv.host != "10.0.0.3":
            assert fewer.server_for(k).host == srv.host
