"""The proxy pipeline: `pipeline =` decides which features run and what /info advertises.

A second proxy shares the rings and storage of a cluster, as another proxy host would, with
only auth in its pipeline: the features left out are neither advertised nor applied, and
the core still serves accounts, containers and objects on its own.
"""

from __future__ import annotations

import http.client
import json
import secrets
import urllib.parse
import uuid
from types import SimpleNamespace

import pytest
import swiftclient

from swiftlite.common.config import Section
from swiftlite.proxy import stack
from tests.cluster import start_cluster
from tests.helpers import start_proxy_variant, wait_for

MINIMAL = "catch_errors gatekeeper tempauth proxy-server"


def call(base: str, method: str, path: str, headers: dict | None = None, body: bytes = b""):
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


@pytest.fixture(scope="module")
def proxies(tmp_path_factory):
    """(full proxy URL, minimal-pipeline proxy URL, cluster)."""
    c = start_cluster(str(tmp_path_factory.mktemp("pipeline")), devices=3, part_power=4)
    wait_for(lambda: call(c.proxy_url, "GET", "/healthcheck")[0] == 200, 30, what="proxy")
    minimal = start_proxy_variant(c, "minimal", {"pipeline": MINIMAL})
    yield c.proxy_url, f"http://127.0.0.1:{minimal.port}", c
    minimal.stop()
    c.stop()


def token(base: str) -> tuple[str, str]:
    url, tok = swiftclient.get_auth(base + "/auth/v1.0", "test:tester", "testing")
    return urllib.parse.urlsplit(url).path, tok


def test_info_advertises_only_the_features_in_the_pipeline(proxies):
    full, minimal, _ = proxies
    info_full = json.loads(call(full, "GET", "/info")[2])
    info_min = json.loads(call(minimal, "GET", "/info")[2])
    for feature in ("tempauth", "container_quotas", "account_quotas", "ratelimit"):
        assert feature in info_full
    assert "tempauth" in info_min
    for feature in ("container_quotas", "account_quotas", "ratelimit"):
        assert feature not in info_min
    assert "dlo" not in info_full  # as Swift: DLO runs (test below) but says nothing
    assert info_min["swift"]["max_file_size"] == info_full["swift"]["max_file_size"]


def test_features_left_out_do_not_run(proxies):
    full, minimal, _ = proxies
    base, tok = token(full)
    t = {"X-Auth-Token": tok}
    c = "p" + uuid.uuid4().hex[:8]
    assert call(full, "PUT", f"{base}/{c}", t)[0] == 201
    assert call(full, "PUT", f"{base}/{c}/seg/1", t, b"one")[0] == 201
    assert call(full, "PUT", f"{base}/{c}/seg/2", t, b"two")[0] == 201
    assert call(full, "PUT", f"{base}/{c}/man", {**t, "X-Object-Manifest": f"{c}/seg/"})[0] \
        == 201
    # With dlo the manifest is its segments; without, the core serves its own 0 bytes.
    assert call(full, "GET", f"{base}/{c}/man", t)[2] == b"onetwo"
    assert call(minimal, "GET", f"{base}/{c}/man", t)[2] == b""
    # Without copy a COPY is no method the core knows.
    assert call(minimal, "COPY", f"{base}/{c}/seg/1", {**t, "Destination": f"{c}/x"})[0] \
        == 405
    assert call(full, "COPY", f"{base}/{c}/seg/1", {**t, "Destination": f"{c}/x"})[0] == 201
    # Without cors an OPTIONS preflight is no method the core knows either.
    pre = {"Origin": "http://a.example", "Access-Control-Request-Method": "GET"}
    assert call(minimal, "OPTIONS", f"{base}/{c}/seg/1", pre)[0] == 405
    # The core and auth alone still serve and protect the data.
    assert call(minimal, "GET", f"{base}/{c}/seg/2", t)[2] == b"two"
    assert call(minimal, "GET", f"{base}/{c}/seg/2")[0] == 401


def test_build_orders_features_and_refuses_unknown_names():
    proxy = SimpleNamespace(auth=None)

    async def core(request):
        return None

    conf = Section({"pipeline": "catch_errors cors tempauth proxy-server",
                    "auth_secret": "k" + secrets.token_urlsafe(32)})  # required since issue 16
    handler, built = stack.build(proxy, conf, core)
    assert [m.name for m in built] == ["catch_errors", "cors", "tempauth"]
    # Plain reads take the short cut (swiftlite/proxy/plain_reads.py), the rest the chain.
    # The chain reaches the core through the short cut's replay (plain_reads.replaying); the
    # short cut, which reads before anything is primed, the core itself.
    assert handler.full is built[0] and built[-1].app.__wrapped__ is core
    assert handler.core is core
    conf["plain_read_shortcut"] = "false"
    assert stack.build(proxy, conf, core)[0].name == "catch_errors"
    assert proxy.auth is not None  # tempauth shares its token issuer
    for bad in ("catch_errors nosuch proxy-server", "tempauth", "cors cors proxy-server"):
        with pytest.raises(ValueError):
            stack.build(proxy, Section({"pipeline": bad}), core)
