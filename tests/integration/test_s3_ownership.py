"""S3 Object Ownership through boto3 with two accounts: who owns an object another account
writes into a bucket it does not own (ObjectWriter, BucketOwnerPreferred,
BucketOwnerEnforced), the ACLs BucketOwnerEnforced refuses (storing nothing), and that an
object's ACL is its owner's: the bucket's owner (or a policy's grantee) reads or changes the
ACL of an object another account owns only as that ACL grants, while it still reads and
deletes the object itself."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of, log_text

OWNER = "test:tester"
ALT = "test2:tester2"
THIRD = "test5:tester5"


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


@pytest.fixture(scope="module")
def alt(cluster):
    """Another account's admin (test2)."""
    return client(cluster, user=ALT, key="testing2")


@pytest.fixture(scope="module")
def third(cluster):
    """A third account's user."""
    return client(cluster, user=THIRD, key="testing5")


def refused(fn, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises(ClientError) as exc:
        fn(*args, **kwargs)
    return code_of(exc)


def open_bucket(s3, name: str, actions, ownership: str | None = None,
                principals=None) -> None:
    """A bucket of the main user whose policy allows `actions` on its objects to the
    accounts named (default: test2)."""
    if ownership is None:
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, ObjectOwnership=ownership)
    arns = [f"arn:aws:iam::{p}:root" for p in (principals or ["test2"])]
    s3.put_bucket_policy(Bucket=name, Policy=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": arns}, "Action": actions,
                       "Resource": [f"arn:aws:s3:::{name}/*"]}]}))


def owner_of(c, bucket: str, key: str) -> str:
    return c.get_object_acl(Bucket=bucket, Key=key)["Owner"]["ID"]


def grants_of(resp) -> set[tuple[str, str]]:
    return {(g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"])
            for g in resp["Grants"]}


def missing(c, bucket: str, key: str) -> bool:
    return refused(c.head_object, Bucket=bucket, Key=key)[0] == 404


# ---- ObjectWriter (the default) ------------------------------------------------------------

def test_object_writer_owns_what_it_writes(s3, alt):
    open_bucket(s3, "own-writer", ["s3:PutObject"])
    alt.put_object(Bucket="own-writer", Key="plain", Body=b"alt's")
    assert owner_of(alt, "own-writer", "plain") == ALT
    assert grants_of(alt.get_object_acl(Bucket="own-writer", Key="plain")) == \
        {(ALT, "FULL_CONTROL")}
    # The bucket's owner may not read or change the ACL of an object it does not own...
    assert refused(s3.get_object_acl, Bucket="own-writer", Key="plain") == \
        (403, "AccessDenied")
    assert refused(s3.put_object_acl, Bucket="own-writer", Key="plain",
                   ACL="public-read") == (403, "AccessDenied")
    assert grants_of(alt.get_object_acl(Bucket="own-writer", Key="plain")) == \
        {(ALT, "FULL_CONTROL")}  # unchanged
    # ... but still reads and deletes the object itself, which lies in its bucket.
    assert s3.get_object(Bucket="own-writer", Key="plain")["Body"].read() == b"alt's"
    s3.delete_object(Bucket="own-writer", Key="plain")
    assert missing(s3, "own-writer", "plain")


def test_object_writer_bucket_owner_full_control_grants_the_acl(s3, alt):
    open_bucket(s3, "own-writer-bofc", ["s3:PutObject"])
    alt.put_object(Bucket="own-writer-bofc", Key="k", Body=b"x",
                   ACL="bucket-owner-full-control")
    # The writer keeps the object, the bucket's owner holds full control of it.
    got = s3.get_object_acl(Bucket="own-writer-bofc", Key="k")
    assert got["Owner"]["ID"] == ALT
    assert grants_of(got) == {(ALT, "FULL_CONTROL"), (OWNER, "FULL_CONTROL")}
    s3.put_object_acl(Bucket="own-writer-bofc", Key="k", ACL="bucket-owner-read")
    assert grants_of(alt.get_object_acl(Bucket="own-writer-bofc", Key="k")) == \
        {(ALT, "FULL_CONTROL"), (OWNER, "READ")}
    # That grant is the owner's READ now: no more WRITE_ACP, nor READ_ACP.
    assert refused(s3.get_object_acl, Bucket="own-writer-bofc", Key="k")[0] == 403


def test_grant_header_read_acp_only(s3, alt):
    open_bucket(s3, "own-writer-grant", ["s3:PutObject"])
    alt.put_object(Bucket="own-writer-grant", Key="k", Body=b"x",
                   GrantReadACP=f'id="{OWNER}"', GrantFullControl=f'id="{ALT}"')
    assert grants_of(s3.get_object_acl(Bucket="own-writer-grant", Key="k")) == \
        {(ALT, "FULL_CONTROL"), (OWNER, "READ_ACP")}
    assert refused(s3.put_object_acl, Bucket="own-writer-grant", Key="k",
                   ACL="private") == (403, "AccessDenied")


def test_policy_grants_no_acl_of_another_accounts_object(s3, alt, third):
    """A policy allowing every ACL action to two accounts: each manages the ACL of its own
    objects and of the bucket owner's, never of the other's."""
    open_bucket(s3, "own-policy", ["s3:PutObject", "s3:GetObjectAcl", "s3:PutObjectAcl"],
                principals=["test2", "test5"])
    s3.put_object(Bucket="own-policy", Key="owners", Body=b"o")
    alt.put_object(Bucket="own-policy", Key="alts", Body=b"a")
    assert owner_of(third, "own-policy", "owners") == OWNER  # the policy grants that
    assert refused(third.get_object_acl, Bucket="own-policy", Key="alts") == \
        (403, "AccessDenied")
    assert refused(third.put_object_acl, Bucket="own-policy", Key="alts",
                   ACL="public-read-write") == (403, "AccessDenied")
    assert grants_of(alt.get_object_acl(Bucket="own-policy", Key="alts")) == \
        {(ALT, "FULL_CONTROL")}
    # Its owner may grant it.
    alt.put_object_acl(Bucket="own-policy", Key="alts", GrantRead=f'id="{THIRD}"',
                       GrantFullControl=f'id="{ALT}"')
    assert refused(third.get_object_acl, Bucket="own-policy", Key="alts")[0] == 403
    alt.put_object_acl(Bucket="own-policy", Key="alts", GrantReadACP=f'id="{THIRD}"',
                       GrantFullControl=f'id="{ALT}"')
    assert owner_of(third, "own-policy", "alts") == ALT


# ---- BucketOwnerPreferred ------------------------------------------------------------------

def test_bucket_owner_preferred(s3, alt):
    open_bucket(s3, "own-preferred", ["s3:PutObject"], "BucketOwnerPreferred")
    alt.put_object(Bucket="own-preferred", Key="plain", Body=b"x")
    alt.put_object(Bucket="own-preferred", Key="private", Body=b"x", ACL="private")
    alt.put_object(Bucket="own-preferred", Key="given", Body=b"x",
                   ACL="bucket-owner-full-control")
    assert owner_of(alt, "own-preferred", "plain") == ALT
    assert owner_of(alt, "own-preferred", "private") == ALT
    assert refused(s3.get_object_acl, Bucket="own-preferred", Key="plain")[0] == 403
    # bucket-owner-full-control hands the object over: the writer keeps nothing.
    got = s3.get_object_acl(Bucket="own-preferred", Key="given")
    assert got["Owner"]["ID"] == OWNER
    assert grants_of(got) == {(OWNER, "FULL_CONTROL")}
    assert refused(alt.get_object_acl, Bucket="own-preferred", Key="given")[0] == 403
    # A multipart upload's object: the owner ListParts names is who will own it.
    up = alt.create_multipart_upload(Bucket="own-preferred", Key="mp-given",
                                     ACL="bucket-owner-full-control")
    parts = s3.list_parts(Bucket="own-preferred", Key="mp-given", UploadId=up["UploadId"])
    assert parts["Owner"]["ID"] == OWNER
    up = alt.create_multipart_upload(Bucket="own-preferred", Key="mp-plain")
    parts = s3.list_parts(Bucket="own-preferred", Key="mp-plain", UploadId=up["UploadId"])
    assert parts["Owner"]["ID"] == ALT


# ---- BucketOwnerEnforced -------------------------------------------------------------------

def test_bucket_owner_enforced(s3, alt):
    open_bucket(s3, "own-enforced", ["s3:PutObject", "s3:GetObject"], "BucketOwnerEnforced")
    alt.put_object(Bucket="own-enforced", Key="plain", Body=b"x")
    alt.put_object(Bucket="own-enforced", Key="given", Body=b"x",
                   ACL="bucket-owner-full-control")
    for key in ("plain", "given"):
        got = s3.get_object_acl(Bucket="own-enforced", Key=key)
        assert got["Owner"]["ID"] == OWNER
        assert grants_of(got) == {(OWNER, "FULL_CONTROL")}
    # Full control to the bucket's owner by grant header says the same: accepted.
    alt.put_object(Bucket="own-enforced", Key="granted", Body=b"x",
                   GrantFullControl=f'id="{OWNER}"')
    assert owner_of(s3, "own-enforced", "granted") == OWNER


@pytest.mark.parametrize("acl", [{"ACL": "private"}, {"ACL": "public-read"},
                                 {"GrantRead": f'id="{ALT}"'},
                                 {"GrantFullControl": f'id="{ALT}"'}])
def test_bucket_owner_enforced_refuses_acls(s3, alt, acl):
    name = "own-enf-refuse"
    try:
        s3.head_bucket(Bucket=name)
    except ClientError:
        open_bucket(s3, name, ["s3:PutObject", "s3:GetObject"], "BucketOwnerEnforced")
        s3.put_object(Bucket=name, Key="src", Body=b"source")
    for c in (alt, s3):  # the bucket's owner too: ACLs are off
        assert refused(c.put_object, Bucket=name, Key="new", Body=b"x", **acl) == \
            (400, "AccessControlListNotSupported")
        assert refused(c.copy_object, Bucket=name, Key="new",
                       CopySource={"Bucket": name, "Key": "src"}, **acl) == \
            (400, "AccessControlListNotSupported")
        assert refused(c.create_multipart_upload, Bucket=name, Key="new", **acl) == \
            (400, "AccessControlListNotSupported")
    # Nothing was stored.
    assert missing(s3, name, "new")
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=name)
    assert refused(s3.put_bucket_acl, Bucket=name, **acl) == \
        (400, "AccessControlListNotSupported")
    assert refused(s3.put_object_acl, Bucket=name, Key="src", **acl) == \
        (400, "AccessControlListNotSupported")
    assert grants_of(s3.get_bucket_acl(Bucket=name)) == {(OWNER, "FULL_CONTROL")}
    assert grants_of(s3.get_object_acl(Bucket=name, Key="src")) == {(OWNER, "FULL_CONTROL")}


def test_no_tracebacks(cluster):
    assert "Traceback" not in log_text(cluster)
