"""S3 multipart uploads through boto3: parts in a hidden container, completed as an SLO
with S3's multipart ETag, readable through S3 and Swift, listed, aborted, copied."""

from __future__ import annotations

import hashlib
import os

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, log_text

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def s3(cluster):
    c = client(cluster)
    c.create_bucket(Bucket="mpu")
    return c


def s3_etag(parts: list[bytes]) -> str:
    md5s = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(md5s).hexdigest()}-{len(parts)}"'


def test_upload_complete_read(s3, cluster):
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(1234)]
    up = s3.create_multipart_upload(Bucket="mpu", Key="big/object.bin",
                                    ContentType="image/tiff", Metadata={"k": "v"})
    uid = up["UploadId"]
    listed = s3.list_multipart_uploads(Bucket="mpu")["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in listed] == [("big/object.bin", uid)]
    etags = []
    for n, data in enumerate(parts, 1):
        r = s3.upload_part(Bucket="mpu", Key="big/object.bin", UploadId=uid, PartNumber=n,
                           Body=data)
        assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        etags.append(r["ETag"])
    got = s3.list_parts(Bucket="mpu", Key="big/object.bin", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in got] == \
        [(n, e, len(d)) for n, (e, d) in enumerate(zip(etags, parts, strict=True), 1)]
    page = s3.list_parts(Bucket="mpu", Key="big/object.bin", UploadId=uid, MaxParts=1,
                         PartNumberMarker=1)
    assert [p["PartNumber"] for p in page["Parts"]] == [2] and page["IsTruncated"]
    done = s3.complete_multipart_upload(
        Bucket="mpu", Key="big/object.bin", UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e}
                                   for n, e in enumerate(etags, 1)]})
    assert done["ETag"] == s3_etag(parts)
    whole = b"".join(parts)
    got = s3.get_object(Bucket="mpu", Key="big/object.bin")
    assert got["Body"].read() == whole
    assert got["ETag"] == s3_etag(parts)
    assert got["ContentType"] == "image/tiff" and got["Metadata"] == {"k": "v"}
    head = s3.head_object(Bucket="mpu", Key="big/object.bin")
    assert head["ContentLength"] == len(whole) and head["ETag"] == s3_etag(parts)
    assert s3.get_object(Bucket="mpu", Key="big/object.bin",
                         Range=f"bytes={5 * MIB - 2}-{5 * MIB + 1}")["Body"].read() == \
        whole[5 * MIB - 2:5 * MIB + 2]
    assert s3.get_object(Bucket="mpu", Key="big/object.bin",
                         PartNumber=3)["Body"].read() == parts[2]
    listing = s3.list_objects_v2(Bucket="mpu", Prefix="big/")["Contents"]
    assert [(o["Key"], o["ETag"], o["Size"]) for o in listing] == \
        [("big/object.bin", s3_etag(parts), len(whole))]
    assert s3.list_multipart_uploads(Bucket="mpu").get("Uploads", []) == []
    # Swift reads the same object.
    headers, body = cluster.connection().get_object("mpu", "big/object.bin")
    assert body == whole
    # Deleting it takes its parts along: the bucket is then empty and can go.
    s3.delete_object(Bucket="mpu", Key="big/object.bin")
    assert "Contents" not in s3.list_objects(Bucket="mpu")


def test_refusals(s3):
    uid = s3.create_multipart_upload(Bucket="mpu", Key="small")["UploadId"]
    e1 = s3.upload_part(Bucket="mpu", Key="small", UploadId=uid, PartNumber=1,
                        Body=b"a" * 1000)["ETag"]
    e2 = s3.upload_part(Bucket="mpu", Key="small", UploadId=uid, PartNumber=2,
                        Body=b"b" * 10)["ETag"]
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="mpu", Key="small", UploadId=uid,
                                     MultipartUpload={"Parts": [
                                         {"PartNumber": 1, "ETag": e1},
                                         {"PartNumber": 2, "ETag": e2}]})
    assert exc.value.response["Error"]["Code"] == "EntityTooSmall"
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="mpu", Key="small", UploadId=uid,
                                     MultipartUpload={"Parts": [
                                         {"PartNumber": 1, "ETag": '"' + "0" * 32 + '"'}]})
    assert exc.value.response["Error"]["Code"] == "InvalidPart"
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="mpu", Key="small", UploadId=uid,
                                     MultipartUpload={"Parts": [
                                         {"PartNumber": 2, "ETag": e2},
                                         {"PartNumber": 1, "ETag": e1}]})
    assert exc.value.response["Error"]["Code"] == "InvalidPartOrder"
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="mpu", Key="small")
    # A single small part is a whole object.
    done = s3.complete_multipart_upload(Bucket="mpu", Key="small", UploadId=uid,
                                        MultipartUpload={"Parts": [
                                            {"PartNumber": 2, "ETag": e2}]})
    assert done["ETag"] == s3_etag([b"b" * 10])
    assert s3.get_object(Bucket="mpu", Key="small")["Body"].read() == b"b" * 10
    with pytest.raises(ClientError) as exc:
        s3.upload_part(Bucket="mpu", Key="small", UploadId=uid, PartNumber=3, Body=b"x")
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"
    with pytest.raises(ClientError) as exc:
        s3.upload_part(Bucket="mpu", Key="small", UploadId="f" * 32, PartNumber=1, Body=b"x")
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"
    s3.delete_object(Bucket="mpu", Key="small")


def test_abort_and_copy_part(s3):
    s3.put_object(Bucket="mpu", Key="source", Body=b"0123456789" * 1000)
    uid = s3.create_multipart_upload(Bucket="mpu", Key="copied")["UploadId"]
    r = s3.upload_part_copy(Bucket="mpu", Key="copied", UploadId=uid, PartNumber=1,
                            CopySource="mpu/source", CopySourceRange="bytes=10-29")
    assert r["CopyPartResult"]["ETag"] == \
        f'"{hashlib.md5(b"0123456789" * 2).hexdigest()}"'
    s3.complete_multipart_upload(Bucket="mpu", Key="copied", UploadId=uid,
                                 MultipartUpload={"Parts": [
                                     {"PartNumber": 1, "ETag": r["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket="mpu", Key="copied")["Body"].read() == b"0123456789" * 2
    uid = s3.create_multipart_upload(Bucket="mpu", Key="dropped")["UploadId"]
    s3.upload_part(Bucket="mpu", Key="dropped", UploadId=uid, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket="mpu", Key="dropped", UploadId=uid)
    with pytest.raises(ClientError) as exc:
        s3.list_parts(Bucket="mpu", Key="dropped", UploadId=uid)
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"


def test_transfer_manager(s3, tmp_path):
    """boto3's upload_file / download_file split a big file into parts themselves."""
    src = tmp_path / "in.bin"
    data = os.urandom(11 * MIB + 5)
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB,
                         max_concurrency=2)
    s3.upload_file(str(src), "mpu", "managed.bin", Config=cfg)
    assert s3.head_object(Bucket="mpu", Key="managed.bin")["ETag"].endswith('-3"')
    dst = tmp_path / "out.bin"
    s3.download_file("mpu", "managed.bin", str(dst), Config=cfg)
    assert dst.read_bytes() == data


def test_other_user_cannot_upload(s3, cluster):
    reader = client(cluster, user="test:tester3", key="testing3")
    with pytest.raises(ClientError) as exc:
        reader.create_multipart_upload(Bucket="mpu", Key="intruder")
    assert exc.value.response["Error"]["Code"] == "AccessDenied"
    # Bucket names are global: another account finds the bucket, and may not write to it.
    other = client(cluster, user="test2:tester2", key="testing2")
    with pytest.raises(ClientError) as exc:
        other.create_multipart_upload(Bucket="mpu", Key="intruder")
    assert exc.value.response["Error"]["Code"] == "AccessDenied"
    assert not [u for u in s3.list_multipart_uploads(Bucket="mpu").get("Uploads", [])
                if u["Key"] == "intruder"]


def test_no_tracebacks(cluster):
    assert "Traceback" not in log_text(cluster)
