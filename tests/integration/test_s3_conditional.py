"""S3 conditional writes and deletes through boto3: PutObject and CompleteMultipartUpload
with If-None-Match and If-Match, DeleteObject(s) with If-Match, size and time."""

from __future__ import annotations

import datetime
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of


@pytest.fixture(scope="module")
def s3(cluster):
    s3 = client(cluster)
    s3.create_bucket(Bucket="cond")
    return s3


def test_if_none_match_creates_only(s3):
    s3.put_object(Bucket="cond", Key="once", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="cond", Key="once", Body=b"second", IfNoneMatch="*")
    assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="once")["Body"].read() == b"first"
    with pytest.raises(ClientError) as exc:  # an ETag the object has: refused as well
        s3.put_object(Bucket="cond", Key="once", Body=b"x",
                      IfNoneMatch=s3.head_object(Bucket="cond", Key="once")["ETag"])
    assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="once")["Body"].read() == b"first"
    # a big body (streamed, not buffered) is refused as well, and stores nothing
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="cond", Key="once", Body=b"y" * (1536 * 1024), IfNoneMatch="*")
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
    assert code_of(exc) == (404, "NoSuchKey")
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
        s3.get_object_tagging(Bucket="cond", Key="never-written")
    assert code_of(exc) == (404, "NoSuchKey")



def test_if_none_match_etag_and_if_match_star(s3):
    etag = s3.put_object(Bucket="cond", Key="inm", Body=b"one")["ETag"]
    # another ETag than the object's: the write goes ahead
    s3.put_object(Bucket="cond", Key="inm", Body=b"two", IfNoneMatch='"0123abcd"')
    assert s3.get_object(Bucket="cond", Key="inm")["Body"].read() == b"two"
    s3.put_object(Bucket="cond", Key="inm", Body=b"three", IfNoneMatch=etag)  # stale
    s3.put_object(Bucket="cond", Key="inm", Body=b"four", IfMatch="*")
    assert s3.get_object(Bucket="cond", Key="inm")["Body"].read() == b"four"
    with pytest.raises(ClientError) as exc:  # `*` needs an object
        s3.put_object(Bucket="cond", Key="inm-missing", Body=b"x", IfMatch="*")
    assert code_of(exc) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="cond", Key="inm-missing")
    assert code_of(exc)[0] == 404


def test_if_match_is_atomic(s3):
    """Writers racing with the same If-Match: the object servers judge the ETag under their
    lock at commit, so exactly one wins, though all of them found it matching first."""
    etag = s3.put_object(Bucket="cond", Key="race", Body=b"base")["ETag"]
    bodies = [f"writer {i}".encode() * 1000 for i in range(8)]
    barrier = threading.Barrier(len(bodies))

    def write(body: bytes) -> int:
        barrier.wait()
        try:
            s3.put_object(Bucket="cond", Key="race", Body=body, IfMatch=etag)
            return 200
        except ClientError as e:
            assert code_of_error(e) == (412, "PreconditionFailed")
            return 412
    with ThreadPoolExecutor(len(bodies)) as pool:
        outcomes = list(pool.map(write, bodies))
    assert outcomes.count(200) == 1, outcomes
    won = bodies[outcomes.index(200)]
    assert s3.get_object(Bucket="cond", Key="race")["Body"].read() == won


def code_of_error(e: ClientError) -> tuple[int, str]:
    return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]


def _complete(s3, bucket: str, key: str, body: bytes = b"abc", **cond):
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=body)
    parts = {"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}
    try:
        return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                            MultipartUpload=parts, **cond)
    except ClientError:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
        raise


def test_complete_multipart_conditions(s3):
    first = _complete(s3, "cond", "mp", b"one", IfNoneMatch="*")["ETag"]
    for cond in ({"IfNoneMatch": "*"}, {"IfNoneMatch": first}, {"IfMatch": '"feed"'}):
        with pytest.raises(ClientError) as exc:
            _complete(s3, "cond", "mp", b"two", **cond)
        assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="mp")["Body"].read() == b"one"
    # the multipart ETag is what If-Match compares (atomically, on its sysmeta)
    second = _complete(s3, "cond", "mp", b"two", IfMatch=first)["ETag"]
    assert s3.get_object(Bucket="cond", Key="mp")["Body"].read() == b"two"
    with pytest.raises(ClientError) as exc:
        _complete(s3, "cond", "mp-missing", IfMatch=second)
    assert code_of(exc) == (404, "NoSuchKey")


def test_conditional_delete(s3):
    etag = s3.put_object(Bucket="cond", Key="del", Body=b"12345")["ETag"]
    mtime = s3.head_object(Bucket="cond", Key="del")["LastModified"]
    old = datetime.datetime(2015, 1, 1, tzinfo=datetime.UTC)
    for cond in ({"IfMatch": '"bad"'}, {"IfMatchSize": 4}, {"IfMatchLastModifiedTime": old}):
        with pytest.raises(ClientError) as exc:
            s3.delete_object(Bucket="cond", Key="del", **cond)
        assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="cond", Key="del")["Body"].read() == b"12345"
    s3.delete_object(Bucket="cond", Key="del", IfMatch=etag, IfMatchSize=5,
                     IfMatchLastModifiedTime=mtime)
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="cond", Key="del")
    assert code_of(exc)[0] == 404
    # nothing there: a success, as an unconditional delete's
    s3.delete_object(Bucket="cond", Key="del", IfMatch='"bad"')


def test_conditional_delete_refuses_bad_input(s3):
    s3.put_object(Bucket="cond", Key="del-bad", Body=b"x")
    for header, value in (("x-amz-if-match-size", "abc"),
                          ("x-amz-if-match-last-modified-time", "yesterday")):
        def add(params, header=header, value=value, **_):
            params["headers"][header] = value
        s3.meta.events.register("before-call.s3.DeleteObject", add)
        try:
            with pytest.raises(ClientError) as exc:
                s3.delete_object(Bucket="cond", Key="del-bad")
            assert code_of(exc) == (400, "InvalidArgument")
        finally:
            s3.meta.events.unregister("before-call.s3.DeleteObject", add)
    assert s3.get_object(Bucket="cond", Key="del-bad")["Body"].read() == b"x"


def test_delete_objects_conditions(s3):
    etags = {k: s3.put_object(Bucket="cond", Key=k, Body=b"abc")["ETag"]
             for k in ("m1", "m2", "m3")}
    out = s3.delete_objects(Bucket="cond", Delete={"Objects": [
        {"Key": "m1", "ETag": '"bad"'}, {"Key": "m2", "ETag": etags["m2"], "Size": 3},
        {"Key": "m3", "Size": 4}]})
    assert {e["Key"]: e["Code"] for e in out["Errors"]} == \
        {"m1": "PreconditionFailed", "m3": "PreconditionFailed"}
    assert [d["Key"] for d in out["Deleted"]] == ["m2"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="cond").get("Contents", [])}
    assert {"m1", "m3"} <= keys and "m2" not in keys


def test_delete_objects_over_1000_keys_refused(s3):
    s3.put_object(Bucket="cond", Key="k0", Body=b"x")
    with pytest.raises(ClientError) as exc:
        s3.delete_objects(Bucket="cond", Delete={
            "Objects": [{"Key": f"k{i}"} for i in range(1001)]})
    assert code_of(exc) == (400, "MalformedXML")
    assert s3.get_object(Bucket="cond", Key="k0")["Body"].read() == b"x"


def test_versioned_conditions(s3):
    s3.create_bucket(Bucket="cond-v")
    s3.put_bucket_versioning(Bucket="cond-v", VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket="cond-v", Key="k", Body=b"one")
    with pytest.raises(ClientError) as exc:  # the link is not what If-None-Match sees
        s3.put_object(Bucket="cond-v", Key="k", Body=b"two", IfNoneMatch="*")
    assert code_of(exc) == (412, "PreconditionFailed")
    second = s3.put_object(Bucket="cond-v", Key="k", Body=b"two", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="cond-v", Key="k", Body=b"three", IfMatch=first["ETag"])
    assert code_of(exc) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket="cond-v", Key="k", IfMatch=first["ETag"])
    assert code_of(exc) == (412, "PreconditionFailed")
    # a version by its id, judged on that version's ETag
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket="cond-v", Key="k", VersionId=first["VersionId"],
                         IfMatch=second["ETag"])
    assert code_of(exc) == (412, "PreconditionFailed")
    gone = s3.delete_object(Bucket="cond-v", Key="k", IfMatch=second["ETag"])
    assert gone["DeleteMarker"] and gone["VersionId"]
    # a delete marker is current: only `*` matches it, and nothing more is written
    with pytest.raises(ClientError) as exc:
        s3.delete_object(Bucket="cond-v", Key="k", IfMatch=second["ETag"])
    assert code_of(exc) == (412, "PreconditionFailed")
    s3.delete_object(Bucket="cond-v", Key="k", IfMatch="*")
    versions = s3.list_object_versions(Bucket="cond-v")
    assert len(versions["DeleteMarkers"]) == 1 and len(versions["Versions"]) == 2
    out = s3.delete_objects(Bucket="cond-v", Delete={"Objects": [
        {"Key": "k", "VersionId": first["VersionId"], "ETag": first["ETag"]}]})
    assert out["Deleted"][0]["VersionId"] == first["VersionId"]
    assert "DeleteMarker" not in out["Deleted"][0]
