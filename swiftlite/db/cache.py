"""A bounded cache of open brokers, so hot DBs keep their connection and group committer."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

B = TypeVar("B")


class BrokerCache(Generic[B]):
    """LRU of brokers by DB path. An evicted broker still in use by a request stays valid
    (its connection closes when the last reference goes)."""

    def __init__(self, factory: Callable[[str], B], size: int = 1024) -> None:
        self._factory = factory
        self._size = max(1, size)
        self._brokers: OrderedDict[str, B] = OrderedDict()

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
