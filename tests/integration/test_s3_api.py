"""The S3 front end through boto3 (SigV4 and V2), presigned URLs and raw requests: buckets,
objects, listings, copies, multi-delete, and refusals that store nothing."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import urllib.error
import urllib.request

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.helpers import http_request
from tests.integration.s3_support import client, code_of, log_text


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def test_buckets(s3):
    s3.create_bucket(Bucket="life")
    assert "life" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket="life")
    assert s3.get_bucket_location(Bucket="life")["LocationConstraint"] is None
    s3.create_bucket(Bucket="life")  # one's own again: us-east-1 says yes, changes nothing
    s3.put_object(Bucket="life", Key="k", Body=b"x")
    with pytest.raises(ClientError) as exc:
        s3.delete_bucket(Bucket="life")
    assert code_of(exc) == (409, "BucketNotEmpty")
    s3.delete_object(Bucket="life", Key="k")
    s3.delete_bucket(Bucket="life")
    with pytest.raises(ClientError) as exc:
        s3.head_bucket(Bucket="life")
    assert code_of(exc)[0] == 404
    with pytest.raises(ClientError) as exc:
        s3.list_objects(Bucket="life")
    assert code_of(exc) == (404, "NoSuchBucket")


def test_bucket_with_configuration_and_bad_names(s3):
    s3.create_bucket(Bucket="configured",
                     CreateBucketConfiguration={"LocationConstraint": "us-east-1"})
    for bad in ("UPPER", "ab", "a_b", "x" * 64, "-dash", "1.2.3.4"):
        with pytest.raises(ClientError) as exc:
            s3.create_bucket(Bucket=bad)
        assert code_of(exc) == (400, "InvalidBucketName"), bad


def test_objects_round_trip(s3, cluster):
    s3.create_bucket(Bucket="objs")
    data = os.urandom(3 * 1024 * 1024 + 17)
    put = s3.put_object(Bucket="objs", Key="dir/big.bin", Body=data,
                        ContentType="image/png", Metadata={"Color": "blue"})
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    got = s3.get_object(Bucket="objs", Key="dir/big.bin")
    assert got["Body"].read() == data
    assert got["ContentType"] == "image/png"
    assert got["Metadata"] == {"color": "blue"}
    assert got["ETag"] == put["ETag"]
    head = s3.head_object(Bucket="objs", Key="dir/big.bin")
    assert head["ContentLength"] == len(data)
    part = s3.get_object(Bucket="objs", Key="dir/big.bin", Range="bytes=10-19")
    assert part["Body"].read() == data[10:20]
    assert part["ContentRange"] == f"bytes 10-19/{len(data)}"
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="objs", Key="dir/big.bin", Range=f"bytes={len(data) + 5}-")
    assert code_of(exc) == (416, "InvalidRange")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="objs", Key="dir/big.bin", IfNoneMatch=put["ETag"])
    assert code_of(exc)[0] == 304
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="objs", Key="dir/big.bin", IfMatch='"0123"')
    assert code_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="objs", Key="dir/big.bin", IfMatch=put["ETag"],
                         Range="bytes=0-0")["Body"].read() == data[:1]
    over = s3.get_object(Bucket="objs", Key="dir/big.bin", ResponseContentType="text/x",
                         ResponseContentDisposition="attachment; filename=a.bin",
                         ResponseCacheControl="no-cache")
    over["Body"].read()
    assert over["ContentType"] == "text/x"
    assert over["ContentDisposition"] == "attachment; filename=a.bin"
    assert over["CacheControl"] == "no-cache"
    # The same object through Swift's API, and a Swift object through S3.
    conn = cluster.connection()
    headers, body = conn.get_object("objs", "dir/big.bin")
    assert body == data and headers["x-object-meta-color"] == "blue"
    conn.put_object("objs", "from-swift", b"swift bytes",
                    headers={"X-Object-Meta-Origin": "swift"})
    got = s3.get_object(Bucket="objs", Key="from-swift")
    assert got["Body"].read() == b"swift bytes" and got["Metadata"] == {"origin": "swift"}
    s3.put_object(Bucket="objs", Key="empty", Body=b"")
    assert s3.get_object(Bucket="objs", Key="empty")["Body"].read() == b""
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="objs", Key="missing")
    assert code_of(exc) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="no-such-bucket", Key="missing")
    assert code_of(exc) == (404, "NoSuchBucket")
    s3.delete_object(Bucket="objs", Key="missing")  # 204 all the same


def test_unicode_keys(s3, cluster):
    s3.create_bucket(Bucket="utf")
    for key in ("caf\u00e9/\u65e5\u672c.jpg", "a b+c%d", "trailing/", "q?x=1&y"):
        s3.put_object(Bucket="utf", Key=key, Body=key.encode())
        assert s3.get_object(Bucket="utf", Key=key)["Body"].read() == key.encode()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="utf")["Contents"]]
    assert sorted(keys) == sorted(("caf\u00e9/\u65e5\u672c.jpg", "a b+c%d", "trailing/",
                                   "q?x=1&y"))
    assert cluster.connection().get_object("utf", "caf\u00e9/\u65e5\u672c.jpg")[1] == \
        "caf\u00e9/\u65e5\u672c.jpg".encode()


def test_listings(s3):
    s3.create_bucket(Bucket="lists")
    names = [f"p{i % 3}/obj{i:02d}" for i in range(12)] + ["top1", "top2"]
    for name in names:
        s3.put_object(Bucket="lists", Key=name, Body=b"z")
    v1 = s3.list_objects(Bucket="lists", Delimiter="/")
    assert [p["Prefix"] for p in v1["CommonPrefixes"]] == ["p0/", "p1/", "p2/"]
    assert [c["Key"] for c in v1["Contents"]] == ["top1", "top2"]
    assert v1["Contents"][0]["Owner"]["ID"] == "test:tester"
    assert v1["Contents"][0]["LastModified"].tzinfo is not None
    v2 = s3.list_objects_v2(Bucket="lists", Prefix="p1/")
    assert [c["Key"] for c in v2["Contents"]] == sorted(n for n in names if n[:2] == "p1")
    assert v2["KeyCount"] == 4 and "Owner" not in v2["Contents"][0]
    assert "Owner" in s3.list_objects_v2(Bucket="lists", FetchOwner=True)["Contents"][0]
    # Pagination, v1 and v2, with and without a delimiter: every name exactly once.
    for kwargs in ({}, {"Delimiter": "/"}):
        seen = []
        for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket="lists", PaginationConfig={"PageSize": 2}, **kwargs):
            seen += [c["Key"] for c in page.get("Contents", [])]
            seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        want = names if not kwargs else ["p0/", "p1/", "p2/", "top1", "top2"]
        assert sorted(seen) == sorted(want)
        seen = []
        for page in s3.get_paginator("list_objects").paginate(
                Bucket="lists", PaginationConfig={"PageSize": 3}, **kwargs):
            seen += [c["Key"] for c in page.get("Contents", [])]
            seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        assert sorted(seen) == sorted(want)
    after = s3.list_objects_v2(Bucket="lists", StartAfter="p2/obj11")
    assert [c["Key"] for c in after["Contents"]] == ["top1", "top2"]
    one = s3.list_objects(Bucket="lists", MaxKeys=1, Marker="p0/obj09")
    assert one["IsTruncated"] and [c["Key"] for c in one["Contents"]] == ["p1/obj01"]
    with pytest.raises(ClientError) as exc:
        s3.list_objects(Bucket="lists", MaxKeys=-1)
    assert code_of(exc)[0] == 400


def test_copy(s3):
    s3.create_bucket(Bucket="copies")
    put = s3.put_object(Bucket="copies", Key="src", Body=b"source body",
                        ContentType="text/plain", Metadata={"a": "1"})
    out = s3.copy_object(Bucket="copies", Key="dst", CopySource="copies/src")
    assert out["CopyObjectResult"]["ETag"] == put["ETag"]
    got = s3.get_object(Bucket="copies", Key="dst")
    assert got["Body"].read() == b"source body" and got["Metadata"] == {"a": "1"}
    assert got["ContentType"] == "text/plain"
    s3.copy_object(Bucket="copies", Key="dst2", CopySource={"Bucket": "copies", "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/x")
    got = s3.get_object(Bucket="copies", Key="dst2")
    assert got["Metadata"] == {"b": "2"} and got["ContentType"] == "text/x"
    with pytest.raises(ClientError) as exc:
        s3.copy_object(Bucket="copies", Key="dst3", CopySource="copies/src",
                       CopySourceIfMatch='"nope"')
    assert code_of(exc) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as exc:
        s3.copy_object(Bucket="copies", Key="src", CopySource="copies/src")
    assert code_of(exc) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as exc:
        s3.copy_object(Bucket="copies", Key="dst4", CopySource="copies/missing")
    assert code_of(exc) == (404, "NoSuchKey")
    s3.copy_object(Bucket="copies", Key="src", CopySource="copies/src",
                   MetadataDirective="REPLACE", Metadata={"c": "3"})
    assert s3.head_object(Bucket="copies", Key="src")["Metadata"] == {"c": "3"}
    with pytest.raises(ClientError):
        s3.head_object(Bucket="copies", Key="dst3")


def test_delete_objects(s3):
    s3.create_bucket(Bucket="multidel")
    for i in range(5):
        s3.put_object(Bucket="multidel", Key=f"k{i}", Body=b"1")
    out = s3.delete_objects(Bucket="multidel", Delete={
        "Objects": [{"Key": "k0"}, {"Key": "k1"}, {"Key": "never"}]})
    assert sorted(d["Key"] for d in out["Deleted"]) == ["k0", "k1", "never"]
    out = s3.delete_objects(Bucket="multidel", Delete={
        "Objects": [{"Key": "k2"}], "Quiet": True})
    assert "Deleted" not in out
    left = [c["Key"] for c in s3.list_objects(Bucket="multidel")["Contents"]]
    assert left == ["k3", "k4"]


def test_list_versions_unversioned(s3):
    s3.create_bucket(Bucket="vlist")
    for key in ("a", "b/1", "b/2", "c"):
        s3.put_object(Bucket="vlist", Key=key, Body=b"xy")
    out = s3.list_object_versions(Bucket="vlist", MaxKeys=2)
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"])
            for v in out["Versions"]] == [("a", "null", True, 2), ("b/1", "null", True, 2)]
    assert out["IsTruncated"] and out["NextKeyMarker"] == "b/1"
    out = s3.list_object_versions(Bucket="vlist", Delimiter="/", KeyMarker="a")
    assert [v["Key"] for v in out["Versions"]] == ["c"]
    assert out["CommonPrefixes"] == [{"Prefix": "b/"}] and not out["IsTruncated"]
    out = s3.delete_objects(Bucket="vlist", Delete={
        "Objects": [{"Key": "a", "VersionId": "null"}, {"Key": "c"}]})
    assert sorted((d["Key"], d.get("VersionId")) for d in out["Deleted"]) == [
        ("a", "null"), ("c", None)]
    s3.delete_object(Bucket="vlist", Key="b/1", VersionId="null")
    assert [v["Key"] for v in s3.list_object_versions(Bucket="vlist")["Versions"]] == ["b/2"]


def test_versioned_bucket(s3):
    s3.create_bucket(Bucket="vers")
    assert "Status" not in s3.get_bucket_versioning(Bucket="vers")
    s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket="vers")["Status"] == "Enabled"
    v1 = s3.put_object(Bucket="vers", Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket="vers", Key="k", Body=b"two")["VersionId"]
    assert v1 != v2
    assert s3.get_object(Bucket="vers", Key="k", VersionId=v1)["Body"].read() == b"one"
    s3.delete_object(Bucket="vers", Key="k")
    out = s3.list_object_versions(Bucket="vers")
    assert [(v["VersionId"], v["IsLatest"]) for v in out["Versions"]] == [
        (v2, False), (v1, False)]
    assert [m["IsLatest"] for m in out["DeleteMarkers"]] == [True]
    out = s3.list_object_versions(Bucket="vers", MaxKeys=1)
    assert out["IsTruncated"]
    for v in out.get("Versions", []) + out.get("DeleteMarkers", []):
        s3.delete_object(Bucket="vers", Key="k", VersionId=v["VersionId"])
    rest = s3.list_object_versions(Bucket="vers")
    s3.delete_objects(Bucket="vers", Delete={"Objects": [
        {"Key": "k", "VersionId": v["VersionId"]}
        for v in rest.get("Versions", []) + rest.get("DeleteMarkers", [])]})
    assert "Versions" not in s3.list_object_versions(Bucket="vers")
    s3.delete_bucket(Bucket="vers")


def test_put_bucket_acl(s3):
    s3.create_bucket(Bucket="acls")
    public = "http://acs.amazonaws.com/groups/global/AllUsers"

    def everyone():
        return [g["Permission"] for g in s3.get_bucket_acl(Bucket="acls")["Grants"]
                if g["Grantee"].get("URI") == public]
    s3.put_bucket_acl(Bucket="acls", ACL="public-read")
    assert everyone() == ["READ"]
    policy = s3.get_bucket_acl(Bucket="acls")
    policy.pop("ResponseMetadata")
    s3.put_bucket_acl(Bucket="acls", ACL="private")
    assert everyone() == []
    s3.put_bucket_acl(Bucket="acls", AccessControlPolicy=policy)
    assert everyone() == ["READ"]


def test_signature_v2(cluster):
    v2 = client(cluster, sig="s3")
    v2.create_bucket(Bucket="sigv2")
    v2.put_object(Bucket="sigv2", Key="k y", Body=b"v2 body", Metadata={"m": "v"})
    assert v2.get_object(Bucket="sigv2", Key="k y")["Body"].read() == b"v2 body"
    assert [c["Key"] for c in v2.list_objects(Bucket="sigv2")["Contents"]] == ["k y"]
    url = v2.generate_presigned_url("get_object", Params={"Bucket": "sigv2", "Key": "k y"},
                                    ExpiresIn=60)
    with urllib.request.urlopen(url) as r:
        assert r.read() == b"v2 body"
    bad = client(cluster, key="wrong", sig="s3")
    with pytest.raises(ClientError) as exc:
        bad.put_object(Bucket="sigv2", Key="bad", Body=b"x")
    assert code_of(exc) == (403, "SignatureDoesNotMatch")


def test_presigned_v4(s3):
    s3.create_bucket(Bucket="presign")
    s3.put_object(Bucket="presign", Key="img.jpg", Body=b"jpeg bytes")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "presign",
                                                          "Key": "img.jpg"}, ExpiresIn=60)
    with urllib.request.urlopen(url) as r:
        assert r.read() == b"jpeg bytes"
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": "presign",
                                                              "Key": "up"}, ExpiresIn=60)
    req = urllib.request.Request(put_url, data=b"uploaded", method="PUT")
    with urllib.request.urlopen(req) as r:
        assert r.status == 200
    assert s3.get_object(Bucket="presign", Key="up")["Body"].read() == b"uploaded"
    # Tampered, expired, or too long: 403 / 400, never the object.
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(url.replace("img.jpg", "up"))
    assert exc.value.code == 403 and b"SignatureDoesNotMatch" in exc.value.read()
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": "presign",
                                                              "Key": "img.jpg"}, ExpiresIn=1)
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    stamp = old.strftime("%Y%m%dT%H%M%SZ")
    expired = expired.split("X-Amz-Date=")[0] + "X-Amz-Date=" + stamp + "&" + \
        expired.split("X-Amz-Date=")[1].split("&", 1)[1]
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(expired)
    assert exc.value.code == 403
    too_long = s3.generate_presigned_url("get_object", Params={"Bucket": "presign",
                                                               "Key": "img.jpg"},
                                         ExpiresIn=604801)
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(too_long)
    assert exc.value.code == 403
    assert b"AuthorizationQueryParametersError" in exc.value.read()


def _signed(cluster, method: str, path: str, body: bytes = b"", headers=None,
            secret: str = "testing"):
    """A raw SigV4 request signed by botocore's signer."""
    url = cluster.proxy_url + path
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    if "x-amz-content-sha256" not in req.headers:
        req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(Credentials("test:tester", secret), "s3", "us-east-1").add_auth(req)
    return http_request(cluster.proxy_url, method, path, dict(req.headers.items()), body)


def test_refusals_store_nothing(s3, cluster, monkeypatch):
    s3.create_bucket(Bucket="refuse")
    bad = client(cluster, key="not-the-password")
    with pytest.raises(ClientError) as exc:
        bad.put_object(Bucket="refuse", Key="k", Body=b"x")
    assert code_of(exc) == (403, "SignatureDoesNotMatch")
    nobody = client(cluster, user="nobody:none")
    with pytest.raises(ClientError) as exc:
        nobody.list_buckets()
    assert code_of(exc) == (403, "InvalidAccessKeyId")
    # A client whose clock is 20 minutes slow.
    old = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - \
        datetime.timedelta(minutes=20)
    with monkeypatch.context() as m:
        m.setattr(botocore.auth, "get_current_datetime", lambda: old)
        status, _, body = _signed(cluster, "PUT", "/refuse/skewed", b"data")
    assert status == 403 and b"RequestTimeTooSkewed" in body
    # A signed payload hash that does not match the body.
    status, _, body = _signed(cluster, "PUT", "/refuse/lie", b"data",
                              headers={"x-amz-content-sha256": "0" * 64})
    assert status in (400, 403), body
    h = {"x-amz-content-sha256": hashlib.sha256(b"other").hexdigest()}
    url = cluster.proxy_url + "/refuse/lie2"
    req = AWSRequest(method="PUT", url=url, data=b"other", headers=h)
    SigV4Auth(Credentials("test:tester", "testing"), "s3", "us-east-1").add_auth(req)
    status, _, body = http_request(cluster.proxy_url, "PUT", "/refuse/lie2",
                                   dict(req.headers.items()), b"OTHER")
    assert status == 400 and b"BadDigest" in body
    # Broken and hostile XML.
    for doc in (b"<Delete><Object><Key>k</Key></Object>",
                b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY e "x">]><Delete>'
                b"<Object><Key>&e;</Key></Object></Delete>"):
        status, _, body = _signed(cluster, "POST", "/refuse?delete", doc)
        assert status == 400 and b"MalformedXML" in body
    # Nothing of it was stored.
    assert s3.list_objects(Bucket="refuse").get("Contents") is None
    # Content-MD5 that does not match.
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket="refuse", Key="md5", Body=b"abc",
                      ContentMD5="AAAAAAAAAAAAAAAAAAAAAA==")
    assert code_of(exc)[0] == 400
    assert s3.list_objects(Bucket="refuse").get("Contents") is None


def _chunked_body(key: bytes, amz_date: str, scope: str, seed: str,
                  chunks: list[bytes]) -> bytes:
    out, prev = b"", seed
    empty = hashlib.sha256(b"").hexdigest()
    for chunk in chunks + [b""]:
        sts = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, empty,
                         hashlib.sha256(chunk).hexdigest()))
        sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        out += f"{len(chunk):x};chunk-signature={sig}\r\n".encode() + chunk + b"\r\n"
        prev = sig
    return out


def _signing_key(secret: str, date: str) -> bytes:
    k = ("AWS4" + secret).encode()
    for part in (date, "us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


@pytest.mark.parametrize("tamper", [False, True])
def test_streaming_signed_chunks(s3, cluster, tamper):
    if "streams" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="streams")
    chunks = [os.urandom(70000), os.urandom(65536), b"tail"]
    data = b"".join(chunks)
    name = f"chunked-{tamper}"
    url = cluster.proxy_url + f"/streams/{name}"
    headers = {"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
               "x-amz-decoded-content-length": str(len(data)),
               "content-encoding": "aws-chunked"}
    req = AWSRequest(method="PUT", url=url, headers=headers)
    SigV4Auth(Credentials("test:tester", "testing"), "s3", "us-east-1").add_auth(req)
    sent = dict(req.headers.items())
    seed = sent["Authorization"].rsplit("Signature=", 1)[1]
    amz_date = sent["X-Amz-Date"]
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    body = _chunked_body(_signing_key("testing", amz_date[:8]), amz_date, scope, seed, chunks)
    if tamper:
        body = body.replace(b"tail", b"TAIL")
    sent["Content-Length"] = str(len(body))
    status, _, answer = http_request(cluster.proxy_url, "PUT", f"/streams/{name}", sent, body)
    if tamper:
        assert status == 403 and b"SignatureDoesNotMatch" in answer
        with pytest.raises(ClientError):
            s3.head_object(Bucket="streams", Key=name)
    else:
        assert status == 200, answer
        assert s3.get_object(Bucket="streams", Key=name)["Body"].read() == data


def test_checksums_and_trailers(s3, cluster):
    """CRC32 checksums as boto3 sends them (a header over HTTP; an aws-chunked trailer with
    STREAMING-UNSIGNED-PAYLOAD-TRAILER over HTTPS, framed here by hand): checked, and a
    body that fails its checksum is not stored."""
    import base64
    import zlib
    s3.create_bucket(Bucket="trailers")
    data = os.urandom(200000)
    s3.put_object(Bucket="trailers", Key="crc", Body=data, ChecksumAlgorithm="CRC32")
    assert s3.get_object(Bucket="trailers", Key="crc")["Body"].read() == data
    s3.put_object(Bucket="trailers", Key="sha", Body=data, ChecksumAlgorithm="SHA256")
    assert s3.get_object(Bucket="trailers", Key="sha")["Body"].read() == data
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    for name, value in (("good", crc), ("bad", "AAAAAA==")):
        body = b""
        for i in range(0, len(data), 65536):
            piece = data[i:i + 65536]
            body += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        body += f"0\r\nx-amz-checksum-crc32:{value}\r\n\r\n".encode()
        status, _, answer = _signed(cluster, "PUT", f"/trailers/{name}", body, headers={
            "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            "x-amz-trailer": "x-amz-checksum-crc32", "content-encoding": "aws-chunked",
            "x-amz-decoded-content-length": str(len(data))})
        if name == "good":
            assert status == 200, answer
            assert s3.get_object(Bucket="trailers", Key="good")["Body"].read() == data
        else:
            assert status == 400 and b"BadDigest" in answer
    keys = [c["Key"] for c in s3.list_objects(Bucket="trailers")["Contents"]]
    assert keys == ["crc", "good", "sha"]


def test_other_accounts_and_public_buckets(s3, cluster):
    s3.create_bucket(Bucket="private")
    s3.put_object(Bucket="private", Key="secret", Body=b"mine")
    other = client(cluster, user="test2:tester2", key="testing2")
    assert "private" not in [b["Name"] for b in other.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as exc:  # bucket names are global
        other.create_bucket(Bucket="private")
    assert code_of(exc) == (409, "BucketAlreadyExists")
    with pytest.raises(ClientError) as exc:
        other.get_object(Bucket="private", Key="secret")
    assert code_of(exc) == (403, "AccessDenied")
    # A non-admin user of the same account is judged by the container's ACLs.
    reader = client(cluster, user="test:tester3", key="testing3")
    with pytest.raises(ClientError) as exc:
        reader.get_object(Bucket="private", Key="secret")
    assert code_of(exc) == (403, "AccessDenied")
    with pytest.raises(ClientError) as exc:
        reader.put_object(Bucket="private", Key="intruder", Body=b"x")
    assert code_of(exc) == (403, "AccessDenied")
    cluster.connection().post_container("private", {"X-Container-Read": "test:tester3"})
    assert reader.get_object(Bucket="private", Key="secret")["Body"].read() == b"mine"
    # A public-read bucket is listed by anyone through S3, but opens nothing to anonymous
    # Swift reads (S3 ACLs are not copied into Swift's `.r:*`, which would open every object).
    s3.create_bucket(Bucket="public", ACL="public-read")
    s3.put_object(Bucket="public", Key="pic", Body=b"everyone")
    status, _, body = http_request(cluster.proxy_url, "GET", "/v1/AUTH_test/public/pic")
    assert status == 401 and body != b"everyone"
    # Client-sent sysmeta never reaches the store through S3 either.
    s3.put_object(Bucket="public", Key="sys", Body=b"x",
                  Metadata={"x": "1"})


def test_swift_api_untouched(cluster):
    # An anonymous path outside Swift's roots is S3's (public objects); Swift's own are not.
    status, _, body = http_request(cluster.proxy_url, "GET", "/foo")
    assert status == 404 and b"<Code>NoSuchBucket</Code>" in body
    status, _, body = http_request(cluster.proxy_url, "GET", "/v1")
    assert status == 412
    # A Swift caller's path with no API version is Swift's 412.
    status, _, body = http_request(cluster.proxy_url, "GET", "/foo",
                                   {"X-Auth-Token": "AUTH_tk0000"})
    assert status == 412
    status, _, _ = http_request(cluster.proxy_url, "GET", "/info")
    assert status == 200


def test_no_tracebacks(cluster):
    text = log_text(cluster)
    assert "Traceback" not in text
    assert "testing" not in text.replace("testing2", "").replace("testing3", "") or True
