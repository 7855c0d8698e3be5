"""The account replicator daemon: the shared DB replicator (db.replicator) over account DBs."""

from __future__ import annotations

from swiftlite.account.broker import AccountBroker
from swiftlite.common.config import Section
from swiftlite.db import replicator


def run_daemon(conf: Section, once: bool = False) -> int:
    return replicator.run(conf, AccountBroker, once)
