"""The hot-object cache's admission: once full, only an object that missed lately joins."""

from __future__ import annotations

from multidict import CIMultiDict

from swiftlite.proxy.caches.info import StampTable
from swiftlite.proxy.caches.object_cache import ObjectCache

SIZE = 100


def fill(cache: ObjectCache, name: str) -> bool:
    """A GET of `name` through the cache: True when it was a hit; a miss fills."""
    key = ("AUTH_a", "c", name)
    entry, since = cache.lookup(key)
    if entry is not None:
        assert entry.body == name.encode().ljust(SIZE, b".")
        return True
    cache.put(key, CIMultiDict({"Content-Length": str(SIZE)}), name.encode().ljust(SIZE, b"."),
              since)
    return False


def test_everything_joins_until_full_then_only_a_second_miss():
    cache = ObjectCache(budget=10 * SIZE, max_object=SIZE, ttl=300, table=StampTable(64))
    for i in range(10):
        assert not fill(cache, f"hot{i}")
    assert all(fill(cache, f"hot{i}") for i in range(10))  # room for all ten
    assert cache.used == 10 * SIZE
    # Full: one read of a new object does not push out any of them...
    assert not fill(cache, "tail")
    assert all(fill(cache, f"hot{i}") for i in range(10))
    # ...its second miss does, and the least recently used goes.
    assert not fill(cache, "tail")
    assert fill(cache, "tail")
    assert cache.used == 10 * SIZE
    assert not fill(cache, "hot0")  # evicted (and, full, not admitted on this miss)
    assert all(fill(cache, f"hot{i}") for i in range(1, 10))


def test_the_memory_of_misses_is_bounded():
    cache = ObjectCache(budget=40 * SIZE, max_object=SIZE, ttl=300, table=StampTable(64))
    for i in range(40):
        fill(cache, f"hot{i}")
    for i in range(1000):  # a scan of the tail, each object read once
        assert not fill(cache, f"tail{i}")
    # At most two generations of max(16, 40 // 2) misses are remembered.
    assert len(cache._missed) + len(cache._missed_before) <= 2 * 20
    assert all(fill(cache, f"hot{i}") for i in range(40))  # the scan pushed nothing out
    assert not fill(cache, "tail999") and fill(cache, "tail999")  # remembered: joins
    assert not fill(cache, "tail0")  # forgotten long ago: this miss is its first again
    assert not fill(cache, "tail0")  # (and it is let in only now, on its second)
    assert fill(cache, "tail0")
