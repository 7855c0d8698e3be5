"""Bucket CORS through a real `swiftlite up` proxy: rules set, read and deleted with boto3
(bad documents refused, nothing stored; another account may not set them), and answered to
browsers: unsigned preflights allowed or denied by the rules, CORS headers on actual answers
for an allowed origin, none for another."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of

BUCKET = "corsy"
RULES = {"CORSRules": [
    {"AllowedMethods": ["GET", "HEAD"], "AllowedOrigins": ["https://*.example.com"],
     "AllowedHeaders": ["x-amz-*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 60},
    {"AllowedMethods": ["PUT"], "AllowedOrigins": ["*"]},
]}


@pytest.fixture(scope="module")
def s3(cluster):
    c = client(cluster)
    c.create_bucket(Bucket=BUCKET)
    c.put_object(Bucket=BUCKET, Key="page.html", Body=b"<p>hi</p>")
    return c


def test_configuration_round_trip(s3):
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_cors(Bucket=BUCKET)
    assert code_of(exc) == (404, "NoSuchCORSConfiguration")
    s3.put_bucket_cors(Bucket=BUCKET, CORSConfiguration=RULES)
    assert s3.get_bucket_cors(Bucket=BUCKET)["CORSRules"] == RULES["CORSRules"]
    s3.delete_bucket_cors(Bucket=BUCKET)
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_cors(Bucket=BUCKET)
    assert code_of(exc) == (404, "NoSuchCORSConfiguration")


@pytest.mark.parametrize("rule,code", [
    ({"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}, "InvalidRequest"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["*.a.*"]}, "InvalidRequest"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["*"],
      "AllowedHeaders": ["x-*-*"]}, "InvalidRequest"),
])
def test_bad_rules_store_nothing(s3, rule, code):
    s3.put_bucket_cors(Bucket=BUCKET, CORSConfiguration=RULES)
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_cors(Bucket=BUCKET, CORSConfiguration={"CORSRules": [rule]})
    assert code_of(exc) == (400, code)
    assert s3.get_bucket_cors(Bucket=BUCKET)["CORSRules"] == RULES["CORSRules"]


def headers_of_get(s3, origin: str | None, key: str = "page.html") -> dict[str, str]:
    """An actual (signed) GET's CORS headers, as a browser page would send it."""
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key})
    req = urllib.request.Request(url, headers={"Origin": origin} if origin else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            got = resp.headers
    except urllib.error.HTTPError as exc:
        got = exc.headers
    return {k.lower(): v for k, v in got.items() if k.lower().startswith("access-control-")}


def test_actual_answers_carry_the_matching_rule(s3):
    s3.put_bucket_cors(Bucket=BUCKET, CORSConfiguration=RULES)
    assert headers_of_get(s3, "https://app.example.com") == {
        "access-control-allow-origin": "https://app.example.com",
        "access-control-allow-credentials": "true",
        "access-control-allow-methods": "GET, HEAD",
        "access-control-expose-headers": "ETag",
        "access-control-max-age": "60"}
    # An error is decorated too, so the page can read why.
    assert headers_of_get(s3, "https://app.example.com", "absent")[
        "access-control-allow-origin"] == "https://app.example.com"
    assert headers_of_get(s3, "https://evil.example.org") == {}
    assert headers_of_get(s3, None) == {}


def preflight(cluster, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    """An unsigned OPTIONS, as a browser sends it before a cross-origin request."""
    req = urllib.request.Request(f"{cluster.proxy_url}{path}", method="OPTIONS",
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, got = resp.status, resp.headers
    except urllib.error.HTTPError as exc:
        status, got = exc.code, exc.headers
    return status, {k.lower(): v for k, v in got.items()
                    if k.lower().startswith("access-control-")}


def test_preflight_allowed_and_denied(cluster, s3):
    s3.put_bucket_cors(Bucket=BUCKET, CORSConfiguration=RULES)
    path = f"/{BUCKET}/page.html"
    status, headers = preflight(cluster, path, {
        "Origin": "https://app.example.com", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "X-Amz-Meta-Color"})
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://app.example.com"
    assert headers["access-control-allow-methods"] == "GET, HEAD"
    assert headers["access-control-allow-headers"] == "x-amz-meta-color"
    assert headers["access-control-max-age"] == "60"
    # The wildcard-origin rule allows PUT from anywhere.
    status, headers = preflight(cluster, path, {"Origin": "https://other.org",
                                                "Access-Control-Request-Method": "PUT"})
    assert (status, headers["access-control-allow-origin"]) == (200, "*")
    for denied in ({"Origin": "https://other.org", "Access-Control-Request-Method": "GET"},
                   {"Origin": "https://app.example.com",
                    "Access-Control-Request-Method": "DELETE"},
                   {"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET",
                    "Access-Control-Request-Headers": "x-custom"}):
        assert preflight(cluster, path, denied) == (403, {})
    assert preflight(cluster, path, {"Access-Control-Request-Method": "GET"})[0] == 400
    assert preflight(cluster, path, {"Origin": "https://app.example.com"})[0] == 400


def test_preflight_without_rules_or_bucket_is_403(cluster, s3):
    s3.delete_bucket_cors(Bucket=BUCKET)
    asked = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET"}
    assert preflight(cluster, f"/{BUCKET}/page.html", asked) == (403, {})
    assert preflight(cluster, "/no-such-bucket-here/k", asked) == (403, {})


def test_another_account_cannot_set_rules(cluster, s3):
    other = client(cluster, "test2:tester2", "testing2")
    with pytest.raises(ClientError) as exc:
        other.put_bucket_cors(Bucket=BUCKET, CORSConfiguration=RULES)
    assert code_of(exc)[0] == 403
