"""`workers`: a number, or auto for one per CPU (the proxy's and object server's default)."""

from __future__ import annotations

import os

from swiftlite.common.config import Section
from swiftlite.common.server import worker_count


def test_worker_count():
    cpus = os.cpu_count() or 1
    assert worker_count(Section(), "auto") == cpus
    assert worker_count(Section()) == 1
    assert worker_count(Section(workers="auto")) == cpus
    assert worker_count(Section(workers="3"), "auto") == 3
