"""Bucket policies through boto3: Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus,
refusals that store nothing, and what a stored policy allows and denies."""

from __future__ import annotations

import json

import pytest
from botocore import UNSIGNED
from botocore.exceptions import ClientError
from botocore.handlers import validate_bucket_name

from tests.integration.s3_support import client, code_of


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


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


# ---- what a policy allows and denies -------------------------------------------------------

@pytest.fixture(scope="module")
def alt(cluster):
    return client(cluster, "test2:tester2", "testing2")


@pytest.fixture(scope="module")
def third(cluster):
    """A user of a third account, named by no policy here."""
    return client(cluster, "test5:tester5", "testing5")


@pytest.fixture(scope="module")
def anon(cluster):
    return client(cluster, sig=UNSIGNED)


def denied(call, **kwargs) -> None:
    with pytest.raises(ClientError) as exc:
        call(**kwargs)
    assert code_of(exc) == (403, "AccessDenied")


def test_allow_another_account(s3, alt, third, anon):
    s3.create_bucket(Bucket="pol-grant")
    s3.put_object(Bucket="pol-grant", Key="k", Body=b"data")
    denied(alt.list_objects, Bucket="pol-grant")
    s3.put_bucket_policy(Bucket="pol-grant", Policy=policy("pol-grant", allow(
        "pol-grant", action=["s3:ListBucket", "s3:GetObject"],
        principal={"AWS": "arn:aws:iam::test2:root"})))
    assert [o["Key"] for o in alt.list_objects(Bucket="pol-grant")["Contents"]] == ["k"]
    assert alt.get_object(Bucket="pol-grant", Key="k")["Body"].read() == b"data"
    # Only what was granted: no write, and nobody else.
    denied(alt.put_object, Bucket="pol-grant", Key="new", Body=b"x")
    denied(alt.delete_object, Bucket="pol-grant", Key="k")
    denied(alt.get_bucket_policy, Bucket="pol-grant")
    denied(third.list_objects, Bucket="pol-grant")
    denied(third.get_object, Bucket="pol-grant", Key="k")
    denied(anon.get_object, Bucket="pol-grant", Key="k")
    assert [o["Key"] for o in s3.list_objects(Bucket="pol-grant")["Contents"]] == ["k"]
    s3.delete_bucket_policy(Bucket="pol-grant")
    denied(alt.get_object, Bucket="pol-grant", Key="k")


def test_policy_of_one_bucket_grants_nothing_on_another(s3, alt):
    s3.create_bucket(Bucket="pol-iso-a")
    s3.create_bucket(Bucket="pol-iso-b")
    s3.put_object(Bucket="pol-iso-b", Key="k", Body=b"b")
    everything = policy("pol-iso-a", allow("pol-iso-a", action="s3:*",
                                           resources=["arn:aws:s3:::*", "arn:aws:s3:::*/*"]))
    s3.put_bucket_policy(Bucket="pol-iso-a", Policy=everything)
    assert alt.list_objects(Bucket="pol-iso-a").get("Contents") is None
    denied(alt.list_objects, Bucket="pol-iso-b")
    denied(alt.get_object, Bucket="pol-iso-b", Key="k")
    denied(alt.put_object, Bucket="pol-iso-b", Key="x", Body=b"x")
    # A policy naming the other bucket is refused outright.
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_policy(Bucket="pol-iso-a", Policy=policy("pol-iso-a", allow(
            "pol-iso-a", resources="arn:aws:s3:::pol-iso-b/*")))
    assert code_of(exc) == (400, "MalformedPolicy")
    # Nor can another account put a policy on a bucket it does not own.
    denied(alt.put_bucket_policy, Bucket="pol-iso-b",
           Policy=policy("pol-iso-b", allow("pol-iso-b")))
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_policy(Bucket="pol-iso-b")
    assert code_of(exc) == (404, "NoSuchBucketPolicy")


def test_deny_beats_allow_owner_included(s3, alt):
    s3.create_bucket(Bucket="pol-deny")
    for key in ("open/a", "secret/a"):
        s3.put_object(Bucket="pol-deny", Key=key, Body=key.encode())
    s3.put_bucket_policy(Bucket="pol-deny", Policy=policy(
        "pol-deny", allow("pol-deny", action="s3:GetObject"),
        allow("pol-deny", action="s3:GetObject", effect="Deny",
              resources="arn:aws:s3:::pol-deny/secret/*")))
    assert alt.get_object(Bucket="pol-deny", Key="open/a")["Body"].read() == b"open/a"
    denied(alt.get_object, Bucket="pol-deny", Key="secret/a")
    denied(s3.get_object, Bucket="pol-deny", Key="secret/a")  # the owner too
    assert s3.get_object(Bucket="pol-deny", Key="open/a")["Body"].read() == b"open/a"


def test_owner_keeps_its_policy(s3):
    s3.create_bucket(Bucket="pol-lockout")
    s3.put_object(Bucket="pol-lockout", Key="k", Body=b"x")
    s3.put_bucket_policy(Bucket="pol-lockout", Policy=policy("pol-lockout", allow(
        "pol-lockout", action="*", effect="Deny")))
    denied(s3.get_object, Bucket="pol-lockout", Key="k")
    denied(s3.list_objects, Bucket="pol-lockout")
    assert "Deny" in s3.get_bucket_policy(Bucket="pol-lockout")["Policy"]
    s3.delete_bucket_policy(Bucket="pol-lockout")
    assert s3.get_object(Bucket="pol-lockout", Key="k")["Body"].read() == b"x"


def test_conditions(s3, alt):
    s3.create_bucket(Bucket="pol-cond")
    s3.put_object(Bucket="pol-cond", Key="public/a", Body=b"a")
    s3.put_bucket_policy(Bucket="pol-cond", Policy=policy(
        "pol-cond",
        allow("pol-cond", action="s3:PutObject", resources="arn:aws:s3:::pol-cond/*"),
        allow("pol-cond", action="s3:PutObject", effect="Deny",
              resources="arn:aws:s3:::pol-cond/*",
              Condition={"StringLike": {"s3:x-amz-acl": "public*"}}),
        allow("pol-cond", resources="arn:aws:s3:::pol-cond",
              Condition={"StringEquals": {"s3:prefix": "public/"}})))
    alt.put_object(Bucket="pol-cond", Key="private-key", Body=b"p")
    assert s3.get_object(Bucket="pol-cond", Key="private-key")["Body"].read() == b"p"
    denied(alt.put_object, Bucket="pol-cond", Key="public-key", Body=b"p", ACL="public-read")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="pol-cond", Key="public-key")
    assert code_of(exc)[0] == 404  # refused: nothing stored
    listed = alt.list_objects(Bucket="pol-cond", Prefix="public/")
    assert [o["Key"] for o in listed["Contents"]] == ["public/a"]
    denied(alt.list_objects, Bucket="pol-cond")
    denied(alt.list_objects, Bucket="pol-cond", Prefix="private")


def test_copy_source_condition(s3, alt):
    s3.create_bucket(Bucket="pol-src")
    s3.create_bucket(Bucket="pol-dst")
    for key in ("public/a", "private/a"):
        s3.put_object(Bucket="pol-src", Key=key, Body=key.encode())
    s3.put_bucket_policy(Bucket="pol-src", Policy=policy("pol-src", allow(
        "pol-src", action="s3:GetObject", resources="arn:aws:s3:::pol-src/*")))
    s3.put_bucket_policy(Bucket="pol-dst", Policy=policy("pol-dst", allow(
        "pol-dst", action="s3:PutObject", resources="arn:aws:s3:::pol-dst/*",
        Condition={"StringLike": {"s3:x-amz-copy-source": "pol-src/public/*"}})))
    alt.copy_object(Bucket="pol-dst", Key="copy", CopySource={"Bucket": "pol-src",
                                                              "Key": "public/a"})
    assert s3.get_object(Bucket="pol-dst", Key="copy")["Body"].read() == b"public/a"
    denied(alt.copy_object, Bucket="pol-dst", Key="copy2",
           CopySource={"Bucket": "pol-src", "Key": "private/a"})
    denied(alt.put_object, Bucket="pol-dst", Key="plain", Body=b"x")


def test_missing_key_404_only_for_listers(s3, alt):
    s3.create_bucket(Bucket="pol-head")
    s3.put_bucket_policy(Bucket="pol-head", Policy=policy("pol-head", allow(
        "pol-head", resources="arn:aws:s3:::pol-head",
        Condition={"StringLike": {"s3:prefix": "public/*"}})))
    with pytest.raises(ClientError) as exc:
        alt.head_object(Bucket="pol-head", Key="public/none")
    assert code_of(exc)[0] == 404
    with pytest.raises(ClientError) as exc:
        alt.head_object(Bucket="pol-head", Key="private/none")
    assert code_of(exc)[0] == 403
    # An object that exists is not readable through a listing grant.
    s3.put_object(Bucket="pol-head", Key="public/there", Body=b"x")
    with pytest.raises(ClientError) as exc:
        alt.get_object(Bucket="pol-head", Key="public/there")
    assert code_of(exc)[0] == 403


def test_upload_part_copy_from_another_account(s3, alt):
    s3.create_bucket(Bucket="pol-partsrc")
    for key in ("public/a", "private/a"):
        s3.put_object(Bucket="pol-partsrc", Key=key, Body=key.encode() * 10)
    s3.put_bucket_policy(Bucket="pol-partsrc", Policy=policy("pol-partsrc", allow(
        "pol-partsrc", action="s3:GetObject", resources="arn:aws:s3:::pol-partsrc/public/*")))
    alt.create_bucket(Bucket="pol-partdst")
    upload = alt.create_multipart_upload(Bucket="pol-partdst", Key="k")["UploadId"]
    part = alt.upload_part_copy(Bucket="pol-partdst", Key="k", UploadId=upload, PartNumber=1,
                                CopySource={"Bucket": "pol-partsrc", "Key": "public/a"})
    denied(alt.upload_part_copy, Bucket="pol-partdst", Key="k", UploadId=upload,
           PartNumber=2, CopySource={"Bucket": "pol-partsrc", "Key": "private/a"})
    alt.complete_multipart_upload(Bucket="pol-partdst", Key="k", UploadId=upload,
                                  MultipartUpload={"Parts": [{
                                      "PartNumber": 1,
                                      "ETag": part["CopyPartResult"]["ETag"]}]})
    assert alt.get_object(Bucket="pol-partdst", Key="k")["Body"].read() == b"public/a" * 10


def test_block_public_policy(s3):
    s3.create_bucket(Bucket="pol-block")
    s3.put_public_access_block(Bucket="pol-block", PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": False, "BlockPublicPolicy": True,
        "RestrictPublicBuckets": False})
    denied(s3.put_bucket_policy, Bucket="pol-block", Policy=policy("pol-block", allow(
        "pol-block", action="s3:GetObject")))
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_policy(Bucket="pol-block")
    assert code_of(exc) == (404, "NoSuchBucketPolicy")  # nothing stored
    private = policy("pol-block", allow("pol-block", action="s3:GetObject",
                                        principal={"AWS": "arn:aws:iam::test2:root"}))
    s3.put_bucket_policy(Bucket="pol-block", Policy=private)
    assert s3.get_bucket_policy(Bucket="pol-block")["Policy"] == private


def test_restrict_public_buckets(s3, alt, anon):
    s3.create_bucket(Bucket="pol-restrict")
    s3.put_object(Bucket="pol-restrict", Key="k", Body=b"r")
    s3.put_bucket_policy(Bucket="pol-restrict", Policy=policy("pol-restrict", allow(
        "pol-restrict", action="s3:GetObject")))
    assert anon.get_object(Bucket="pol-restrict", Key="k")["Body"].read() == b"r"
    assert alt.get_object(Bucket="pol-restrict", Key="k")["Body"].read() == b"r"
    s3.put_public_access_block(Bucket="pol-restrict", PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
        "RestrictPublicBuckets": True})
    denied(anon.get_object, Bucket="pol-restrict", Key="k")
    denied(alt.get_object, Bucket="pol-restrict", Key="k")
    assert s3.get_object(Bucket="pol-restrict", Key="k")["Body"].read() == b"r"


def test_tenant_names(s3, cluster):
    """RGW's `<tenant>:<bucket>` and `:<bucket>` name a bucket of that account (or any)."""
    alt = client(cluster, "test2:tester2", "testing2")
    alt.meta.events.unregister("before-parameter-build.s3", validate_bucket_name)
    s3.create_bucket(Bucket="pol-tenant")
    s3.put_object(Bucket="pol-tenant", Key="k", Body=b"t")
    s3.put_bucket_policy(Bucket="pol-tenant", Policy=policy("pol-tenant", allow("pol-tenant")))
    for name in ("test:pol-tenant", ":pol-tenant"):
        assert [o["Key"] for o in alt.list_objects(Bucket=name)["Contents"]] == ["k"]
    with pytest.raises(ClientError) as exc:
        alt.list_objects(Bucket="test2:pol-tenant")  # not that account's bucket
    assert code_of(exc) == (404, "NoSuchBucket")


def test_delete_objects_judged_key_by_key(s3):
    s3.create_bucket(Bucket="pol-multidel")
    for key in ("open/a", "secret/a"):
        s3.put_object(Bucket="pol-multidel", Key=key, Body=b"x")
    s3.put_bucket_policy(Bucket="pol-multidel", Policy=policy("pol-multidel", allow(
        "pol-multidel", action="s3:DeleteObject", effect="Deny",
        resources="arn:aws:s3:::pol-multidel/secret/*")))
    out = s3.delete_objects(Bucket="pol-multidel", Delete={"Objects": [
        {"Key": "open/a"}, {"Key": "secret/a"}]})
    assert [d["Key"] for d in out["Deleted"]] == ["open/a"]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("secret/a", "AccessDenied")]
    assert s3.get_object(Bucket="pol-multidel", Key="secret/a")["Body"].read() == b"x"
    denied(s3.delete_object, Bucket="pol-multidel", Key="secret/a")


def test_delete_objects_granted_by_policy(s3, alt):
    s3.create_bucket(Bucket="pol-multidel2")
    for key in ("tmp/a", "keep/a"):
        s3.put_object(Bucket="pol-multidel2", Key=key, Body=b"x")
    s3.put_bucket_policy(Bucket="pol-multidel2", Policy=policy("pol-multidel2", allow(
        "pol-multidel2", action="s3:DeleteObject", principal={"AWS": "test2"},
        resources="arn:aws:s3:::pol-multidel2/tmp/*")))
    out = alt.delete_objects(Bucket="pol-multidel2", Delete={"Objects": [
        {"Key": "tmp/a"}, {"Key": "keep/a"}]})
    assert [d["Key"] for d in out["Deleted"]] == ["tmp/a"]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("keep/a", "AccessDenied")]
    assert [o["Key"] for o in s3.list_objects(Bucket="pol-multidel2")["Contents"]] == \
        ["keep/a"]
