"""Bucket policies through boto3: Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus,
refusals that store nothing, and what a stored policy allows and denies."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def code_of(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    err = exc.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]


def policy(bucket: str, *statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(bucket: str, action="s3:ListBucket", principal="*", resources=None,
          effect="Allow", **extra) -> dict:
    out = {"Effect": effect, "Principal": principal, "Action": action,
           "Resource": resources or [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}
    out.update(extra)
    return out


def status_of(s3, bucket: str) -> bool:
    return s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"]


def test_put_get_delete(s3):
    s3.create_bucket(Bucket="pol-crud")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_policy(Bucket="pol-crud")
    assert code_of(exc) == (404, "NoSuchBucketPolicy")
    # Kept byte for byte, whitespace and key order included.
    text = json.dumps({"Version": "2012-10-17", "Id": "x", "Statement": [
        allow("pol-crud", principal={"AWS": "arn:aws:iam::test2:root"})]}, indent=3)
    resp = s3.put_bucket_policy(Bucket="pol-crud", Policy=text)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.get_bucket_policy(Bucket="pol-crud")["Policy"] == text
    # A second put replaces the first, a shorter one leaving nothing of it behind.
    short = policy("pol-crud", allow("pol-crud", principal={"AWS": "test2"}))
    s3.put_bucket_policy(Bucket="pol-crud", Policy=short)
    assert s3.get_bucket_policy(Bucket="pol-crud")["Policy"] == short
    assert s3.delete_bucket_policy(Bucket="pol-crud")["ResponseMetadata"][
        "HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_policy(Bucket="pol-crud")
    assert code_of(exc) == (404, "NoSuchBucketPolicy")
    s3.delete_bucket_policy(Bucket="pol-crud")  # none: still fine


def test_large_policy_round_trip(s3):
    s3.create_bucket(Bucket="pol-large")
    statements = [allow("pol-large", Sid=f"s{i}", principal={"AWS": f"arn:aws:iam::a{i}:root"})
                  for i in range(100)]
    text = policy("pol-large", *statements)
    pad = 20 * 1024 - len(text) - 200
    text = policy("pol-large", *statements, allow("pol-large", Sid="p" * pad,
                                                  principal={"AWS": "x"}))
    assert 20 * 1024 - 200 < len(text) <= 20 * 1024
    s3.put_bucket_policy(Bucket="pol-large", Policy=text)
    assert s3.get_bucket_policy(Bucket="pol-large")["Policy"] == text


def test_missing_bucket(s3):
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_policy(Bucket="pol-nobucket",
                             Policy=policy("pol-nobucket", allow("pol-nobucket")))
    assert code_of(exc) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_policy(Bucket="pol-nobucket")
    assert code_of(exc) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_policy_status(Bucket="pol-nobucket")
    assert code_of(exc) == (404, "NoSuchBucket")


@pytest.fixture(scope="module")
def bad_bucket(s3):
    s3.create_bucket(Bucket="pol-bad")
    return "pol-bad"


@pytest.mark.parametrize("bad", [
    "not json",
    "[]",
    json.dumps({"Version": "2012-10-17", "Statement": []}),
    policy("pol-bad", allow("pol-bad", effect="Perhaps")),
    policy("pol-bad", allow("pol-bad", action="s3:NoSuchAction")),
    policy("pol-bad", allow("pol-bad", resources="arn:aws:s3:::another-bucket/*")),
    policy("pol-bad", allow("pol-bad", Condition={"NoSuchOperator": {"s3:prefix": "a"}})),
    json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "NotPrincipal": {"AWS": "arn:aws:iam::s3tenant1:root"},
        "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::pol-bad"}]}),
    policy("pol-bad", allow("pol-bad", Sid="x" * (21 * 1024))),
])
def test_bad_policies_store_nothing(s3, bad_bucket, bad):
    good = policy("pol-bad", allow("pol-bad", principal={"AWS": "test2"}))
    s3.put_bucket_policy(Bucket="pol-bad", Policy=good)
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_policy(Bucket="pol-bad", Policy=bad)
    assert code_of(exc) == (400, "MalformedPolicy")
    assert s3.get_bucket_policy(Bucket="pol-bad")["Policy"] == good


def test_policy_status(s3):
    s3.create_bucket(Bucket="pol-status")
    assert status_of(s3, "pol-status") is False
    s3.put_bucket_policy(Bucket="pol-status", Policy=policy("pol-status", allow("pol-status")))
    assert status_of(s3, "pol-status") is True
    for not_public in (
        allow("pol-status", principal={"AWS": "arn:aws:iam::s3tenant1:root"}),
        allow("pol-status", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/32"}}),
        allow("pol-status", effect="Deny"),
    ):
        s3.put_bucket_policy(Bucket="pol-status", Policy=policy("pol-status", not_public))
        assert status_of(s3, "pol-status") is False
    s3.delete_bucket_policy(Bucket="pol-status")
    s3.put_bucket_acl(Bucket="pol-status", ACL="public-read")
    assert status_of(s3, "pol-status") is True
