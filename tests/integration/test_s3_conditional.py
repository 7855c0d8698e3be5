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
