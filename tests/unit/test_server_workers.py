"""`workers`: a number, or auto for one per CPU (the proxy's and object server's default);
`max_clients`: its defaults, and its bound by the open-files limit."""

from __future__ import annotations

import os
import resource

from swiftlite.common.config import Section
from swiftlite.common.runtime.server import max_clients, worker_count


def test_worker_count():
    cpus = os.cpu_count() or 1
    assert worker_count(Section(), "auto") == cpus
    assert worker_count(Section()) == 1
    assert worker_count(Section(workers="auto")) == cpus
    assert worker_count(Section(workers="3"), "auto") == 3



def test_max_clients_defaults_and_leaves_descriptors_for_the_server():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    roomy = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (roomy, hard))
        assert max_clients(Section(), "proxy-server") == min(1024, roomy // 4)
        assert max_clients(Section(), "object-server") == min(8192, roomy // 4)
        assert max_clients(Section(max_clients="0"), "proxy-server") == 0  # no cap
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, hard))
        # A quarter of the descriptors at most: the rest are the server's own.
        assert max_clients(Section(max_clients="5000"), "proxy-server") == 100
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
