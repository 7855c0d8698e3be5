"""Bucket CORS through a real `swiftlite up` proxy: rules set, read and deleted with boto3
(bad documents refused, nothing stored), and answered to browsers: CORS headers on actual
answers for an allowed origin, none for another."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client

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


def code_of(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    err = exc.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]


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
