"""Upload orders: by path, by partition, or by partition within each device, interleaved.

Writing a partition's objects together keeps a device's directory tree (and its suffix
digests) hot; interleaving devices keeps every disk busy at once instead of one at a time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from swiftlite.migrate.walker import Item

ORDERS = ("interleaved", "partition", "path")


def load_ring(ring_path: str, conf_path: str | None = None):
    """Load the object ring; the hash prefix/suffix come from --conf or swiftlite.conf beside it.

    Placement is only right with the cluster's own [hash] affixes, so say so when none is found.
    """
    from swiftlite.common.config import load_sections
    from swiftlite.ring import ring as ring_mod

    conf = conf_path or os.path.join(os.path.dirname(os.path.abspath(ring_path)),
                                     "swiftlite.conf")
    if os.path.exists(conf):
        load_sections(conf)
    else:
        print(f"warning: no {conf}: assuming empty hash prefix/suffix; partitions may be wrong",
              file=sys.stderr)
    return ring_mod.Ring(ring_path, reload_interval=1e9)


def place(items: Sequence[Item], ring, account: str, container: str) -> None:
    """Fill in each item's partition and the id of its replica-0 device."""
    for it in items:
        part, nodes = ring.get_nodes(account, container, it.name)
        it.part = part
        it.dev = nodes[0]["id"] if nodes else -1


def order_path(items: Sequence[Item]) -> list[Item]:
    return sorted(items, key=lambda it: it.name)


def order_partition(items: Sequence[Item]) -> list[Item]:
    return sorted(items, key=lambda it: (it.part, it.name))


def order_interleaved(items: Sequence[Item]) -> list[Item]:
    """Partition order within each device, round-robin across devices (one from each in turn)."""
    by_dev: dict[int, list[Item]] = {}
    for it in items:
        by_dev.setdefault(it.dev, []).append(it)
    queues = [sorted(by_dev[d], key=lambda it: (it.part, it.name)) for d in sorted(by_dev)]
    out: list[Item] = []
    depth = max((len(q) for q in queues), default=0)
    for i in range(depth):
        for q in queues:
            if i < len(q):
                out.append(q[i])
    return out


def order_items(items: Sequence[Item], order: str) -> list[Item]:
    if order == "path":
        return order_path(items)
    if order == "partition":
        return order_partition(items)
    if order == "interleaved":
        return order_interleaved(items)
    raise ValueError(f"unknown order {order!r}; expected one of {', '.join(ORDERS)}")
