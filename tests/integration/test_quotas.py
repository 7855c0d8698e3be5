"""Container and account quotas through a real `swiftlite up` proxy."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers import wait_for
from tests.integration.test_proxy_api import raw, storage_path, token_and_url

EXCEEDED = b"Upload exceeds quota."


@pytest.fixture(scope="module")
def owner(cluster):
    url, token = token_and_url(cluster)
    return storage_path(url), token


def new_container(cluster, base: str, token: str, **headers: str) -> str:
    path = f"{base}/q-{uuid.uuid4().hex[:8]}"
    status, _, _ = raw(cluster, "PUT", path, {"X-Auth-Token": token, **headers})
    assert status == 201
    return path


def put(cluster, path: str, token: str, body: bytes):
    return raw(cluster, "PUT", path, {"X-Auth-Token": token}, body)


def refused_once_stats_catch_up(cluster, refresh: tuple[str, str], path: str, token: str):
    """The quota uses the container's (or account's) stats, which follow a write shortly: a
    metadata POST makes the proxy read them afresh."""
    def refused():
        raw(cluster, "POST", refresh[0], {"X-Auth-Token": token, refresh[1]: "1"})
        status, _, body = put(cluster, path, token, b"x")
        assert status in (201, 413)
        return status == 413 and body == EXCEEDED
    wait_for(refused, 30, interval=0.2, what="the quota to refuse a write")


def test_info_advertises_both(cluster):
    status, _, body = raw(cluster, "GET", "/info")
    info = json.loads(body)
    assert info["container_quotas"] == {} and info["account_quotas"] == {}


def test_container_quota_values_are_checked(cluster, owner):
    base, token = owner
    path = f"{base}/q-{uuid.uuid4().hex[:8]}"
    status, _, body = raw(cluster, "PUT", path, {"X-Auth-Token": token,
                                                 "X-Container-Meta-Quota-Bytes": "ten"})
    assert (status, body) == (400, b"Invalid bytes quota.")
    path = new_container(cluster, base, token)
    status, _, body = raw(cluster, "POST", path, {"X-Auth-Token": token,
                                                  "X-Container-Meta-Quota-Count": "-1"})
    assert (status, body) == (400, b"Invalid count quota.")
    status, h, _ = raw(cluster, "POST", path, {"X-Auth-Token": token,
                                               "X-Container-Meta-Quota-Count": "3"})
    assert status == 204
    _, h, _ = raw(cluster, "HEAD", path, {"X-Auth-Token": token})
    assert h["X-Container-Meta-Quota-Count"] == "3"


def test_container_quota_bytes(cluster, owner):
    base, token = owner
    path = new_container(cluster, base, token, **{"X-Container-Meta-Quota-Bytes": "10"})
    status, _, body = put(cluster, f"{path}/big", token, b"01234567890")
    assert (status, body) == (413, EXCEEDED)
    assert put(cluster, f"{path}/fits", token, b"0123456789")[0] == 201
    refused_once_stats_catch_up(cluster, (path, "X-Container-Meta-Touch"), f"{path}/more",
                                token)
    # Deleting makes room again; raising the quota does too.
    assert raw(cluster, "POST", path, {"X-Auth-Token": token,
                                       "X-Container-Meta-Quota-Bytes": "100"})[0] == 204
    assert put(cluster, f"{path}/more", token, b"x" * 50)[0] == 201


def test_container_quota_count(cluster, owner):
    base, token = owner
    path = new_container(cluster, base, token, **{"X-Container-Meta-Quota-Count": "2"})
    assert put(cluster, f"{path}/1", token, b"a")[0] == 201
    assert put(cluster, f"{path}/2", token, b"b")[0] == 201
    refused_once_stats_catch_up(cluster, (path, "X-Container-Meta-Touch"), f"{path}/3", token)
    # A server-side copy is a write like any other.
    dest = f"{path[len(base) + 1:]}/4"
    status, _, body = raw(cluster, "COPY", f"{path}/1", {"X-Auth-Token": token,
                                                         "Destination": dest})
    assert (status, body) == (413, EXCEEDED)


def test_quota_refusal_tells_strangers_nothing(cluster, owner):
    base, token = owner
    path = new_container(cluster, base, token, **{"X-Container-Meta-Quota-Bytes": "0"})
    _, t3 = token_and_url(cluster, "test:tester3", "testing3")
    # No write access: the answer is the 403 it would have been, not the quota.
    assert put(cluster, f"{path}/x", t3, b"x")[0] == 403
    assert put(cluster, f"{path}/x", "", b"x")[0] == 401
    # Granted write access: now the quota is what stops it.
    assert raw(cluster, "POST", path, {"X-Auth-Token": token,
                                       "X-Container-Write": "test:tester3"})[0] == 204
    status, _, body = put(cluster, f"{path}/x", t3, b"x")
    assert (status, body) == (413, EXCEEDED)


def account_headers(cluster, base: str, token: str) -> dict:
    status, h, _ = raw(cluster, "HEAD", base, {"X-Auth-Token": token})
    assert status == 204
    return h


def test_only_a_reseller_admin_sets_account_quotas(cluster):
    url, token = token_and_url(cluster, "test2:tester2", "testing2")
    base = storage_path(url)
    _, admin = token_and_url(cluster, "admin:admin", "admin")
    for header in ("X-Account-Meta-Quota-Bytes", "X-Account-Quota-Bytes",
                   "X-Account-Quota-Count", "X-Account-Quota-Bytes-Policy-Policy-0",
                   "X-Remove-Account-Quota-Bytes", "X-Remove-Account-Meta-Quota-Bytes"):
        assert raw(cluster, "POST", base, {"X-Auth-Token": token, header: "0"})[0] == 403
    assert raw(cluster, "POST", base, {"X-Auth-Token": admin,
                                       "X-Account-Quota-Count": "many"})[0] == 400
    # Set (the legacy name too), shown to the owner; kept as sysmeta, never shown as such.
    for header, shown in (("X-Account-Meta-Quota-Bytes", "X-Account-Quota-Bytes"),
                          ("X-Account-Quota-Count", "X-Account-Quota-Count"),
                          ("X-Account-Quota-Bytes-Policy-Policy-0",
                           "X-Account-Quota-Bytes-Policy-Policy-0")):
        assert raw(cluster, "POST", base, {"X-Auth-Token": admin, header: "123"})[0] == 204
        h = account_headers(cluster, base, token)
        assert h[shown] == "123"
        assert not any(k.lower().startswith("x-account-sysmeta-") for k in h)
        assert raw(cluster, "POST", base, {"X-Auth-Token": admin,
                                           header.replace("X-", "X-Remove-"): "t"})[0] == 204
        assert shown not in account_headers(cluster, base, token)


def test_account_quota_bytes_and_count(cluster):
    url, token = token_and_url(cluster, "test2:tester2", "testing2")
    base = storage_path(url)
    _, admin = token_and_url(cluster, "admin:admin", "admin")
    path = new_container(cluster, base, token)
    used = int(account_headers(cluster, base, token)["X-Account-Bytes-Used"])
    assert raw(cluster, "POST", base, {"X-Auth-Token": admin,
                                       "X-Account-Quota-Bytes": str(used + 5)})[0] == 204
    status, _, body = put(cluster, f"{path}/big", token, b"123456")
    assert (status, body) == (413, EXCEEDED)
    assert put(cluster, f"{path}/fits", token, b"12345")[0] == 201
    refused_once_stats_catch_up(cluster, (base, "X-Account-Meta-Touch"), f"{path}/more", token)
    # The reseller admin is not bound by the quotas it sets.
    assert put(cluster, f"{path}/admins", admin, b"123456")[0] == 201
    # Removing the quota lifts it.
    assert raw(cluster, "POST", base, {"X-Auth-Token": admin,
                                       "X-Account-Quota-Bytes": ""})[0] == 204
    assert put(cluster, f"{path}/more", token, b"123456")[0] == 201
    # Object count, overall and per policy (with its own message).
    count = int(account_headers(cluster, base, token)["X-Account-Object-Count"])
    assert raw(cluster, "POST", base, {"X-Auth-Token": admin,
                                       "X-Account-Quota-Count": str(count)})[0] == 204
    status, _, body = put(cluster, f"{path}/one-more", token, b"1")
    assert (status, body) == (413, EXCEEDED)
    assert raw(cluster, "POST", base, {"X-Auth-Token": admin, "X-Account-Quota-Count": "",
                                       "X-Account-Quota-Count-Policy-Policy-0":
                                       str(count)})[0] == 204
    status, _, body = put(cluster, f"{path}/one-more", token, b"1")
    assert (status, body) == (413, b"Upload exceeds policy quota.")
    assert raw(cluster, "POST", base, {
        "X-Auth-Token": admin, "X-Remove-Account-Quota-Count-Policy-Policy-0": "t"})[0] == 204
    assert put(cluster, f"{path}/one-more", token, b"1")[0] == 201
