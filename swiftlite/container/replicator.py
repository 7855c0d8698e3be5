"""The container replicator daemon: the shared DB replicator (db.replicator) over container DBs."""

from __future__ import annotations

from swiftlite.common.config import Section
from swiftlite.container.broker import ContainerBroker
from swiftlite.db import replicator


def run_daemon(conf: Section, once: bool = False) -> int:
    return replicator.run(conf, ContainerBroker, once)
