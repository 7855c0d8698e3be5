"""S3 conditional writes through boto3: PutObject with If-None-Match: * and If-Match."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client


@pytest.fixture(scope="module")
def s3(cluster):
    s3 = client(cluster)
    s3.create_bucket(Bucket="cond")
    return s3


def code_of(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    err = exc.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]


def test_if_none_match_creates_only(s3):
    s3.put_object(Bucket="cond", Key="once", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="cond", Key="once", Body=b"second", IfNoneMatch="*")
    assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="once")["Body"].read() == b"first"
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="cond", Key="once", Body=b"x", IfNoneMatch='"abc"')
    assert code_of(exc) == (501, "NotImplemented")
    # a big body (streamed, not buffered) is refused as well, and stores nothing
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="cond", Key="once", Body=b"y" * (600 * 1024), IfNoneMatch="*")
    assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="once")["Body"].read() == b"first"


def test_if_match_compares_etags(s3):
    etag = s3.put_object(Bucket="cond", Key="cas", Body=b"v1")["ETag"]
    new = s3.put_object(Bucket="cond", Key="cas", Body=b"v2", IfMatch=etag)["ETag"]
    assert s3.get_object(Bucket="cond", Key="cas")["Body"].read() == b"v2"
    with pytest.raises(ClientError) as exc:  # the old ETag no longer matches
        s3.put_object(Bucket="cond", Key="cas", Body=b"v3", IfMatch=etag)
    assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="cas")["ETag"] == new
    with pytest.raises(ClientError) as exc:  # nothing to match
        s3.put_object(Bucket="cond", Key="missing", Body=b"v1", IfMatch=etag)
    assert code_of(exc) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="cond", Key="missing")
    assert code_of(exc)[0] == 404
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="no-such-bucket-here", Key="k", Body=b"v1", IfMatch=etag)
    assert code_of(exc) == (404, "NoSuchBucket")


def test_bucket_tagging(s3, cluster):
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_tagging(Bucket="cond")
    assert code_of(exc) == (404, "NoSuchTagSet")
    tags = [{"Key": "team", "Value": "photos"}, {"Key": "cost centre", "Value": "ü 42"},
            {"Key": "empty", "Value": ""}]
    s3.put_bucket_tagging(Bucket="cond", Tagging={"TagSet": tags})
    assert s3.get_bucket_tagging(Bucket="cond")["TagSet"] == tags
    # kept as sysmeta: a Swift client neither sees nor sets it
    head = cluster.connection().head_container("cond")
    assert not [k for k in head if "tagging" in k.lower()]
    for bad in ([{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}],
                [{"Key": "x" * 129, "Value": "v"}], [{"Key": "k", "Value": "v" * 257}],
                [{"Key": f"k{i}", "Value": "v"} for i in range(51)]):
        with pytest.raises(ClientError) as exc:
            s3.put_bucket_tagging(Bucket="cond", Tagging={"TagSet": bad})
        assert code_of(exc) == (400, "InvalidTag")
    assert s3.get_bucket_tagging(Bucket="cond")["TagSet"] == tags
    s3.delete_bucket_tagging(Bucket="cond")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_tagging(Bucket="cond")
    assert code_of(exc) == (404, "NoSuchTagSet")
    with pytest.raises(ClientError) as exc:
        s3.get_bucket_tagging(Bucket="no-such-bucket-here")
    assert code_of(exc) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as exc:
        s3.get_object_tagging(Bucket="cond", Key="once")
    assert code_of(exc) == (501, "NotImplemented")


def _versioned(s3, name: str) -> None:
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


def _complete(s3, bucket: str, key: str, body: bytes = b"abc", **cond):
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=body)
    return s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, **cond,
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})


def test_multipart_conditions_versioned(s3):
    _versioned(s3, "cond-mpv")
    resp = _complete(s3, "cond-mpv", "k", b"one", IfNoneMatch="deadbeef")
    print(resp)
    assert resp["VersionId"]
