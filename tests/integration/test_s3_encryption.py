"""S3 server-side encryption through boto3: SSE-C and SSE-KMS round trips with ranges and
multipart uploads, ciphertext on disk, wrong or malformed keys refused with nothing stored,
copies between kinds, bucket default encryption, and Swift API reads of encrypted objects."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)


def sse_c(key: bytes = KEY_A, prefix: str = "") -> dict[str, str]:
    return {f"{prefix}SSECustomerAlgorithm": "AES256",
            f"{prefix}SSECustomerKey": base64.b64encode(key).decode(),
            f"{prefix}SSECustomerKeyMD5": base64.b64encode(hashlib.md5(key).digest()).decode()}


KMS = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "testkey-1"}
KMS2 = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "testkey-2"}


@pytest.fixture(scope="module")
def s3(cluster):
    c = client(cluster)
    c.create_bucket(Bucket="enc")
    return c


def data_files(cluster) -> list[str]:
    return glob.glob(os.path.join(cluster.root, "node*", "d*", "objects", "**", "*.data"),
                     recursive=True)


def on_disk(cluster, needle: bytes) -> bool:
    for path in data_files(cluster):
        with open(path, "rb") as f:
            if needle in f.read():
                return True
    return False


def missing(s3, key: str, bucket: str = "enc") -> bool:
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket=bucket, Key=key)
    return code_of(exc)[0] == 404


def test_sse_c_round_trip_ranges_and_ciphertext_on_disk(cluster, s3):
    body = b"SSE-C plaintext marker " + os.urandom(300_000) + b" end of it"
    put = s3.put_object(Bucket="enc", Key="c1", Body=body, **sse_c())
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert put["ETag"].strip('"') != hashlib.md5(body).hexdigest()
    got = s3.get_object(Bucket="enc", Key="c1", **sse_c())
    assert got["Body"].read() == body
    assert got["SSECustomerKeyMD5"] == sse_c()["SSECustomerKeyMD5"]
    assert got["ETag"] == put["ETag"]
    for first, last in ((0, 0), (5, 40), (17, 100_016), (299_990, len(body) - 1)):
        part = s3.get_object(Bucket="enc", Key="c1", Range=f"bytes={first}-{last}", **sse_c())
        assert part["Body"].read() == body[first:last + 1]
        assert part["ContentLength"] == last - first + 1
    head = s3.head_object(Bucket="enc", Key="c1", **sse_c())
    assert head["ContentLength"] == len(body)
    assert not on_disk(cluster, b"SSE-C plaintext marker")


def test_sse_c_wrong_or_missing_key_gets_nothing(s3):
    s3.put_object(Bucket="enc", Key="c2", Body=b"secret words", **sse_c())
    for kwargs in ({}, sse_c(KEY_B)):
        for call in (s3.get_object, s3.head_object):
            with pytest.raises(ClientError) as exc:
                call(Bucket="enc", Key="c2", **kwargs)
            assert code_of(exc)[0] == 400
            assert b"secret words" not in str(exc.value.response).encode()


def test_bad_sse_c_headers_store_nothing(s3):
    good = sse_c()
    short = base64.b64encode(os.urandom(16)).decode()
    cases = [
        {**good, "SSECustomerKeyMD5": base64.b64encode(b"\0" * 16).decode()},
        {**good, "SSECustomerKey": short,
         "SSECustomerKeyMD5": base64.b64encode(
             hashlib.md5(base64.b64decode(short)).digest()).decode()},
        {**good, "SSECustomerAlgorithm": "AES128"},
    ]
    for i, kwargs in enumerate(cases):
        with pytest.raises(ClientError) as exc:
            s3.put_object(Bucket="enc", Key=f"bad{i}", Body=b"x", **kwargs)
        assert code_of(exc) == (400, "InvalidArgument")
        assert missing(s3, f"bad{i}")
        with pytest.raises(ClientError) as exc:
            s3.create_multipart_upload(Bucket="enc", Key=f"bad{i}", **kwargs)
        assert code_of(exc) == (400, "InvalidArgument")
        assert not s3.list_multipart_uploads(Bucket="enc", Prefix=f"bad{i}").get("Uploads")
    for i, headers in enumerate((
            {"x-amz-server-side-encryption": "aes:kms"},
            {"x-amz-server-side-encryption": "AES256",
             "x-amz-server-side-encryption-aws-kms-key-id": "testkey-1"},
            {"x-amz-server-side-encryption-aws-kms-key-id": "testkey-1"},
            {"x-amz-server-side-encryption": "aws:kms"},
            {"x-amz-server-side-encryption": "aws:kms",
             "x-amz-server-side-encryption-aws-kms-key-id": "testkey-1",
             "x-amz-server-side-encryption-customer-algorithm": "AES256",
             "x-amz-server-side-encryption-customer-key": good["SSECustomerKey"],
             "x-amz-server-side-encryption-customer-key-md5": good["SSECustomerKeyMD5"]})):
        c = client_with_headers(s3, "PutObject", headers)
        with pytest.raises(ClientError) as exc:
            c.put_object(Bucket="enc", Key=f"conflict{i}", Body=b"x")
        assert code_of(exc) == (400, "InvalidArgument")
        assert missing(s3, f"conflict{i}")


def client_with_headers(s3, operation: str, headers: dict[str, str]):
    import boto3

    c = boto3.client("s3", endpoint_url=s3.meta.endpoint_url, region_name="us-east-1",
                     aws_access_key_id="test:tester", aws_secret_access_key="testing",
                     config=s3.meta.config)
    c.meta.events.register(f"before-call.s3.{operation}",
                           lambda **kw: kw["params"]["headers"].update(headers))
    return c


def test_sse_kms_round_trip_and_read_rules(cluster, s3):
    body = b"KMS plaintext marker " + os.urandom(100_000)
    put = s3.put_object(Bucket="enc", Key="k1", Body=body, **KMS)
    assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", "testkey-1")
    got = s3.get_object(Bucket="enc", Key="k1")
    assert got["Body"].read() == body
    assert got["SSEKMSKeyId"] == "testkey-1"
    rng = s3.get_object(Bucket="enc", Key="k1", Range="bytes=1000-1099")
    assert rng["Body"].read() == body[1000:1100]
    assert not on_disk(cluster, b"KMS plaintext marker")
    # A read naming SSE-KMS, or an SSE-C key for a KMS object, is refused.
    with pytest.raises(ClientError) as exc:
        client_with_headers(s3, "GetObject", {"x-amz-server-side-encryption": "aws:kms"}) \
            .get_object(Bucket="enc", Key="k1")
    assert code_of(exc)[0] == 400
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="enc", Key="k1", **sse_c())
    assert code_of(exc)[0] == 400


def multipart(s3, key: str, parts: list[bytes], create: dict, part: dict,
              complete: dict) -> dict:
    up = s3.create_multipart_upload(Bucket="enc", Key=key, **create)
    done = []
    for n, data in enumerate(parts, 1):
        r = s3.upload_part(Bucket="enc", Key=key, UploadId=up["UploadId"], PartNumber=n,
                           Body=data, **part)
        done.append({"ETag": r["ETag"], "PartNumber": n})
    return s3.complete_multipart_upload(Bucket="enc", Key=key, UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": done}, **complete)


@pytest.mark.parametrize("kind", ["sse-c", "kms"])
def test_multipart_ranges_across_parts_and_part_gets(s3, kind):
    mib = 1024 * 1024
    parts = [os.urandom(5 * mib + 1), os.urandom(5 * mib), os.urandom(12345)]
    body = b"".join(parts)
    if kind == "sse-c":
        create, part, read = sse_c(), sse_c(), sse_c()
    else:
        create, part, read = KMS, {}, {}
    done = multipart(s3, f"mp-{kind}", parts, create, part, read if kind == "sse-c" else {})
    got = s3.get_object(Bucket="enc", Key=f"mp-{kind}", **read)
    assert got["Body"].read() == body
    for first, last in ((5 * mib - 3, 5 * mib + 10), (0, 10 * mib + 100), (10 * mib, 10 * mib)):
        r = s3.get_object(Bucket="enc", Key=f"mp-{kind}", Range=f"bytes={first}-{last}", **read)
        assert r["Body"].read() == body[first:last + 1]
    for n, data in enumerate(parts, 1):
        r = s3.get_object(Bucket="enc", Key=f"mp-{kind}", PartNumber=n, **read)
        assert r["Body"].read() == data
        assert r["ETag"] == done["ETag"]


def test_multipart_sse_c_parts_need_the_uploads_key(s3):
    up = s3.create_multipart_upload(Bucket="enc", Key="mpc", **sse_c())
    for kwargs in ({}, sse_c(KEY_B)):
        with pytest.raises(ClientError) as exc:
            s3.upload_part(Bucket="enc", Key="mpc", UploadId=up["UploadId"], PartNumber=1,
                           Body=b"x", **kwargs)
        assert code_of(exc)[0] == 400
    assert s3.list_parts(Bucket="enc", Key="mpc", UploadId=up["UploadId"]).get("Parts") \
        in (None, [])
    # A part sent again with the same bytes is the same ciphertext (a client's retry keeps
    # its ETag); other bytes under that part number are another keystream and ETag.
    data = os.urandom(100_000)
    etags = [s3.upload_part(Bucket="enc", Key="mpc", UploadId=up["UploadId"], PartNumber=1,
                            Body=body, **sse_c())["ETag"] for body in (data, data, data[::-1])]
    assert etags[0] == etags[1] != etags[2]
    s3.upload_part(Bucket="enc", Key="mpc", UploadId=up["UploadId"], PartNumber=1, Body=data,
                   **sse_c())
    s3.complete_multipart_upload(Bucket="enc", Key="mpc", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"ETag": etags[0],
                                                             "PartNumber": 1}]}, **sse_c())
    assert s3.get_object(Bucket="enc", Key="mpc", **sse_c())["Body"].read() == data


MODES = {"plain": ({}, {}, {}), "sse-c": (sse_c(), sse_c(), sse_c(prefix="CopySource")),
         "kms": (KMS, {}, {})}
DEST = {"plain": ({}, {}), "sse-c": (sse_c(KEY_B), sse_c(KEY_B)), "kms": (KMS2, {})}


@pytest.mark.parametrize("src", list(MODES))
@pytest.mark.parametrize("dst", list(DEST))
def test_copy_between_kinds(cluster, s3, src, dst):
    body = f"copy {src}->{dst} marker ".encode() + os.urandom(70_000)
    put_args, _, source_args = MODES[src]
    s3.put_object(Bucket="enc", Key=f"src-{src}-{dst}", Body=body, **put_args)
    dest_args, get_args = DEST[dst]
    r = s3.copy_object(Bucket="enc", Key=f"dst-{src}-{dst}",
                       CopySource={"Bucket": "enc", "Key": f"src-{src}-{dst}"},
                       **dest_args, **source_args)
    if dst == "kms":
        assert r["SSEKMSKeyId"] == "testkey-2"
    got = s3.get_object(Bucket="enc", Key=f"dst-{src}-{dst}", **get_args)
    assert got["Body"].read() == body
    if dst != "plain" and src != "plain":  # (a plain source is plaintext on disk itself)
        assert not on_disk(cluster, f"copy {src}->{dst} marker".encode())
    # Copy part: the source's bytes into an upload encrypted as `dst`.
    up = s3.create_multipart_upload(Bucket="enc", Key=f"cp-{src}-{dst}", **dest_args)
    part = s3.upload_part_copy(Bucket="enc", Key=f"cp-{src}-{dst}", UploadId=up["UploadId"],
                               PartNumber=1, CopySourceRange="bytes=10-60009",
                               CopySource={"Bucket": "enc", "Key": f"src-{src}-{dst}"},
                               **source_args, **get_args)
    s3.complete_multipart_upload(
        Bucket="enc", Key=f"cp-{src}-{dst}", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["CopyPartResult"]["ETag"],
                                    "PartNumber": 1}]}, **get_args)
    got = s3.get_object(Bucket="enc", Key=f"cp-{src}-{dst}", **get_args)
    assert got["Body"].read() == body[10:60010]


def test_copy_of_sse_c_source_needs_its_key(s3):
    s3.put_object(Bucket="enc", Key="csrc", Body=b"abc", **sse_c())
    for kwargs in ({}, sse_c(KEY_B, prefix="CopySource")):
        with pytest.raises(ClientError) as exc:
            s3.copy_object(Bucket="enc", Key="cdst", CopySource={"Bucket": "enc",
                                                                 "Key": "csrc"}, **kwargs)
        assert code_of(exc)[0] == 400
        assert missing(s3, "cdst")


def test_bucket_default_encryption(cluster, s3):
    s3.create_bucket(Bucket="defenc")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_encryption(Bucket="defenc")
    assert code_of(exc) == (404, "ServerSideEncryptionConfigurationNotFoundError")
    s3.put_bucket_encryption(Bucket="defenc", ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "testkey-2"}}]})
    rule = s3.get_bucket_encryption(Bucket="defenc")["ServerSideEncryptionConfiguration"][
        "Rules"][0]["ApplyServerSideEncryptionByDefault"]
    assert rule == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "testkey-2"}
    put = s3.put_object(Bucket="defenc", Key="o", Body=b"default-encrypted marker")
    assert put["SSEKMSKeyId"] == "testkey-2"
    assert s3.get_object(Bucket="defenc", Key="o")["Body"].read() == \
        b"default-encrypted marker"
    assert not on_disk(cluster, b"default-encrypted marker")
    with pytest.raises(ClientError) as exc:
        s3.put_bucket_encryption(Bucket="defenc", ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "rot13"}}]})
    assert code_of(exc)[0] == 400
    s3.delete_bucket_encryption(Bucket="defenc")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_encryption(Bucket="defenc")
    assert code_of(exc)[0] == 404
    plain = s3.put_object(Bucket="defenc", Key="p", Body=b"x")
    assert "ServerSideEncryption" not in plain


def test_swift_reads_of_encrypted_objects(cluster, s3):
    s3.put_object(Bucket="enc", Key="sw-kms", Body=b"kms via swift", **KMS)
    s3.put_object(Bucket="enc", Key="sw-c", Body=b"sse-c via swift", **sse_c())
    conn = cluster.connection()
    _, body = conn.get_object("enc", "sw-kms")
    assert body == b"kms via swift"
    _, body = conn.get_object("enc", "sw-kms", headers={"Range": "bytes=4-6"})
    assert body == b"via"
    import swiftclient
    with pytest.raises(swiftclient.ClientException) as exc:
        conn.get_object("enc", "sw-c")
    assert exc.value.http_status == 400
    assert b"sse-c via swift" not in (exc.value.http_response_content or b"")


def test_swift_reads_of_encrypted_multipart_and_copies(cluster, s3):
    import swiftclient

    parts = [os.urandom(5 * 1024 * 1024), b"tail of the kms upload"]
    multipart(s3, "sw-mp", parts, KMS, {}, {})
    conn = cluster.connection()
    _, body = conn.get_object("enc", "sw-mp", headers={"Range": "bytes=5242870-5242899"})
    assert body == b"".join(parts)[5242870:5242900]
    _, manifest = conn.get_object("enc", "sw-mp", query_string="multipart-manifest=get")
    assert [item["bytes"] for item in json.loads(manifest)] == [len(p) for p in parts]
    # Swift's own COPY would copy ciphertext: refused, nothing written.
    s3.put_object(Bucket="enc", Key="sw-copy-src", Body=b"abc", **KMS)
    with pytest.raises(swiftclient.ClientException) as exc:
        conn.copy_object("enc", "sw-copy-src", "/enc/sw-copy-dst")
    assert exc.value.http_status == 400
    assert missing(s3, "sw-copy-dst")


def test_post_form_with_sse_fields(cluster, s3):
    from tests.integration.test_s3_postform import encode, post, v2_fields

    key = sse_c()
    conditions = [{"bucket": "enc"}, ["starts-with", "$key", "form"],
                  ["starts-with", "$x-amz-server-side-encryption-customer-algorithm", ""],
                  ["starts-with", "$x-amz-server-side-encryption-customer-key", ""],
                  ["starts-with", "$x-amz-server-side-encryption-customer-key-md5", ""]]
    fields = {"key": "form-c",
              "x-amz-server-side-encryption-customer-algorithm": "AES256",
              "x-amz-server-side-encryption-customer-key": key["SSECustomerKey"],
              "x-amz-server-side-encryption-customer-key-md5": key["SSECustomerKeyMD5"],
              **v2_fields(encode(conditions))}
    status, _, _ = post(cluster, fields, b"form marker sse-c", bucket="enc")
    assert status == 204
    assert s3.get_object(Bucket="enc", Key="form-c", **sse_c())["Body"].read() == \
        b"form marker sse-c"
    assert not on_disk(cluster, b"form marker sse-c")
    # A bad key MD5 in the form is refused, and nothing is stored.
    fields["key"] = "form-bad"
    fields["x-amz-server-side-encryption-customer-key-md5"] = \
        base64.b64encode(b"\0" * 16).decode()
    status, _, _ = post(cluster, fields, b"x", bucket="enc")
    assert status == 400
    assert missing(s3, "form-bad")
