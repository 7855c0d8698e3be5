"""The proxy's core implements the interfaces written for what is built on it
(swiftlite/proxy/core_api.py): `ProxyCore` for the features, `ProxyInterior` for the core's
own controllers. A Protocol is not checked at run time, so this test checks that every name
either declares is on a real `Proxy`."""

from __future__ import annotations

import secrets
from pathlib import Path

from ringbuilder.builder import RingBuilder
from swiftlite.common.config import Section
from swiftlite.proxy.core_api import ProxyCore, ProxyInterior
from swiftlite.proxy.server import Proxy
from swiftlite.ring import write_ring


def _declared(protocol: type) -> set[str]:
    names = set()
    for klass in protocol.__mro__:
        if klass is object or klass.__name__ == "Protocol" or klass.__module__ == "typing":
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        names |= {n for n, v in vars(klass).items() if callable(v) and not n.startswith("_")}
    return names


def test_the_proxy_has_everything_its_interfaces_declare(tmp_path: Path):
    for name in ("object", "container", "account"):
        b = RingBuilder(4, 3, 0)
        for d in range(3):
            b.add_dev({"region": 1, "zone": d + 1, "ip": "127.0.0.1", "port": 6200 + d,
                       "device": f"sd{d}", "weight": 100.0})
        b.rebalance(seed=1)
        write_ring(str(tmp_path / f"{name}.ring.gz"), b.get_ring_data())
    conf = Section({"swift_dir": str(tmp_path), "auth_secret": secrets.token_hex(32),
                    "backend_secret": secrets.token_hex(32),
                    "user_test_tester": "testing .admin"})
    proxy = Proxy(conf)
    interior = _declared(ProxyInterior)
    assert _declared(ProxyCore) < interior
    assert {"backend", "object_ring_for", "ec_scheme", "container_ring"} <= interior
    missing = sorted(n for n in interior if not hasattr(proxy, n))
    assert missing == []
