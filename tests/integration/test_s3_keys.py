"""S3 key pairs (proxy/s3/keys.py, proxy/s3/key_admin.py, `swiftlite s3-keys`): made
by an account admin, used through boto3 with the bound user's rights, listed without their
secret, revoked, kept sealed in the cluster, refused to everyone else."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import aiohttp
import boto3
import pytest
import swiftclient
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.helpers import http_request, start_proxy_variant, wait_for
from tests.integration.s3_support import client, code_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def _request(method: str, url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, headers=headers) as resp:
            return resp.status, await resp.read()


def call(method: str, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    return asyncio.run(_request(method, url, headers or {}))


def login(cluster, user: str, key: str) -> tuple[str, str]:
    """(storage URL, token) of a tempauth user."""
    async def go() -> tuple[str, str]:
        async with aiohttp.ClientSession() as session:
            async with session.get(cluster.auth_url, headers={
                    "X-Auth-User": user, "X-Auth-Key": key}) as resp:
                assert resp.status == 200, resp.status
                return resp.headers["X-Storage-Url"], resp.headers["X-Auth-Token"]
    return asyncio.run(go())


def account_url(cluster, account: str) -> str:
    return f"{cluster.proxy_url}/v1/{account}"


@pytest.fixture(scope="module")
def admin(cluster) -> tuple[str, dict[str, str]]:
    url, token = login(cluster, "test:tester", "testing")
    return url, {"X-Auth-Token": token}


def create(url: str, headers: dict[str, str], user: str | None = None) -> dict:
    status, body = call("POST", f"{url}?s3-keys" + (f"&user={user}" if user else ""), headers)
    assert status == 201, (status, body)
    return json.loads(body)


def listed(url: str, headers: dict[str, str]) -> list[dict]:
    status, body = call("GET", f"{url}?s3-keys", headers)
    assert status == 200, (status, body)
    return json.loads(body)


def key_client(cluster, key: dict, sig: str = "s3v4", endpoint: str | None = None):
    """boto3 signing with `key`, at the cluster's proxy or `endpoint`."""
    return boto3.client(
        "s3", endpoint_url=endpoint or cluster.proxy_url, region_name="us-east-1",
        aws_access_key_id=key["access_key_id"],
        aws_secret_access_key=key["secret_access_key"],
        config=Config(signature_version=sig, s3={"addressing_style": "path"},
                      retries={"max_attempts": 1}))


def test_create_use_list_revoke(cluster, admin):
    url, headers = admin
    key = create(url, headers)
    assert re.fullmatch(r"[A-Z0-9]{20}", key["access_key_id"])
    assert len(key["secret_access_key"]) == 40
    assert key["user"] == "test:tester" and key["account"] == "AUTH_test"

    s3 = key_client(cluster, key)
    s3.create_bucket(Bucket="keyed")
    s3.put_object(Bucket="keyed", Key="obj", Body=b"made with a key pair")
    assert s3.get_object(Bucket="keyed", Key="obj")["Body"].read() == b"made with a key pair"
    # SigV2 checks against the same secret.
    v2 = key_client(cluster, key, sig="s3")
    assert v2.get_object(Bucket="keyed", Key="obj")["Body"].read() == b"made with a key pair"
    # A presigned URL signed with the key pair.
    link = s3.generate_presigned_url("get_object", Params={"Bucket": "keyed", "Key": "obj"},
                                     ExpiresIn=300)
    assert call("GET", link) == (200, b"made with a key pair")
    # The bucket is the bound user's Swift container.
    _, body = cluster.connection().get_object("keyed", "obj")
    assert body == b"made with a key pair"

    status, raw = call("GET", f"{url}?s3-keys", headers)
    assert status == 200
    assert key["secret_access_key"].encode() not in raw
    rows = {k["access_key_id"]: k for k in json.loads(raw)}
    assert rows[key["access_key_id"]]["user"] == "test:tester"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[key["access_key_id"]]["created"])
    assert set(rows[key["access_key_id"]]) == {"access_key_id", "user", "created"}

    status, _ = call("DELETE", f"{url}?s3-keys={key['access_key_id']}", headers)
    assert status == 204
    # The proxy that revoked refuses the key at once.
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="keyed", Key="obj")
    assert code_of(exc) == (403, "InvalidAccessKeyId")
    assert key["access_key_id"] not in {k["access_key_id"] for k in listed(url, headers)}
    status, _ = call("DELETE", f"{url}?s3-keys={key['access_key_id']}", headers)
    assert status == 404


def test_others_get_403_and_learn_nothing(cluster, admin):
    url, headers = admin
    key = create(url, headers)
    before = listed(url, headers)
    _, tester3 = login(cluster, "test:tester3", "testing3")
    _, other_admin = login(cluster, "test2:tester2", "testing2")
    for who in ({"X-Auth-Token": tester3}, {"X-Auth-Token": other_admin}, {}):
        for method, query in (("POST", "s3-keys"), ("GET", "s3-keys"),
                              ("DELETE", f"s3-keys={key['access_key_id']}"),
                              ("DELETE", "s3-keys=AAAAAAAAAAAAAAAAAAAA")):
            status, body = call(method, f"{url}?{query}", who)
            assert status == 403, (who, method, status)
            assert key["access_key_id"].encode() not in body
    # Nothing was made or revoked: the key still works.
    assert listed(url, headers) == before
    s3 = key_client(cluster, key)
    assert "Buckets" in s3.list_buckets()
    # Another account's admin manages its own account only.
    other_url = account_url(cluster, "AUTH_test2")
    assert listed(other_url, {"X-Auth-Token": other_admin}) == []


def test_reseller_admin_manages_any_account(cluster):
    _, token = login(cluster, "admin:admin", "admin")
    url, headers = account_url(cluster, "AUTH_test"), {"X-Auth-Token": token}
    # The reseller admin is no user of AUTH_test: it must name one.
    status, _ = call("POST", f"{url}?s3-keys", headers)
    assert status == 400
    key = create(url, headers, user="tester2")
    assert key["user"] == "test:tester2"
    assert key["access_key_id"] in {k["access_key_id"] for k in listed(url, headers)}
    assert call("DELETE", f"{url}?s3-keys={key['access_key_id']}", headers)[0] == 204


def test_bad_requests_store_nothing(cluster, admin):
    url, headers = admin
    before = listed(url, headers)
    assert call("POST", f"{url}?s3-keys&user=nobody", headers)[0] == 400
    assert call("DELETE", f"{url}?s3-keys", headers)[0] == 400
    assert call("DELETE", f"{url}?s3-keys=not-a-key", headers)[0] == 404
    assert call("PUT", f"{url}?s3-keys", headers)[0] == 405
    # A key of another account cannot be revoked through this one.
    _, token2 = login(cluster, "test2:tester2", "testing2")
    url2, headers2 = account_url(cluster, "AUTH_test2"), {"X-Auth-Token": token2}
    other = create(url2, headers2)
    assert call("DELETE", f"{url}?s3-keys={other['access_key_id']}", headers)[0] == 404
    assert other["access_key_id"] in {k["access_key_id"] for k in listed(url2, headers2)}
    assert listed(url, headers) == before
    # A made-up access key id is simply unknown.
    fake = {"access_key_id": "A" * 20, "secret_access_key": "x" * 40}
    with pytest.raises(ClientError) as exc:
        key_client(cluster, fake).list_buckets()
    assert code_of(exc) == (403, "InvalidAccessKeyId")
    # The right id with a wrong secret does not sign.
    wrong = {**other, "secret_access_key": "y" * 40}
    with pytest.raises(ClientError) as exc:
        key_client(cluster, wrong).list_buckets()
    assert code_of(exc) == (403, "SignatureDoesNotMatch")


def test_secret_is_not_stored_in_plain(cluster, admin):
    url, headers = admin
    key = create(url, headers)
    key_client(cluster, key).list_buckets()  # used once: fetched and cached too
    secret, key_id = key["secret_access_key"].encode(), key["access_key_id"].encode()
    seen_id = False
    for top, _, files in os.walk(cluster.root):
        for name in files:
            try:
                with open(os.path.join(top, name), "rb") as f:
                    data = f.read()
            except OSError:
                continue
            assert secret not in data, os.path.join(top, name)
            seen_id = seen_id or key_id in data
    assert seen_id  # the record is there (so the search looked where keys live)
    # No client reaches where they live, a reseller admin included.
    _, token = login(cluster, "admin:admin", "admin")
    system = account_url(cluster, "AUTH_.s3keys")
    for path in ("", "/%00s3keys", f"/%00s3keys/{key['access_key_id']}"):
        status, body = call("GET", system + path, {"X-Auth-Token": token})
        assert status in (403, 412), (path, status)
        assert key_id not in body


def test_key_carries_only_its_users_rights(cluster, admin):
    url, headers = admin
    key = create(url, headers, user="tester3")  # tester3: no .admin, no ACL yet
    assert key["user"] == "test:tester3"
    conn = cluster.connection()
    conn.put_container("shared", headers={"X-Container-Read": "test:tester3"})
    conn.put_object("shared", "doc", b"readable")
    s3 = key_client(cluster, key)
    assert s3.get_object(Bucket="shared", Key="doc")["Body"].read() == b"readable"
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="shared", Key="doc", Body=b"overwritten")
    assert code_of(exc) == (403, "AccessDenied")
    # tester3 may create no container: the key is refused as tester3's password is.
    with pytest.raises(ClientError) as exc:
        s3.create_bucket(Bucket="tester3-own")
    with pytest.raises(ClientError) as same:
        client(cluster, "test:tester3", "testing3").create_bucket(Bucket="tester3-own")
    assert code_of(exc) == code_of(same) and code_of(exc)[0] in (403, 409)
    with pytest.raises(swiftclient.ClientException) as missing:
        conn.head_container("tester3-own")
    assert missing.value.http_status == 404
    assert conn.get_object("shared", "doc")[1] == b"readable"
    # Nor can a key reach the admin API (it is no token).
    status, _ = call("GET", f"{url}?s3-keys", {"X-Auth-Token": key["access_key_id"]})
    assert status in (401, 403)


def test_revocation_reaches_another_proxy_within_its_ttl(cluster, admin):
    url, headers = admin
    key = create(url, headers)
    other = start_proxy_variant(cluster, "keys-ttl", filters={
        "s3_keys": {"s3_key_cache_ttl": "1"}})
    try:
        endpoint = f"http://127.0.0.1:{other.port}"
        far = key_client(cluster, key, endpoint=endpoint)
        wait_for(lambda: "Buckets" in far.list_buckets(), 20, what="second proxy")
        assert call("DELETE", f"{url}?s3-keys={key['access_key_id']}", headers)[0] == 204

        def refused() -> bool:
            try:
                far.list_buckets()
            except ClientError as exc:
                return exc.response["Error"]["Code"] == "InvalidAccessKeyId"
            return False

        wait_for(refused, 10, what="revocation on the other proxy")
    finally:
        other.stop()


def test_revocation_reaches_every_worker_of_the_proxy_at_once(cluster, admin):
    """Two workers share the port: each has looked the key up (and keeps it for a minute),
    yet once one of them revokes it neither accepts it again."""
    other = start_proxy_variant(cluster, "keys-workers", proxy={"workers": "2"},
                                filters={"s3_keys": {"s3_key_cache_ttl": "60"}})
    try:
        base = f"http://127.0.0.1:{other.port}"
        url, headers = f"{base}/v1/AUTH_test", admin[1]
        key = wait_for(lambda: create(url, headers), 20, what="proxy with two workers")

        def outcome() -> str:
            # A fresh client is a fresh connection: SO_REUSEPORT spreads them over workers.
            try:
                key_client(cluster, key, endpoint=base).list_buckets()
            except ClientError as exc:
                return exc.response["Error"]["Code"]
            return "ok"

        assert [outcome() for _ in range(16)] == ["ok"] * 16  # cached by both workers
        assert call("DELETE", f"{url}?s3-keys={key['access_key_id']}", headers)[0] == 204
        assert [outcome() for _ in range(16)] == ["InvalidAccessKeyId"] * 16
    finally:
        other.stop()


def test_reseller_users_need_a_reseller_admin(cluster):
    """An admin of the reseller's own account (not a reseller itself) cannot mint a key that
    carries a reseller group: a key never carries more than its maker holds."""
    other = start_proxy_variant(cluster, "keys-ops", proxy={"user_admin_ops": "opspass .admin"})
    try:
        base = f"http://127.0.0.1:{other.port}"

        def token() -> str:
            status, headers, _ = http_request(base, "GET", "/auth/v1.0", {
                "X-Auth-User": "admin:ops", "X-Auth-Key": "opspass"})
            return headers["X-Auth-Token"] if status == 200 else ""

        headers = {"X-Auth-Token": wait_for(token, 20, what="proxy with admin:ops")}
        url = f"{base}/v1/AUTH_admin"
        before = listed(url, headers)
        for user in ("admin", "auditor"):
            assert call("POST", f"{url}?s3-keys&user={user}", headers)[0] == 403
        assert listed(url, headers) == before
        own = create(url, headers)
        assert own["user"] == "admin:ops"
    finally:
        other.stop()


def cli(cluster, *args: str, user: str = "test:tester",
        key: str = "testing") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swiftlite.cli", "s3-keys", *args, "--auth-url",
         cluster.auth_url, "--user", user, "--key", key],
        capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_cli(cluster):
    made = cli(cluster, "create", "--for-user", "tester2", "--profile", "tester2")
    assert made.returncode == 0, made.stderr
    assert "[tester2]" in made.stdout
    key_id = re.search(r"^aws_access_key_id = ([A-Z0-9]{20})$", made.stdout, re.M).group(1)
    secret = re.search(r"^aws_secret_access_key = (\S{40})$", made.stdout, re.M).group(1)
    key = {"access_key_id": key_id, "secret_access_key": secret}
    assert "Buckets" in key_client(cluster, key).list_buckets()

    shown = cli(cluster, "list")
    assert shown.returncode == 0, shown.stderr
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith(key_id))
    assert "test:tester2" in line and secret not in shown.stdout

    denied = cli(cluster, "list", user="test:tester3", key="testing3")
    assert denied.returncode == 1 and "403" in denied.stderr and key_id not in denied.stdout

    gone = cli(cluster, "revoke", key_id)
    assert gone.returncode == 0, gone.stderr
    with pytest.raises(ClientError) as exc:
        key_client(cluster, key).list_buckets()
    assert code_of(exc) == (403, "InvalidAccessKeyId")
    again = cli(cluster, "revoke", key_id)
    assert again.returncode == 1 and "404" in again.stderr
