"""GetObjectAttributes, part GETs (`partNumber`), delete markers, copies of versions, and the
parts of a replaced multipart object, through boto3."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from urllib.parse import quote

import pytest
from botocore.exceptions import ClientError

from swiftlite.common.config import load_config
from swiftlite.common.reserved import reserved_name
from swiftlite.ring import Ring
from tests.helpers import http_request, wait_for
from tests.integration.s3_support import client, log_text
from tests.integration.test_s3_api import code_of

PART = 5 * 1024 * 1024
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def _multipart(s3, bucket: str, key: str, bodies: list[bytes], **create) -> dict:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    parts = []
    for number, body in enumerate(bodies, 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                           Body=body, **({"ChecksumAlgorithm": create["ChecksumAlgorithm"]}
                                         if "ChecksumAlgorithm" in create else {}))
        parts.append({"ETag": r["ETag"], "PartNumber": number})
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                        MultipartUpload={"Parts": parts})


def test_plain_object_attributes(s3):
    s3.create_bucket(Bucket="attrs")
    put = s3.put_object(Bucket="attrs", Key="plain", Body=b"hello", ChecksumAlgorithm="SHA1")
    got = s3.get_object_attributes(Bucket="attrs", Key="plain", ObjectAttributes=ALL)
    assert got["ETag"] == put["ETag"].strip('"')
    assert got["ObjectSize"] == 5
    assert got["StorageClass"] == "STANDARD"
    assert got["Checksum"]["ChecksumSHA1"] == put["ChecksumSHA1"]
    assert "ObjectParts" not in got and "VersionId" not in got
    only = s3.get_object_attributes(Bucket="attrs", Key="plain", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == 5 and "ETag" not in only


def test_attribute_refusals(s3):
    s3.create_bucket(Bucket="attrs-bad")
    s3.put_object(Bucket="attrs-bad", Key="k", Body=b"x")
    with pytest.raises(ClientError) as exc:
        s3.get_object_attributes(Bucket="attrs-bad", Key="k", ObjectAttributes=["Colour"])
    assert code_of(exc) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as exc:
        s3.get_object_attributes(Bucket="attrs-bad", Key="missing", ObjectAttributes=ALL)
    assert code_of(exc) == (404, "NoSuchKey")


def test_multipart_attributes_paged(s3):
    s3.create_bucket(Bucket="attrs-mp")
    bodies = [os.urandom(PART) for _ in range(3)] + [b"tail"]
    done = _multipart(s3, "attrs-mp", "big", bodies, ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(Bucket="attrs-mp", Key="big", ObjectAttributes=ALL,
                                   MaxParts=2, PartNumberMarker=1)
    assert got["ETag"] == done["ETag"].strip('"')
    assert got["ObjectSize"] == sum(map(len, bodies))
    assert got["Checksum"]["ChecksumSHA256"] == done["ChecksumSHA256"]
    parts = got["ObjectParts"]
    assert parts["TotalPartsCount"] == 4
    assert (parts["PartNumberMarker"], parts["NextPartNumberMarker"]) == (1, 3)
    assert parts["IsTruncated"] is True and parts["MaxParts"] == 2
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(2, PART), (3, PART)]
    assert parts["Parts"][0]["ChecksumSHA256"] == \
        base64.b64encode(hashlib.sha256(bodies[1]).digest()).decode()
    last = s3.get_object_attributes(Bucket="attrs-mp", Key="big", ObjectAttributes=ALL,
                                    PartNumberMarker=3)["ObjectParts"]
    assert last["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"]) for p in last["Parts"]] == [(4, 4)]


def test_versioned_attributes(s3):
    s3.create_bucket(Bucket="attrs-ver")
    s3.put_bucket_versioning(Bucket="attrs-ver",
                             VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket="attrs-ver", Key="k", Body=b"one")
    s3.put_object(Bucket="attrs-ver", Key="k", Body=b"second")
    got = s3.get_object_attributes(Bucket="attrs-ver", Key="k", VersionId=first["VersionId"],
                                   ObjectAttributes=ALL)
    assert got["VersionId"] == first["VersionId"]
    assert got["ObjectSize"] == 3 and got["ETag"] == first["ETag"].strip('"')


def test_part_gets(s3):
    s3.create_bucket(Bucket="parts")
    bodies = [os.urandom(PART), os.urandom(PART), os.urandom(10)]
    done = _multipart(s3, "parts", "mp", bodies)
    for number, body in enumerate(bodies, 1):
        got = s3.get_object(Bucket="parts", Key="mp", PartNumber=number)
        assert got["PartsCount"] == 3 and got["ETag"] == done["ETag"]
        assert got["ContentLength"] == len(body) and got["Body"].read() == body
        head = s3.head_object(Bucket="parts", Key="mp", PartNumber=number)
        assert head["ContentLength"] == len(body) and head["PartsCount"] == 3
    for method in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as exc:
            method(Bucket="parts", Key="mp", PartNumber=4)
        assert code_of(exc)[0] == 400
    # A plain object is its own part 1, and has no other.
    put = s3.put_object(Bucket="parts", Key="plain", Body=b"body")
    got = s3.get_object(Bucket="parts", Key="plain", PartNumber=1)
    assert got["Body"].read() == b"body" and got["ETag"] == put["ETag"]
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="parts", Key="plain", PartNumber=2)
    assert code_of(exc) == (400, "InvalidPart")


def _hidden_rows(cluster, bucket: str) -> set[str]:
    """The names in the bucket's hidden uploads container, from each of its replicas."""
    conf = load_config(cluster.nodes[0]["conf"], "container-server")
    container = reserved_name("mpu", bucket)
    part, nodes = Ring.from_conf(conf, "container").get_nodes("AUTH_test", container)
    names: set[str] = set()
    for n in nodes:
        status, _, body = http_request(
            f"http://{n['ip']}:{n['port']}", "GET",
            f"/{n['device']}/{part}/AUTH_test/{quote(container, safe='')}?format=json",
            {"X-Backend-Allow-Reserved-Names": "true"})
        assert status in (200, 204, 404), status
        if status == 200:
            names |= {r["name"] for r in json.loads(body)}
    return names


def test_overwritten_multipart_leaves_no_parts(cluster, s3):
    """Completing an upload over a multipart object deletes the old object's parts (the
    bucket keeps no versions); a plain DELETE takes the new object's."""
    s3.create_bucket(Bucket="leak")
    _multipart(s3, "leak", "k", [os.urandom(PART), b"old"])
    old = wait_for(lambda: _hidden_rows(cluster, "leak"))
    assert len(old) == 2
    _multipart(s3, "leak", "k", [os.urandom(PART), b"new"])
    new = wait_for(lambda: (rows := _hidden_rows(cluster, "leak")) and not rows & old and
                   rows, what="the old parts gone")
    assert len(new) == 2
    s3.delete_object(Bucket="leak", Key="k")
    wait_for(lambda: not _hidden_rows(cluster, "leak"), what="the parts deleted")


def test_deleted_multipart_version_leaves_no_parts(cluster, s3):
    """A multipart object's version deleted by id takes its parts; the other keeps its."""
    s3.create_bucket(Bucket="leak-v")
    s3.put_bucket_versioning(Bucket="leak-v", VersioningConfiguration={"Status": "Enabled"})
    first = _multipart(s3, "leak-v", "k", [os.urandom(PART), b"one"])["VersionId"]
    old = wait_for(lambda: _hidden_rows(cluster, "leak-v"))
    second = os.urandom(PART) + b"two"
    _multipart(s3, "leak-v", "k", [second[:PART], second[PART:]])
    wait_for(lambda: len(_hidden_rows(cluster, "leak-v")) == 4)
    s3.delete_object(Bucket="leak-v", Key="k", VersionId=first)
    wait_for(lambda: (rows := _hidden_rows(cluster, "leak-v")) and len(rows) == 2 and
             not rows & old, what="the deleted version's parts gone")
    assert s3.get_object(Bucket="leak-v", Key="k")["Body"].read() == second


def test_delete_markers_and_version_copies(s3):
    s3.create_bucket(Bucket="markers")
    s3.put_object(Bucket="markers", Key="plain", Body=b"x")
    s3.delete_object(Bucket="markers", Key="plain")
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="markers", Key="plain")
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == \
        "false"
    s3.create_bucket(Bucket="markers-v")
    s3.put_bucket_versioning(Bucket="markers-v",
                             VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="markers-v", Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket="markers-v", Key="k", Body=b"two")["VersionId"]
    # Copying a version, not the current object.
    s3.copy_object(Bucket="markers-v", Key="copy",
                   CopySource={"Bucket": "markers-v", "Key": "k", "VersionId": v1})
    assert s3.get_object(Bucket="markers-v", Key="copy")["Body"].read() == b"one"
    # Deleting the current version makes the previous one current.
    s3.delete_object(Bucket="markers-v", Key="k", VersionId=v2)
    assert s3.get_object(Bucket="markers-v", Key="k")["Body"].read() == b"one"
    gone = s3.delete_object(Bucket="markers-v", Key="k")
    assert gone["DeleteMarker"] is True
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket="markers-v", Key="k")
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == \
        "true"
    markers = s3.list_object_versions(Bucket="markers-v", Prefix="k")["DeleteMarkers"]
    assert [m["VersionId"] for m in markers] == [gone["VersionId"]]
    many = s3.delete_objects(Bucket="markers-v", Delete={"Objects": [{"Key": "other"}]})
    assert many["Deleted"][0]["DeleteMarker"] is True
    assert many["Deleted"][0]["DeleteMarkerVersionId"]


def test_no_tracebacks(cluster):
    assert "Traceback" not in log_text(cluster)
