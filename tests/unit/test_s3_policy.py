"""The bucket-policy language: what parse refuses, how evaluate decides, what is public,
and how a policy is stored in container sysmeta."""

from __future__ import annotations

import json

import pytest

from swiftlite.proxy.s3 import operations
from swiftlite.proxy.s3.access import action_of
from swiftlite.proxy.s3.errors import S3Error
from swiftlite.proxy.s3.policy import CHUNK, CHUNKS, decode, encode
from swiftlite.proxy.s3.policy_lang import (
    ANONYMOUS,
    MAX_POLICY,
    Principal,
    arn_of,
    evaluate,
    is_public,
    may_allow,
    parse,
)

OWNER = Principal("test", "test:tester")
ALT = Principal("test2", "test2:tester2")
BUCKET = "bkt"


def doc(*statements: dict, **top) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements), **top})


def stmt(action="s3:GetObject", resource=f"arn:aws:s3:::{BUCKET}/*", effect="Allow",
         principal="*", **extra) -> dict:
    out = {"Effect": effect, "Principal": principal, "Action": action,
           "Resource": resource}
    out.update(extra)
    return out


def decide(text: str, who=ALT, action="s3:GetObject", key: str | None = "k", ctx=None):
    return evaluate(parse(text, BUCKET), who, action, arn_of(BUCKET, key), ctx or {})


def malformed(text, bucket=BUCKET) -> str:
    with pytest.raises(S3Error) as exc:
        parse(text, bucket)
    assert (exc.value.status, exc.value.code) == (400, "MalformedPolicy")
    return exc.value.message


# ---- parse ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "", "{", "[]", '"x"', "null", b"\xff\xfe",
    json.dumps({"Version": "2012-10-17"}),  # no statement
    json.dumps({"Version": "2012-10-17", "Statement": []}),
    doc(stmt(), Extra=1),  # unknown top-level field
    json.dumps({"Version": "2001-01-01", "Statement": [stmt()]}),
    doc(stmt(effect="allow")),  # effect is case-sensitive
    doc(stmt(effect="Maybe")),
    doc({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bkt/*"}),
    doc(stmt(action="s3:GetObjekt")),  # unknown action
    doc(stmt(action="iam:CreateUser")),
    doc(stmt(action=[])),
    doc(stmt(resource="arn:aws:s3:::other/*")),  # another bucket
    doc(stmt(resource=["arn:aws:s3:::bkt", "arn:aws:s3:::bkt2/*"])),
    doc(stmt(resource="bkt/*")),
    doc(stmt(principal={"Nobody": "x"})),
    doc(stmt(principal="someone")),
    doc(stmt(Condition={"StringEqualz": {"s3:prefix": "a"}})),
    doc(stmt(Condition={"StringEquals": {"s3:prefix": {"a": 1}}})),
    doc(stmt(Condition={"IpAddress": {"aws:SourceIp": "not-an-ip"}})),
    doc(stmt(Condition={"NumericLessThan": {"s3:max-keys": "ten"}})),
    doc(stmt(Condition={"ForSomeValues:StringEquals": {"s3:prefix": "a"}})),
    doc(stmt(Sid="a"), stmt(Sid="a")),  # Sids must be unique
    doc(stmt(Unknown="x")),
])
def test_parse_refuses(text):
    malformed(text)


def test_notprincipal_allow_is_refused():
    st = stmt()
    del st["Principal"]
    st["NotPrincipal"] = {"AWS": "arn:aws:iam::s3tenant1:root"}
    malformed(doc(st))
    st["Effect"] = "Deny"
    parse(doc(st), BUCKET)


def test_size_limit():
    big = doc(stmt(Sid="x" * (MAX_POLICY - 100)))
    assert len(big) > MAX_POLICY
    assert "20 KB" in malformed(big)
    assert "20 KB" in malformed(big.encode())


def test_parse_accepts_common_forms():
    for text in (
        doc(stmt()),
        json.dumps({"Statement": stmt()}),  # one statement, no version
        doc(stmt(principal={"AWS": ["arn:aws:iam::test2:root", "test3"]})),
        doc(stmt(principal={"CanonicalUser": "test2:tester2"})),
        doc(stmt(action="*", resource=["arn:aws:s3:::*", "arn:aws:s3:::*/*"])),
        doc(stmt(action=["s3:Get*", "s3:listbucket"], resource="arn:aws:s3:::bk?")),
        doc(stmt(Condition={"StringLikeIfExists": {"aws:Referer": "http://x/*"},
                            "NumericLessThan": {"s3:max-keys": 10},
                            "Bool": {"aws:SecureTransport": False},
                            "ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}})),
    ):
        assert parse(text, BUCKET).text == text


# ---- evaluate ------------------------------------------------------------------------------

def test_principals():
    everyone = doc(stmt())
    assert decide(everyone, ALT) == "Allow"
    assert decide(everyone, ANONYMOUS) == "Allow"
    aws_star = doc(stmt(principal={"AWS": "*"}))
    assert decide(aws_star, ANONYMOUS) == "Allow"
    account = doc(stmt(principal={"AWS": "arn:aws:iam::test2:root"}))
    assert decide(account, ALT) == "Allow"
    assert decide(account, Principal("test2", "test2:other")) == "Allow"
    assert decide(account, OWNER) is None
    assert decide(account, ANONYMOUS) is None
    bare = doc(stmt(principal={"AWS": "test2"}))
    assert decide(bare, ALT) == "Allow" and decide(bare, OWNER) is None
    user = doc(stmt(principal={"AWS": "arn:aws:iam::test2:user/tester2"}))
    assert decide(user, ALT) == "Allow"
    assert decide(user, Principal("test2", "test2:other")) is None
    assert decide(user, Principal("test3", "test3:tester2")) is None
    canonical = doc(stmt(principal={"CanonicalUser": "test2:tester2"}))
    assert decide(canonical, ALT) == "Allow" and decide(canonical, OWNER) is None
    # "Service" principals are no user of ours.
    assert decide(doc(stmt(principal={"Service": "*.amazonaws.com"})), ALT) is None


def test_actions_and_wildcards():
    text = doc(stmt(action=["s3:Get*", "s3:ListBucket"],
                    resource=["arn:aws:s3:::bkt", "arn:aws:s3:::bkt/*"]))
    assert decide(text, action="s3:GetObject") == "Allow"
    assert decide(text, action="s3:getobjecttagging") == "Allow"  # case-insensitive
    assert decide(text, action="s3:ListBucket", key=None) == "Allow"
    assert decide(text, action="s3:PutObject") is None
    assert decide(doc(stmt(action="*")), action="s3:DeleteObject") == "Allow"
    assert decide(doc(stmt(action="s3:*")), action="s3:DeleteObject") == "Allow"
    not_action = doc({"Effect": "Deny", "Principal": "*", "NotAction": "s3:GetObject",
                      "Resource": "arn:aws:s3:::bkt/*"})
    assert decide(not_action, action="s3:GetObject") is None
    assert decide(not_action, action="s3:PutObject") == "Deny"


def test_resources():
    text = doc(stmt(resource="arn:aws:s3:::bkt/public/*"))
    assert decide(text, key="public/a") == "Allow"
    assert decide(text, key="public/a/b") == "Allow"
    assert decide(text, key="private/a") is None
    assert decide(text, key=None) is None  # the bucket is not its objects
    bucket_only = doc(stmt(action="s3:PutObject", resource="arn:aws:s3:::bkt"))
    assert decide(bucket_only, action="s3:PutObject", key="k") is None
    one_key = doc(stmt(resource="arn:aws:s3:::bkt/k?y"))
    assert decide(one_key, key="key") == "Allow" and decide(one_key, key="keys") is None
    not_resource = doc({"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                        "NotResource": "arn:aws:s3:::bkt/public/*"})
    assert decide(not_resource, key="public/x") is None
    assert decide(not_resource, key="secret") == "Deny"
    variable = doc(stmt(resource="arn:aws:s3:::bkt/home/${aws:username}/*"))
    assert decide(variable, key="home/tester2/f", ctx={"aws:username": "tester2"}) == "Allow"
    assert decide(variable, key="home/other/f", ctx={"aws:username": "tester2"}) is None
    assert decide(variable, key="home/x/f") is None  # no such key: matches nothing
    # A value with wildcards is taken literally once substituted.
    assert decide(variable, key="home/a/f", ctx={"aws:username": "*"}) is None


def test_deny_beats_allow():
    text = doc(stmt(), stmt(effect="Deny", resource="arn:aws:s3:::bkt/secret/*"))
    assert decide(text, key="open") == "Allow"
    assert decide(text, key="secret/x") == "Deny"
    assert decide(doc(stmt(effect="Deny"), stmt()), key="k") == "Deny"
    not_principal = doc({"Effect": "Deny", "NotPrincipal": {"AWS": "arn:aws:iam::test:root"},
                         "Action": "s3:*", "Resource": "arn:aws:s3:::bkt/*"}, stmt())
    assert decide(not_principal, OWNER) == "Allow"
    assert decide(not_principal, ALT) == "Deny"
    assert decide(not_principal, ANONYMOUS) == "Deny"


def test_string_conditions():
    equals = doc(stmt(Condition={"StringEquals": {"s3:ExistingObjectTag/security":
                                                  "public"}}))
    assert decide(equals, ctx={"s3:existingobjecttag/security": "public"}) == "Allow"
    assert decide(equals, ctx={"s3:existingobjecttag/security": "private"}) is None
    assert decide(equals, ctx={"s3:existingobjecttag/Security": "public"}) is None
    assert decide(equals) is None  # the key is missing
    like = doc(stmt(action="s3:PutObject",
                    Condition={"StringLike": {"s3:x-amz-copy-source": "src/public/*"}}))
    assert decide(like, action="s3:PutObject",
                  ctx={"s3:x-amz-copy-source": "src/public/a"}) == "Allow"
    assert decide(like, action="s3:PutObject",
                  ctx={"s3:x-amz-copy-source": "src/private/a"}) is None
    not_equals = doc(stmt(Condition={"StringNotEquals": {"s3:x-amz-acl": ["public-read",
                                                                          "public-read-write"]}}))
    assert decide(not_equals, ctx={"s3:x-amz-acl": "private"}) == "Allow"
    assert decide(not_equals, ctx={"s3:x-amz-acl": "public-read"}) is None
    assert decide(not_equals) == "Allow"  # a missing key is "not equal"
    ignore_case = doc(stmt(Condition={"StringEqualsIgnoreCase": {"s3:x-amz-acl": "PRIVATE"}}))
    assert decide(ignore_case, ctx={"s3:x-amz-acl": "private"}) == "Allow"
    if_exists = doc(stmt(Condition={"StringLikeIfExists": {"aws:Referer": "http://a/*"}}))
    assert decide(if_exists) == "Allow"
    assert decide(if_exists, ctx={"aws:referer": "http://a/x"}) == "Allow"
    assert decide(if_exists, ctx={"aws:referer": "http://b/x"}) is None
    # Every operator and every key must hold (and), any listed value may (or).
    both = doc(stmt(Condition={"StringEquals": {"s3:x-amz-acl": ["a", "b"],
                                                "s3:x-amz-metadata-directive": "COPY"}}))
    assert decide(both, ctx={"s3:x-amz-acl": "b",
                             "s3:x-amz-metadata-directive": "COPY"}) == "Allow"
    assert decide(both, ctx={"s3:x-amz-acl": "b"}) is None


def test_deny_with_condition():
    text = doc(stmt(action="s3:PutObject"),
               stmt(action="s3:PutObject", effect="Deny",
                    Condition={"StringLike": {"s3:x-amz-acl": "public*"}}))
    assert decide(text, action="s3:PutObject") == "Allow"
    assert decide(text, action="s3:PutObject", ctx={"s3:x-amz-acl": "private"}) == "Allow"
    assert decide(text, action="s3:PutObject", ctx={"s3:x-amz-acl": "public-read"}) == "Deny"


def test_other_conditions():
    ip = doc(stmt(Condition={"IpAddress": {"aws:SourceIp": ["10.0.0.0/8", "::1/128"]}}))
    assert decide(ip, ctx={"aws:sourceip": "10.1.2.3"}) == "Allow"
    assert decide(ip, ctx={"aws:sourceip": "::1"}) == "Allow"
    assert decide(ip, ctx={"aws:sourceip": "127.0.0.1"}) is None
    assert decide(ip, ctx={"aws:sourceip": "garbage"}) is None
    not_ip = doc(stmt(effect="Deny", Condition={"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}))
    assert decide(not_ip, ctx={"aws:sourceip": "127.0.0.1"}) == "Deny"
    assert decide(not_ip, ctx={"aws:sourceip": "10.0.0.1"}) is None
    numeric = doc(stmt(action="s3:ListBucket", resource="arn:aws:s3:::bkt",
                       Condition={"NumericLessThanEquals": {"s3:max-keys": "10"}}))
    assert decide(numeric, action="s3:ListBucket", key=None, ctx={"s3:max-keys": "5"}) == "Allow"
    assert decide(numeric, action="s3:ListBucket", key=None, ctx={"s3:max-keys": "50"}) is None
    assert decide(numeric, action="s3:ListBucket", key=None, ctx={"s3:max-keys": "x"}) is None
    secure = doc(stmt(effect="Deny", Condition={"Bool": {"aws:SecureTransport": "false"}}))
    assert decide(secure, ctx={"aws:securetransport": "false"}) == "Deny"
    assert decide(secure, ctx={"aws:securetransport": "true"}) is None
    null = doc(stmt(effect="Deny", Condition={"Null": {"s3:x-amz-server-side-encryption":
                                                       "true"}}))
    assert decide(null) == "Deny"
    assert decide(null, ctx={"s3:x-amz-server-side-encryption": "AES256"}) is None
    dates = doc(stmt(Condition={"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}))
    assert decide(dates, ctx={"aws:currenttime": "2026-01-01T00:00:00Z"}) == "Allow"
    assert decide(dates, ctx={"aws:currenttime": "2031-01-01T00:00:00Z"}) is None
    all_values = doc(stmt(Condition={"ForAllValues:StringEquals":
                                     {"s3:RequestObjectTagKeys": ["a", "b"]}}))
    assert decide(all_values, ctx={"s3:requestobjecttagkeys": ["a"]}) == "Allow"
    assert decide(all_values, ctx={"s3:requestobjecttagkeys": ["a", "c"]}) is None
    assert decide(all_values) == "Allow"  # nothing to check: vacuously true, as in AWS
    any_value = doc(stmt(Condition={"ForAnyValue:StringEquals":
                                    {"s3:RequestObjectTagKeys": ["a", "b"]}}))
    assert decide(any_value, ctx={"s3:requestobjecttagkeys": ["c", "b"]}) == "Allow"
    assert decide(any_value, ctx={"s3:requestobjecttagkeys": ["c"]}) is None
    assert decide(any_value) is None


def test_may_allow():
    text = parse(doc(stmt(action="s3:DeleteObject", principal={"AWS": "test2"},
                          resource="arn:aws:s3:::bkt/tmp/*")), BUCKET)
    assert may_allow(text, ALT, "s3:DeleteObject")
    assert not may_allow(text, OWNER, "s3:DeleteObject")
    assert not may_allow(text, ALT, "s3:PutObject")
    assert not may_allow(parse(doc(stmt(effect="Deny")), BUCKET), ALT, "s3:GetObject")


def test_no_policy_says_nothing():
    assert evaluate(None, ALT, "s3:GetObject", arn_of(BUCKET, "k")) is None


# ---- public or not -------------------------------------------------------------------------

def test_is_public():
    assert is_public(parse(doc(stmt()), BUCKET))
    assert is_public(parse(doc(stmt(principal={"AWS": "*"})), BUCKET))
    assert is_public(parse(doc(stmt(principal={"AWS": "arn:aws:iam::*:root"})), BUCKET))
    assert not is_public(parse(doc(stmt(effect="Deny")), BUCKET))
    assert not is_public(parse(doc(stmt(principal={"AWS": "arn:aws:iam::s3tenant1:root"})),
                               BUCKET))
    assert not is_public(parse(doc(stmt(Condition={"IpAddress": {"aws:SourceIp":
                                                                 "10.0.0.0/32"}})), BUCKET))
    # A condition that pins nothing leaves it public.
    assert is_public(parse(doc(stmt(Condition={"IpAddress": {"aws:SourceIp": "0.0.0.0/0"}})),
                           BUCKET))
    assert is_public(parse(doc(stmt(Condition={"StringLike": {"s3:prefix": "public/*"}})),
                           BUCKET))
    assert not is_public(None)


# ---- storage and actions -------------------------------------------------------------------

def test_encode_decode_round_trip():
    for text in ("{}", "é" * 10, "x" * MAX_POLICY, '{\n  "a": "\\u0000"\n}'):
        headers = encode(text)
        assert len(headers) == CHUNKS
        assert all(len(v) <= CHUNK for v in headers.values())
        assert decode({k.lower(): v for k, v in headers.items()}) == text
    assert decode({}) is None
    assert decode(dict.fromkeys(encode("x"), "")) is None  # deleted: every chunk empty
    assert decode({next(iter(encode("x"))): "!!not base64"}) is None


def test_action_of():
    """The actions a policy names for the requests it judges (access.py's table)."""
    assert operations  # its routes decide which query parameter is the sub-resource
    assert action_of("bucket", "GET", {}) == "s3:ListBucket"
    assert action_of("bucket", "GET", {"list-type": "2"}) == "s3:ListBucket"
    assert action_of("bucket", "HEAD", {}) == "s3:ListBucket"
    assert action_of("bucket", "GET", {"versions": ""}) == "s3:ListBucketVersions"
    assert action_of("bucket", "PUT", {"policy": ""}) == "s3:PutBucketPolicy"
    assert action_of("bucket", "DELETE", {"policy": ""}) == "s3:DeleteBucketPolicy"
    assert action_of("bucket", "DELETE", {"tagging": ""}) == "s3:PutBucketTagging"
    assert action_of("bucket", "GET", {"publicAccessBlock": ""}) == \
        "s3:GetBucketPublicAccessBlock"
    assert action_of("object", "GET", {}) == "s3:GetObject"
    assert action_of("object", "HEAD", {"versionId": "v1"}) == "s3:GetObjectVersion"
    assert action_of("object", "POST", {"uploads": ""}) == "s3:PutObject"
    assert action_of("object", "PUT", {"partNumber": "1", "uploadId": "u"}) == "s3:PutObject"
    assert action_of("object", "DELETE", {"uploadId": "u"}) == "s3:AbortMultipartUpload"
    assert action_of("object", "GET", {"uploadId": "u"}) == "s3:ListMultipartUploadParts"
    assert action_of("object", "GET", {"acl": ""}) == "s3:GetObjectAcl"
