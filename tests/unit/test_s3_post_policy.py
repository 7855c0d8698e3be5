"""POST Object policies (s3/postform.py): the document's shape, and the conditions a form's
fields must meet."""

from __future__ import annotations

import base64
import json
import time

import pytest

from swiftlite.proxy.s3.errors import S3Error
from swiftlite.proxy.s3.postform import Policy

# Far enough ahead that a long suite run (collected long before this test runs) stays inside it.
LATER = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7 * 86400))


def policy(doc: object) -> Policy:
    return Policy(base64.b64encode(json.dumps(doc).encode()).decode(), time.time())


def refusal(doc: object, fields: dict[str, str] | None = None) -> tuple[int, str]:
    with pytest.raises(S3Error) as exc:
        policy(doc).check(fields or {})
    return exc.value.status, exc.value.code


def test_conditions_hold():
    p = policy({"expiration": LATER, "conditions": [
        {"BuCkEt": "b"}, ["StArTs-WiTh", "$KEY", "user/"], ["eq", "$acl", "private"],
        ["content-length-range", 1, "10"], ["starts-with", "$x-amz-meta-tag", ""]]})
    p.check({"bucket": "b", "key": "user/a", "acl": "private", "x-amz-meta-tag": "v",
             "x-ignore-me": "1", "x-amz-checksum-crc32": "AAAAAA==", "policy": "..."})
    assert p.length_range == (1, 10)


@pytest.mark.parametrize("doc", [
    {"conditions": []},
    {"EXPIRATION": LATER, "conditions": []},
    {"expiration": "2030-01-01 00:00:00+00:00", "conditions": []},
    {"expiration": LATER},
    {"expiration": LATER, "CONDITIONS": []},
    {"expiration": LATER, "conditions": [{}]},
    {"expiration": LATER, "conditions": [["content-length-range", 0]]},
    {"expiration": LATER, "conditions": [["content-length-range", -1, 0]]},
    {"expiration": LATER, "conditions": [["content-length-range", 5, 1]]},
    {"expiration": LATER, "conditions": [["matches", "$key", "x"]]},
    {"expiration": LATER, "conditions": [["eq", "key", "x"]]},
    [1, 2],
])
def test_malformed_policies(doc):
    assert refusal(doc) == (400, "InvalidPolicyDocument")


def test_expired_policy_is_denied():
    earlier = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    assert refusal({"expiration": earlier, "conditions": []}) == (403, "AccessDenied")


@pytest.mark.parametrize("fields", [
    {"key": "other/a"},  # starts-with fails
    {"key": "user/a", "x-amz-meta-foo": "1"},  # a field no condition names
    {},  # a named field missing
    {"key": "User/a"},  # values are case-sensitive
])
def test_failed_conditions_are_denied(fields):
    doc = {"expiration": LATER, "conditions": [["starts-with", "$key", "user/"]]}
    assert refusal(doc, fields) == (403, "AccessDenied")


def test_empty_starts_with_matches_an_absent_field():
    """["starts-with", "$f", ""] is "any value": a form without the field meets it too, while
    an `eq` on an absent field, even to "", and a non-empty prefix still fail."""
    conds = [["starts-with", "$key", "user/"], ["starts-with", "$x-amz-server-side-encryption", ""]]
    doc = {"expiration": LATER, "conditions": conds}
    policy(doc).check({"key": "user/a"})
    policy(doc).check({"key": "user/a", "x-amz-server-side-encryption": "AES256"})
    assert refusal({"expiration": LATER, "conditions": [["eq", "$acl", ""]]},
                   {}) == (403, "AccessDenied")
    assert refusal({"expiration": LATER, "conditions": [["starts-with", "$acl", "p"]]},
                   {}) == (403, "AccessDenied")
