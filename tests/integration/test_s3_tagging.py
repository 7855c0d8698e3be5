"""S3 object tagging through boto3: tags set with the object or later (per version), read
back, counted on GET/HEAD, copied or replaced by CopyObject, carried by multipart uploads;
setting them keeps the object's metadata, a Swift POST keeps them; refused tag sets store
nothing."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, code_of


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def tagset(**tags: str) -> dict:
    return {"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]}


def tags_of(s3, bucket: str, key: str, **kw) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key=key,
                                                                 **kw)["TagSet"]}


def test_tags_with_the_object_and_later(s3, cluster):
    s3.create_bucket(Bucket="tags")
    s3.put_object(Bucket="tags", Key="k", Body=b"data", Tagging="a=1&b&c=x%20y",
                  Metadata={"color": "red"})
    assert tags_of(s3, "tags", "k") == {"a": "1", "b": "", "c": "x y"}
    assert s3.head_object(Bucket="tags", Key="k")["ResponseMetadata"]["HTTPHeaders"][
        "x-amz-tagging-count"] == "3"
    assert s3.get_object(Bucket="tags", Key="k")["TagCount"] == 3
    s3.put_object_tagging(Bucket="tags", Key="k", Tagging=tagset(only="one"))
    assert tags_of(s3, "tags", "k") == {"only": "one"}
    head = s3.head_object(Bucket="tags", Key="k")
    assert head["Metadata"] == {"color": "red"}  # tagging keeps the metadata
    assert head["ContentType"] == "binary/octet-stream"
    # A Swift POST of metadata keeps the tags.
    cluster.connection().post_object("tags", "k", {"X-Object-Meta-Color": "green"})
    assert tags_of(s3, "tags", "k") == {"only": "one"}
    assert s3.head_object(Bucket="tags", Key="k")["Metadata"] == {"color": "green"}
    s3.delete_object_tagging(Bucket="tags", Key="k")
    assert tags_of(s3, "tags", "k") == {}
    assert "x-amz-tagging-count" not in s3.head_object(Bucket="tags", Key="k")[
        "ResponseMetadata"]["HTTPHeaders"]
    assert s3.get_object(Bucket="tags", Key="k")["Body"].read() == b"data"
    with pytest.raises(ClientError) as exc:
        s3.put_object_tagging(Bucket="tags", Key="missing", Tagging=tagset(a="1"))
    assert code_of(exc) == (404, "NoSuchKey")


def test_refused_tag_sets_store_nothing(s3):
    s3.create_bucket(Bucket="badtags")
    s3.put_object(Bucket="badtags", Key="k", Body=b"x", Tagging="keep=me")
    ten = {f"k{i}": "v" for i in range(10)}
    bad = [{**ten, "k10": "v"}, {"x" * 129: "v"}, {"k": "v" * 257}]
    for tags in bad:
        with pytest.raises(ClientError) as exc:
            s3.put_object_tagging(Bucket="badtags", Key="k", Tagging=tagset(**tags))
        assert code_of(exc) == (400, "InvalidTag")
    dup = {"TagSet": [{"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}]}
    with pytest.raises(ClientError) as exc:
        s3.put_object_tagging(Bucket="badtags", Key="k", Tagging=dup)
    assert code_of(exc) == (400, "InvalidTag")
    assert tags_of(s3, "badtags", "k") == {"keep": "me"}
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="badtags", Key="new", Body=b"x",
                      Tagging="&".join(f"k{i}=v" for i in range(11)))
    assert code_of(exc) == (400, "InvalidTag")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="badtags", Key="new")
    assert code_of(exc)[0] == 404
    s3.put_object_tagging(Bucket="badtags", Key="k", Tagging=tagset(**ten))
    assert tags_of(s3, "badtags", "k") == ten


def test_tags_per_version(s3):
    s3.create_bucket(Bucket="vtags")
    s3.put_bucket_versioning(Bucket="vtags", VersioningConfiguration={"Status": "Enabled"})
    old = s3.put_object(Bucket="vtags", Key="k", Body=b"1", Tagging="v=old")["VersionId"]
    new = s3.put_object(Bucket="vtags", Key="k", Body=b"2", Tagging="v=new")["VersionId"]
    assert tags_of(s3, "vtags", "k") == {"v": "new"}
    assert tags_of(s3, "vtags", "k", VersionId=old) == {"v": "old"}
    s3.put_object_tagging(Bucket="vtags", Key="k", VersionId=old, Tagging=tagset(v="older"))
    assert tags_of(s3, "vtags", "k", VersionId=old) == {"v": "older"}
    assert tags_of(s3, "vtags", "k", VersionId=new) == {"v": "new"}
    assert s3.get_object(Bucket="vtags", Key="k", VersionId=old)["Body"].read() == b"1"


def test_copy_and_multipart(s3):
    s3.create_bucket(Bucket="ctags")
    s3.put_object(Bucket="ctags", Key="src", Body=b"x", Tagging="from=src")
    s3.copy_object(Bucket="ctags", Key="same", CopySource="ctags/src")
    assert tags_of(s3, "ctags", "same") == {"from": "src"}
    s3.copy_object(Bucket="ctags", Key="new", CopySource="ctags/src",
                   TaggingDirective="REPLACE", Tagging="from=copy")
    assert tags_of(s3, "ctags", "new") == {"from": "copy"}
    with pytest.raises(ClientError) as exc:
        s3.copy_object(Bucket="ctags", Key="bad", CopySource="ctags/src",
                       TaggingDirective="REPLACE", Tagging="x" * 129 + "=1")
    assert code_of(exc) == (400, "InvalidTag")
    up = s3.create_multipart_upload(Bucket="ctags", Key="mp", Tagging="Hello=World&foo=bar")
    etag = s3.upload_part(Bucket="ctags", Key="mp", UploadId=up["UploadId"], PartNumber=1,
                          Body=b"abc")["ETag"]
    s3.complete_multipart_upload(Bucket="ctags", Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"ETag": etag,
                                                             "PartNumber": 1}]})
    assert tags_of(s3, "ctags", "mp") == {"Hello": "World", "foo": "bar"}
