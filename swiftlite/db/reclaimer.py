"""Periodic tombstone reclaim for the DBs a server has open.

The DB replicator will also reclaim as it walks every DB on disk; this keeps hot DBs tidy in
between. Each pass is one thread hop per batch of brokers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from swiftlite.common.threadpool import run_blocking
from swiftlite.db.broker import DatabaseBroker, DatabaseNotFound

log = logging.getLogger("swiftlite.db.reclaimer")


def reclaim_all(brokers: Iterable[DatabaseBroker], reclaim_age: float) -> int:
    removed = 0
    for b in brokers:
        try:
            removed += b.reclaim(reclaim_age)
        except DatabaseNotFound:
            continue
        except Exception:
            log.exception("reclaim of %s failed", b.db_file)
    return removed


async def reclaim_loop(brokers: Callable[[], list[DatabaseBroker]], reclaim_age: float,
                       interval: float, batch: int = 64) -> None:
    while True:
        await asyncio.sleep(interval)
        todo = brokers()
        for i in range(0, len(todo), batch):
            await run_blocking(reclaim_all, todo[i:i + batch], reclaim_age)
