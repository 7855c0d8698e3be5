"""Small stored variants kept in a proxy worker's memory, least recently used evicted first.

Always coherent without any invalidation: a variant's key names the original's ETag (read by
the HEAD every variant request makes first, which also judges the caller) and the canonical
variant, and the bytes made for one key never change. An overwritten original's old keys are
simply never asked for again and age out. What it saves is the second backend read of a
stored variant: half the cost of serving one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class VariantMemo:
    def __init__(self, budget: int, max_item: int) -> None:
        self.budget = budget
        self.max_item = max_item
        self.used = 0
        self._items: OrderedDict[Hashable, tuple[dict[str, str], bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> tuple[dict[str, str], bytes] | None:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def fits(self, size: int) -> bool:
        return 0 < size <= self.max_item and size <= self.budget

    def put(self, key: Hashable, headers: dict[str, str], body: bytes) -> None:
        if not self.fits(len(body)) or key in self._items:
            return
        self._items[key] = (headers, body)
        self.used += len(body)
        while self.used > self.budget:
            _, (_, old) = self._items.popitem(last=False)
            self.used -= len(old)
