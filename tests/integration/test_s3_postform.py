"""S3 POST Object through a real `swiftlite up` proxy: browser-style multipart forms (aiohttp's
FormData, fields before the file) signed with V2 and V4 policies upload objects; a forged
signature, an expired policy, a file outside content-length-range, a key outside its
starts-with condition, a bad checksum or a field no condition names is refused with S3's XML
error and stores nothing (an object already under that key is left as it was). An unsigned
form writes only into a bucket anyone may write to, a signed one only where its signer may."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
import json
import xml.etree.ElementTree as ET

import aiohttp
import pytest
from botocore.exceptions import ClientError
from multidict import CIMultiDict

from tests.integration.s3_support import client

USER, SECRET = "test:tester", "testing"
BUCKET = "postform"


@pytest.fixture(scope="module")
def s3(cluster):
    c = client(cluster)
    c.create_bucket(Bucket=BUCKET)
    return c


def stamp(seconds: int) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def encode(conditions: list, expires_in: int = 600) -> str:
    doc = {"expiration": stamp(expires_in), "conditions": conditions}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def v2_fields(policy: str, secret: str = SECRET) -> dict[str, str]:
    sig = base64.b64encode(hmac.new(secret.encode(), policy.encode(), hashlib.sha1).digest())
    return {"AWSAccessKeyId": USER, "policy": policy, "signature": sig.decode()}


def v4_fields(conditions: list) -> dict[str, str]:
    now = datetime.datetime.now(datetime.UTC)
    date = now.strftime("%Y%m%d")
    credential = f"{USER}/{date}/us-east-1/s3/aws4_request"
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    policy = encode([*conditions, {"x-amz-algorithm": "AWS4-HMAC-SHA256"},
                     {"x-amz-credential": credential}, {"x-amz-date": amz_date}])
    key = ("AWS4" + SECRET).encode()
    for part in (date, "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return {"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": credential,
            "x-amz-date": amz_date, "policy": policy,
            "x-amz-signature": hmac.new(key, policy.encode(), hashlib.sha256).hexdigest()}


def post(cluster, fields: dict[str, str], body: bytes, filename: str = "upload.txt",
         bucket: str = BUCKET) -> tuple[int, CIMultiDict[str], bytes]:
    data = aiohttp.FormData()
    for name, value in fields.items():
        data.add_field(name, value)
    data.add_field("file", body, filename=filename, content_type="application/x-file")

    async def go():
        async with aiohttp.ClientSession() as s, \
                s.post(f"{cluster.proxy_url}/{bucket}", data=data,
                       allow_redirects=False) as resp:
            return resp.status, CIMultiDict(resp.headers), await resp.read()
    return asyncio.run(go())


def error_code(body: bytes) -> str:
    return ET.fromstring(body).findtext("Code") or ""


def missing(s3, key: str) -> bool:
    try:
        s3.head_object(Bucket=BUCKET, Key=key)
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    return False


BASE = [{"bucket": BUCKET}, ["starts-with", "$key", "uploads/"],
        ["starts-with", "$Content-Type", "text/"], ["content-length-range", 0, 8 << 20]]


def test_v2_form_uploads_with_metadata(cluster, s3):
    conditions = [*BASE, ["starts-with", "$x-amz-meta-color", ""], {"acl": "private"}]
    fields = {"key": "uploads/${filename}", "acl": "private", "Content-Type": "text/plain",
              "x-amz-meta-color": "blue", "x-ignore-this": "anything",
              **v2_fields(encode(conditions))}
    status, headers, body = post(cluster, fields, b"hello form", filename="one.txt")
    assert (status, body) == (204, b"")
    got = s3.get_object(Bucket=BUCKET, Key="uploads/one.txt")
    assert got["Body"].read() == b"hello form"
    assert got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"color": "blue"}
    assert headers["ETag"] == got["ETag"]


def test_v4_form_answers_201_with_document(cluster, s3):
    conditions = [*BASE, {"success_action_status": "201"}]
    fields = {"key": "uploads/v4.txt", "Content-Type": "text/plain",
              "success_action_status": "201", **v4_fields(conditions)}
    status, _, body = post(cluster, fields, b"signed with v4")
    assert status == 201
    doc = ET.fromstring(body)
    assert (doc.findtext("Bucket"), doc.findtext("Key")) == (BUCKET, "uploads/v4.txt")
    assert s3.get_object(Bucket=BUCKET, Key="uploads/v4.txt")["Body"].read() == \
        b"signed with v4"


def test_redirect_names_the_object(cluster, s3):
    target = "https://app.example/done?from=form"
    conditions = [*BASE, ["eq", "$success_action_redirect", target]]
    fields = {"key": "uploads/redirected.txt", "Content-Type": "text/plain",
              "success_action_redirect": target, **v2_fields(encode(conditions))}
    status, headers, _ = post(cluster, fields, b"x")
    etag = s3.head_object(Bucket=BUCKET, Key="uploads/redirected.txt")["ETag"].strip('"')
    assert status == 303
    assert headers["Location"] == (f"{target}&bucket={BUCKET}&key=uploads%2Fredirected.txt"
                                   f"&etag=%22{etag}%22")


def test_large_upload_streams(cluster, s3):
    data = bytes(range(256)) * (6 << 12)  # 6 MiB
    fields = {"key": "uploads/big.bin", "Content-Type": "text/plain",
              **v2_fields(encode(BASE))}
    status, _, _ = post(cluster, fields, data)
    assert status == 204
    got = s3.get_object(Bucket=BUCKET, Key="uploads/big.bin")["Body"].read()
    assert hashlib.md5(got).digest() == hashlib.md5(data).digest()


@pytest.fixture
def existing(s3):
    """A key that holds an object already: a refused form must leave it as it was."""
    s3.put_object(Bucket=BUCKET, Key="uploads/kept.txt", Body=b"original")
    yield "uploads/kept.txt"
    assert s3.get_object(Bucket=BUCKET, Key="uploads/kept.txt")["Body"].read() == b"original"


def refused(cluster, s3, fields: dict[str, str], body: bytes = b"new data",
            key: str = "uploads/kept.txt") -> tuple[int, str]:
    fields = {"key": key, "Content-Type": "text/plain", **fields}
    status, _, answer = post(cluster, fields, body)
    return status, error_code(answer)


def test_forged_signature_stores_nothing(cluster, s3, existing):
    assert refused(cluster, s3, v2_fields(encode(BASE), secret="not-the-secret")) == \
        (403, "SignatureDoesNotMatch")
    forged = v4_fields(BASE)
    forged["x-amz-signature"] = "0" * 64
    assert refused(cluster, s3, forged) == (403, "SignatureDoesNotMatch")
    assert refused(cluster, s3, {**v2_fields(encode(BASE)), "AWSAccessKeyId": "no:body"}) \
        == (403, "InvalidAccessKeyId")


def test_expired_policy_stores_nothing(cluster, s3, existing):
    assert refused(cluster, s3, v2_fields(encode(BASE, expires_in=-60))) == \
        (403, "AccessDenied")


def test_file_outside_length_range_stores_nothing(cluster, s3, existing):
    small = [*BASE[:3], ["content-length-range", 10, 1024]]
    assert refused(cluster, s3, v2_fields(encode(small)), b"x" * (2 << 20)) == \
        (400, "EntityTooLarge")
    assert refused(cluster, s3, v2_fields(encode(small)), b"tiny") == (400, "EntityTooSmall")
    assert missing(s3, "uploads/fresh.txt")
    assert refused(cluster, s3, v2_fields(encode(small)), b"y" * 4096,
                   key="uploads/fresh.txt") == (400, "EntityTooLarge")
    assert missing(s3, "uploads/fresh.txt")


def test_key_outside_condition_stores_nothing(cluster, s3, existing):
    assert refused(cluster, s3, v2_fields(encode(BASE)), key="elsewhere/kept.txt") == \
        (403, "AccessDenied")
    assert missing(s3, "elsewhere/kept.txt")


def test_bad_checksum_and_unnamed_field_store_nothing(cluster, s3, existing):
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    assert refused(cluster, s3, {**v2_fields(encode(BASE)), "x-amz-checksum-sha256": wrong}) \
        == (400, "BadDigest")
    assert refused(cluster, s3, {**v2_fields(encode(BASE)), "x-amz-meta-sneaky": "1"}) == \
        (403, "AccessDenied")


def test_malformed_policies_are_400(cluster, s3, existing):
    garbage = base64.b64encode(b"{not json").decode()
    assert refused(cluster, s3, v2_fields(garbage)) == (400, "InvalidPolicyDocument")
    no_expiry = base64.b64encode(json.dumps({"conditions": BASE}).encode()).decode()
    assert refused(cluster, s3, v2_fields(no_expiry)) == (400, "InvalidPolicyDocument")
    bad_range = [*BASE[:3], ["content-length-range", -1, 10]]
    assert refused(cluster, s3, v2_fields(encode(bad_range))) == (400, "InvalidPolicyDocument")
    unsigned = {"AWSAccessKeyId": USER, "policy": encode(BASE)}
    assert refused(cluster, s3, unsigned) == (400, "InvalidArgument")


def test_unsigned_form_into_private_bucket_is_denied(cluster, s3, existing):
    assert refused(cluster, s3, {})[0] == 403


def test_unsigned_form_into_public_write_bucket(cluster, s3):
    s3.create_bucket(Bucket="postform-open", ACL="public-read-write")
    status, _, _ = post(cluster, {"key": "drop/${filename}", "Content-Type": "text/plain"},
                        b"anonymous drop", filename="note.txt", bucket="postform-open")
    assert status == 204
    assert s3.get_object(Bucket="postform-open", Key="drop/note.txt")["Body"].read() == \
        b"anonymous drop"


def test_another_accounts_form_cannot_write_here(cluster, s3, existing):
    """test2:tester2 signs a perfectly good policy, for a bucket of test's: denied."""
    policy = encode(BASE)
    sig = base64.b64encode(hmac.new(b"testing2", policy.encode(), hashlib.sha1).digest())
    fields = {"AWSAccessKeyId": "test2:tester2", "policy": policy, "signature": sig.decode()}
    assert refused(cluster, s3, fields) == (403, "AccessDenied")


def raw_post(cluster, body: bytes, content_type: str) -> tuple[int, str]:
    async def go():
        async with aiohttp.ClientSession() as s, \
                s.post(f"{cluster.proxy_url}/{BUCKET}", data=body,
                       headers={"Content-Type": content_type}) as resp:
            return resp.status, error_code(await resp.read())
    return asyncio.run(go())


def test_broken_forms_are_400(cluster, s3):
    assert raw_post(cluster, b"not a multipart body at all",
                    "multipart/form-data; boundary=xyz") == (400, "MalformedPOSTRequest")
    no_file = (b"--xyz\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nuploads/nf\r\n"
               b"--xyz--\r\n")
    assert raw_post(cluster, no_file, "multipart/form-data; boundary=xyz") == \
        (400, "InvalidArgument")
    assert missing(s3, "uploads/nf")


def anonymous_get(cluster, key: str) -> int:
    async def go():
        async with aiohttp.ClientSession() as s, \
                s.get(f"{cluster.proxy_url}/{BUCKET}/{key}") as resp:
            return resp.status
    return asyncio.run(go())


def test_acl_field_sets_the_objects_acl(cluster, s3):
    for acl, status in (("public-read", 200), ("private", 403)):
        key = f"uploads/acl-{acl}.txt"
        fields = {"key": key, "acl": acl, "Content-Type": "text/plain",
                  **v2_fields(encode([*BASE, {"acl": acl}]))}
        assert post(cluster, fields, b"x")[0] == 204
        assert anonymous_get(cluster, key) == status
    bad = {"key": "uploads/acl-bad.txt", "acl": "everyone", "Content-Type": "text/plain",
           **v2_fields(encode([*BASE, {"acl": "everyone"}]))}
    assert post(cluster, bad, b"x")[0] == 400
    assert missing(s3, "uploads/acl-bad.txt")
