"""The console's server side without a browser: its files and their headers, the S3-key
sign-in, who may ask for what, and that it takes nothing from the APIs beside it."""

from __future__ import annotations

import concurrent.futures
import json

import boto3
import pytest
import requests
from botocore.config import Config

from tests.cluster import swift_api
from tests.helpers import start_proxy_variant

LOGIN = "/console/api/s3-login"


def login(cluster, body, headers=None) -> requests.Response:
    return requests.post(cluster.proxy_url + LOGIN, data=json.dumps(body),
                         headers={"Content-Type": "application/json", **(headers or {})},
                         timeout=10)


def test_files_come_with_a_strict_policy(cluster):
    r = requests.get(cluster.proxy_url + "/console/", timeout=10)
    assert r.status_code == 200 and "text/html" in r.headers["Content-Type"]
    csp = r.headers["Content-Security-Policy"]
    for part in ("default-src 'none'", "script-src 'self'", "connect-src 'self'",
                 "frame-ancestors 'none'"):
        assert part in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    # Every script the page loads is ours, from this origin, none inline.
    assert '<script type="module" src="app.js">' in r.text and "<script>" not in r.text
    js = requests.get(cluster.proxy_url + "/console/app.js", timeout=10)
    assert js.status_code == 200 and js.headers["Content-Type"].startswith("text/javascript")
    again = requests.get(cluster.proxy_url + "/console/app.js", timeout=10,
                         headers={"If-None-Match": js.headers["ETag"]})
    assert again.status_code == 304 and not again.content
    moved = requests.get(cluster.proxy_url + "/console", allow_redirects=False, timeout=10)
    assert moved.status_code == 301 and moved.headers["Location"] == "/console/"


@pytest.mark.parametrize("path", ["/console/nope.js", "/console/..%2f..%2fetc%2fpasswd",
                                  "/console/%2e%2e/proxy.conf", "/console/.hidden",
                                  "/console/static/app.js", "/console/api/nothing"])
def test_nothing_else_is_served(cluster, path):
    r = requests.get(cluster.proxy_url + path, timeout=10)
    assert r.status_code == 404, (path, r.status_code, r.text[:100])
    assert "root:" not in r.text and "backend_secret" not in r.text


def test_the_files_are_read_only(cluster):
    for method in ("PUT", "POST", "DELETE"):
        r = requests.request(method, cluster.proxy_url + "/console/app.js", data=b"x",
                             timeout=10)
        assert r.status_code == 405
    assert b"import" in requests.get(cluster.proxy_url + "/console/app.js", timeout=10).content


def test_s3_key_sign_in_gives_the_users_own_token(cluster):
    r = login(cluster, {"access_key": "test:tester", "secret": "testing"})
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    doc = r.json()
    assert doc["storage_url"].endswith("/v1/AUTH_test")
    listing = requests.get(doc["storage_url"], headers={"X-Auth-Token": doc["token"]},
                           timeout=10)
    assert listing.status_code in (200, 204)
    # The token carries the user's rights, no more: another account stays closed.
    other = requests.get(doc["storage_url"].replace("AUTH_test", "AUTH_test2"),
                         headers={"X-Auth-Token": doc["token"]}, timeout=10)
    assert other.status_code == 403
    who = requests.get(cluster.proxy_url + "/console/api/session",
                       headers={"X-Auth-Token": doc["token"]}, timeout=10).json()
    assert who["user"] == "test:tester" and who["reseller_admin"] is False


def test_a_key_pair_made_by_the_account_admin_signs_in(cluster):
    call = swift_api(cluster)
    made = call("POST", "", params={"s3-keys": ""})
    assert made.status_code == 201, made.text
    pair = made.json()
    r = login(cluster, {"access_key": pair["access_key_id"], "secret": pair["secret_access_key"]})
    assert r.status_code == 200 and r.json()["storage_url"].endswith("/v1/AUTH_test")
    call("DELETE", "", params={"s3-keys": pair["access_key_id"]})
    r = login(cluster, {"access_key": pair["access_key_id"], "secret": pair["secret_access_key"]})
    assert r.status_code == 401


@pytest.mark.parametrize("body,headers,status", [
    ({"access_key": "test:tester", "secret": "wrong"}, {}, 401),
    ({"access_key": "nobody:here", "secret": "testing"}, {}, 401),
    ({"access_key": "test:tester"}, {}, 400),
    ({"access_key": "test:tester", "secret": "testing"}, {"Origin": "https://evil.example"}, 403),
    ({"access_key": "test:tester", "secret": "testing"}, {"Content-Type": "text/plain"}, 415),
    ({"access_key": "test:tester", "secret": "x" * 5000}, {}, 413),
])
def test_a_bad_sign_in_is_refused_and_says_why(cluster, body, headers, status):
    r = login(cluster, body, headers)
    assert r.status_code == status, r.text
    assert "token" not in r.json() and r.json()["error"]


def test_a_same_origin_sign_in_is_accepted(cluster):
    r = login(cluster, {"access_key": "test:tester", "secret": "testing"},
              {"Origin": cluster.proxy_url})
    assert r.status_code == 200


def test_the_cluster_report_is_for_reseller_admins_only(cluster):
    url = cluster.proxy_url + "/console/api/cluster"
    assert requests.get(url, timeout=10).status_code == 401
    user = swift_api(cluster)
    assert requests.get(url, headers={"X-Auth-Token": user.token}, timeout=10).status_code == 403
    bogus = requests.get(url, headers={"X-Auth-Token": "AUTH_tkforged.sig"}, timeout=10)
    assert bogus.status_code == 401
    admin = requests.get(cluster.auth_url, headers={"X-Auth-User": "admin:admin",
                                                    "X-Auth-Key": "admin"}, timeout=10)
    r = requests.get(url, headers={"X-Auth-Token": admin.headers["X-Auth-Token"]}, timeout=30)
    assert r.status_code == 200
    doc = r.json()
    assert {s["host"] for s in doc["servers"]} >= {
        f"{n['ip']}:{s['port']}" for n in cluster.nodes for s in n["servers"].values()}


def test_operators_polling_share_one_report(cluster):
    """Several cluster pages polling one proxy worker at once get one report between them
    (each would otherwise ask every storage server), and one made within the TTL after."""
    proxy = start_proxy_variant(cluster, "console-ttl", filters={
        "console": {"console_report_ttl": "60"}})
    try:
        admin = requests.get(cluster.auth_url, headers={"X-Auth-User": "admin:admin",
                                                        "X-Auth-Key": "admin"}, timeout=10)
        url = f"http://127.0.0.1:{proxy.port}/console/api/cluster"
        headers = {"X-Auth-Token": admin.headers["X-Auth-Token"]}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            docs = list(pool.map(lambda _: requests.get(url, headers=headers, timeout=30),
                                 range(4)))
        assert all(r.status_code == 200 for r in docs)
        stamps = {r.json()["generated"] for r in docs}
        assert len(stamps) == 1, stamps
        assert requests.get(url, headers=headers, timeout=30).json()["generated"] in stamps
    finally:
        proxy.stop()


def test_an_s3_bucket_named_console_is_still_s3s(cluster):
    s3 = boto3.client("s3", endpoint_url=cluster.proxy_url, aws_access_key_id="test:tester",
                      aws_secret_access_key="testing", region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    s3.create_bucket(Bucket="console")
    s3.put_object(Bucket="console", Key="app.js", Body=b"my own bytes")
    assert s3.get_object(Bucket="console", Key="app.js")["Body"].read() == b"my own bytes"
    # ... while an unsigned GET of the same path is the console's file.
    assert b"my own bytes" not in requests.get(cluster.proxy_url + "/console/app.js",
                                               timeout=10).content
    s3.delete_object(Bucket="console", Key="app.js")
    s3.delete_bucket(Bucket="console")


def test_a_proxy_without_the_console_serves_none(cluster):
    proxy = start_proxy_variant(cluster, "noconsole", {
        "pipeline": "catch_errors gatekeeper tempauth proxy-server"})
    try:
        r = requests.get(f"http://127.0.0.1:{proxy.port}/console/", timeout=10)
        assert r.status_code != 200 and "Content-Security-Policy" not in r.headers
        info = requests.get(f"http://127.0.0.1:{proxy.port}/info", timeout=10).json()
        assert "console" not in info
    finally:
        proxy.stop()
    info = requests.get(cluster.proxy_url + "/info", timeout=10).json()
    assert info["console"] == {"path": "/console/"}
