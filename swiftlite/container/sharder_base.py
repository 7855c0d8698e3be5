"""What every phase of the container sharder shares: its settings, its client, the progress
pushes, and the test hooks that kill it at a chosen point.

The sharder (``sharder``) is one daemon whose work falls into phases, each a module of its
own: ``cleaving`` grows a container into shards, ``shrinking`` brings shards back together
(merging, collapsing, retiring a split shard). Both are mixins of ``Sharder`` built on
``SharderBase``, which holds what they both use, so neither phase imports the other.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import aiohttp

from swiftlite.common.config import Section
from swiftlite.common.devices import meta_devices
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.container.broker import ContainerBroker
from swiftlite.container.shard_client import ShardClient
from swiftlite.container.shard_ranges import ShardRange, State
from swiftlite.ring import Ring

log = logging.getLogger("swiftlite.container-sharder")
# Test hook: exit abruptly (as kill -9 would) after this many cleave batches in a process.
EXIT_AFTER_ENV = "SWIFTLITE_SHARDER_EXIT_AFTER"
# Test hook: exit abruptly at a named point ("shard-switched": a shard that split has
# switched to sharded and told its replicas, not yet its root; "split-retiring": a split
# shard told SHRUNK, not yet pulled or deleted; the MERGE_POINTS, in order,
# the steps of merging a small shard into its neighbour).
EXIT_AT_ENV = "SWIFTLITE_SHARDER_EXIT_AT"
MERGE_POINTS = ("merge-marked", "merge-copying", "merge-copied", "merge-acceptor-grown",
                "merge-switched", "merge-donor-told")


class SharderBase:
    """The settings (from the `[container-sharder]` section) and the steps every phase uses."""

    def __init__(self, conf: Section) -> None:
        self.conf = conf
        self.devices = meta_devices(conf)  # container DBs live on the meta devices, if named
        self.threshold = max(2, conf.get_int("shard_container_threshold", 1_000_000))
        self.rows_per_shard = max(1, conf.get_int("rows_per_shard", self.threshold // 2))
        self.shrink_threshold = conf.get_int("shrink_threshold", self.threshold // 10)
        self.batch = max(1, conf.get_int("cleave_batch_size", 10_000))
        self.shrunk_grace = conf.get_float("shrunk_grace", 300.0)
        # Merges under way at once per root (disjoint pairs of neighbours).
        self.max_merges = max(1, conf.get_int("max_merges", 4))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 10.0)
        self.ring = Ring.from_conf(conf, "container")
        self.session: aiohttp.ClientSession | None = None
        exit_after = os.environ.get(EXIT_AFTER_ENV, "")
        self.exit_after = int(exit_after) if exit_after.isdigit() else 0
        self.batches_sent = 0

    @property
    def client(self) -> ShardClient:
        assert self.session is not None
        return ShardClient(self.ring, self.session)

    def _grace_over(self, since: str) -> bool:
        """Whether `shrunk_grace` seconds have passed since the timestamp `since`."""
        return time.time() - float(Timestamp.parse(since)) > self.shrunk_grace

    @staticmethod
    def _exit_at(point: str) -> None:
        if os.environ.get(EXIT_AT_ENV) == point:
            log.warning("%s=%s: exiting abruptly", EXIT_AT_ENV, point)
            os._exit(9)

    def _count_batch(self) -> None:
        self.batches_sent += 1
        if self.exit_after and self.batches_sent >= self.exit_after:
            log.warning("%s=%d: exiting abruptly", EXIT_AFTER_ENV, self.exit_after)
            os._exit(9)

    async def _push_root(self, broker: ContainerBroker, info: dict[str, Any],
                         own: ShardRange) -> None:
        """Every range of the DB (and its own row) to every replica of the DB."""
        own_now, all_ranges = await run_blocking(broker.get_ranges)
        if not await self.client.push_ranges(info["account"], info["container"],
                                             [own_now or own, *all_ranges]):
            log.warning("%s: shard ranges reached fewer than a quorum of its replicas "
                        "(replication or the next pass brings them)", own.name)


def own_name(info: dict[str, Any]) -> str:
    return f"{info['account']}/{info['container']}"


def with_state(r: ShardRange, state: State, ts: str | None = None) -> ShardRange:
    return ShardRange(**{**r.to_dict(), "state": int(state),
                         "state_timestamp": ts or Timestamp.now().internal})
