"""A bounded cache of open brokers, so hot DBs keep their connection and group committer."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

B = TypeVar("B")

# Every cache of the process (a DB server has one, its replication endpoint another).
_caches: weakref.WeakSet[BrokerCache[Any]] = weakref.WeakSet()


def forget(db_file: str) -> None:
    """Drop and close the broker of `db_file` in every cache of the process (the file is
    about to move: a later request must open whatever is there then)."""
    for cache in list(_caches):
        broker = cache._brokers.pop(db_file, None)
        if broker is not None:
            broker.close()


class BrokerCache(Generic[B]):
    """LRU of brokers by DB path. An evicted broker still in use by a request stays valid
    (its connection closes when the last reference goes)."""

    def __init__(self, factory: Callable[[str], B], size: int = 1024) -> None:
        self._factory = factory
        self._size = max(1, size)
        self._brokers: OrderedDict[str, B] = OrderedDict()
        _caches.add(self)

    def get(self, db_file: str) -> B:
        broker = self._brokers.get(db_file)
        if broker is None:
            broker = self._factory(db_file)
            self._brokers[db_file] = broker
            if len(self._brokers) > self._size:
                self._brokers.popitem(last=False)
        else:
            self._brokers.move_to_end(db_file)
        return broker

    def values(self) -> list[B]:
        return list(self._brokers.values())

    def __len__(self) -> int:
        return len(self._brokers)
