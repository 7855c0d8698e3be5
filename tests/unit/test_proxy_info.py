"""InfoCache: coherence between forked processes (the stamp table), and with memcached."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from swiftlite.common.clients.memcache import MemcacheClient
from swiftlite.proxy.caches.info import (
    AccountInfo,
    ContainerInfo,
    InfoCache,
    StampTable,
    SyncedInfo,
    container_digest,
    digest,
)
from tests.unit.test_memcache import start_memcached


def run_child(fn) -> None:
    """Run `fn` in a forked child (as a sibling worker would) and require it to succeed."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_drop_in_another_process_is_seen_at_once():
    table = StampTable(1024)
    cache = InfoCache(3600, "container", table=table)

    async def main() -> None:
        key = ("AUTH_a", "c")
        value, fill = await cache.lookup(key)
        assert value is None
        await cache.put(key, ContainerInfo(200, read_acl=".r:*"), fill)
        assert (await cache.lookup(key))[0].read_acl == ".r:*"
        # A sibling worker (forked, sharing the table) writes the container.
        run_child(lambda: asyncio.run(cache.drop(key)))
        assert (await cache.lookup(key))[0] is None
        # A fetch that began before a write elsewhere is never kept, even if put after it.
        _, fill = await cache.lookup(key)
        run_child(lambda: asyncio.run(cache.drop(key)))
        await cache.put(key, ContainerInfo(200), fill)
        assert (await cache.lookup(key))[0] is None
        # One that began after the write is.
        _, fill = await cache.lookup(key)
        await cache.put(key, ContainerInfo(200), fill)
        assert (await cache.lookup(key))[0] == ContainerInfo(200)
        # Other keys are untouched by a drop (unless they share a slot).
        other = ("AUTH_a", "other")
        _, fill = await cache.lookup(other)
        await cache.put(other, ContainerInfo(204), fill)
        run_child(lambda: asyncio.run(cache.drop(key)))
        slot_shared = (cache._slot_hash(key) & table.mask) == \
            (cache._slot_hash(other) & table.mask)
        assert ((await cache.lookup(other))[0] is None) == slot_shared

    asyncio.run(main())


def test_entries_expire_and_a_put_without_lookup_is_ignored():
    cache = InfoCache(0.05, "account", table=StampTable(64))

    async def main() -> None:
        _, fill = await cache.lookup(("a",))
        await cache.put(("a",), True, fill)
        assert (await cache.lookup(("a",)))[0] is True
        await cache.put(("b",), True, None)
        assert (await cache.lookup(("b",)))[0] is None
        # The entry lapses ttl after its fetch began.
        deadline = time.monotonic() + 5
        while (await cache.lookup(("a",)))[0] is not None:
            assert time.monotonic() < deadline, "entry never expired"
            await asyncio.sleep(0.01)
        assert time.monotonic_ns() >= fill.since + 50_000_000

    asyncio.run(main())


def test_memcached_shared_between_caches_of_two_hosts():
    port, proc = start_memcached()
    try:
        async def main() -> None:
            mc_a = MemcacheClient([("127.0.0.1", port)])
            mc_b = MemcacheClient([("127.0.0.1", port)])
            # Two hosts: separate tables, separate clients, one memcached.
            a = InfoCache(60, "account", mc_a, table=StampTable(64))
            b = InfoCache(60, "account", mc_b, table=StampTable(64))
            key = ("info", "AUTH_x")
            _, fill = await a.lookup(key)
            await a.put(key, AccountInfo(204, 1, 2, 3, {"X-Account-Meta-K": "v"}), fill)
            got, _ = await b.lookup(key)
            assert got == AccountInfo(204, 1, 2, 3, {"X-Account-Meta-K": "v"})
            await b.drop(key)
            assert (await a.lookup(key))[0] is None
            # A fetch that began before B's write cannot store over B's tombstone ...
            _, stale_fill = await a.lookup(key)
            await b.drop(key)
            await a.put(key, AccountInfo(204, 9), stale_fill)
            assert (await b.lookup(key))[0] is None
            # ... nor when the key was absent when it began.
            await mc_a.delete(a._mc_key(key))
            _, stale_fill = await a.lookup(key)
            await b.drop(key)
            await a.put(key, AccountInfo(204, 9), stale_fill)
            assert (await b.lookup(key))[0] is None
            # A fetch after the write fills it for everyone.
            _, fill = await b.lookup(key)
            await b.put(key, AccountInfo(204, 7), fill)
            assert (await a.lookup(key))[0] == AccountInfo(204, 7)
            await mc_a.close()
            await mc_b.close()

        asyncio.run(main())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class _Log:
    """What SyncedInfo asks of a write log: is it in sync, and since when are entries good."""

    def __init__(self) -> None:
        self.synced = True
        self.valid_after = 0

    def in_sync(self) -> bool:
        return self.synced


def test_synced_facts_live_until_their_container_is_written_or_the_log_lags():
    table, log = StampTable(1024), _Log()
    facts = SyncedInfo(3600, log, table)
    info = ContainerInfo(200)

    def kept(acct: str = "AUTH_a", cont: str = "c") -> ContainerInfo | None:
        facts.keep(acct, cont, info, time.monotonic_ns())
        return facts.get(acct, cont)

    assert kept() is info
    # A write of the container by a sibling worker (or another host, through the log).
    run_child(lambda: table.stamp(container_digest("AUTH_a", "c")))
    assert facts.get("AUTH_a", "c") is None
    # A read that began before such a write is never kept.
    since = time.monotonic_ns()
    table.stamp(container_digest("AUTH_a", "c"))
    facts.keep("AUTH_a", "c", info, since)
    assert facts.get("AUTH_a", "c") is None
    # An object's write is not its container's (unless the two share a slot).
    assert kept() is info
    obj = digest("AUTH_a", "c", "o")
    table.stamp(obj)
    shared = (obj & table.mask) == (container_digest("AUTH_a", "c") & table.mask)
    assert (facts.get("AUTH_a", "c") is None) == shared
    assert kept() is info
    # A worker out of sync with the log trusts nothing it kept, and keeps nothing.
    log.synced = False
    assert facts.get("AUTH_a", "c") is None
    assert kept() is None
    log.synced = True
    # Entries from before the log caught up again after a lag are void.
    assert kept() is info
    log.valid_after = time.monotonic_ns()
    assert facts.get("AUTH_a", "c") is None
    # No entry outlives the ttl: one read a minute ago is gone, one read now is kept.
    short = SyncedInfo(30, _Log(), table)
    short.keep("AUTH_a", "d", info, time.monotonic_ns() - 60 * 10**9)
    assert short.get("AUTH_a", "d") is None
    short.keep("AUTH_a", "d", info, time.monotonic_ns())
    assert short.get("AUTH_a", "d") is info
