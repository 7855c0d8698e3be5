"""The container replicator daemon: the shared DB replicator (db.replicator) over container
DBs, which also reports each primary DB's totals to its account when they moved since the
last report.

The container server reports a DB's totals when it changes them (account_reporter), but
rows that reach a replica by replication, and shard counts a root replica missed, change
its totals with nobody to report them; and since each replica reports its own totals and
the newest report wins, the account could keep a stale replica's figures for good. Each
pass reports every primary DB whose totals differ from what it last reported, so the
account follows its containers within a pass once their replicas agree.
"""

from __future__ import annotations

from typing import Any

from swiftlite.common.config import Section
from swiftlite.container.account_reporter import AccountReporter, needs_report
from swiftlite.container.broker import ContainerBroker
from swiftlite.db import replicator


class ContainerReplicator(replicator.DBReplicator):
    async def after_sync(self, broker: Any, dev_path: str, info: dict[str, Any],
                         stats: dict[str, Any]) -> None:
        if not needs_report(info):  # a deleted container's lost report goes out too
            return
        if not info.get("account_nodes", {}).get("nodes"):
            return
        reporter = AccountReporter()
        reporter.session = self.session
        await reporter.report(broker, dev_path, info)
        stats["reported"] = stats.get("reported", 0) + 1


def run_daemon(conf: Section, once: bool = False) -> int:
    return replicator.run(conf, ContainerBroker, once, ContainerReplicator)
