"""S3's additional checksums through boto3: each algorithm verified on PUT and shown with
`ChecksumMode=ENABLED`, a wrong one refused (BadDigest) with nothing stored, trailing
checksums in aws-chunked bodies, and multipart uploads' part, composite and full-object
checksums."""

from __future__ import annotations

import base64
import hashlib
import os

import pytest
from awscrt import checksums as crt
from botocore.exceptions import ClientError

from tests.integration.s3_support import client, log_text
from tests.integration.test_s3_api import _signed, code_of


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def _crc(fn, width: int):
    return lambda data: fn(data).to_bytes(width, "big")


RAW = {
    "CRC32": _crc(crt.crc32, 4),
    "CRC32C": _crc(crt.crc32c, 4),
    "CRC64NVME": _crc(crt.crc64nvme, 8),
    "SHA1": lambda d: hashlib.sha1(d).digest(),
    "SHA256": lambda d: hashlib.sha256(d).digest(),
}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def expected(algorithm: str, data: bytes) -> str:
    return b64(RAW[algorithm](data))


def keys(s3, bucket: str) -> list[str]:
    return [c["Key"] for c in s3.list_objects(Bucket=bucket).get("Contents", [])]


@pytest.mark.parametrize("algorithm", sorted(RAW))
def test_each_algorithm_verified_and_returned(s3, algorithm):
    bucket = f"sums-{algorithm.lower()}"
    s3.create_bucket(Bucket=bucket)
    data = os.urandom(300_000)  # past the size a PUT buffers: checked as it streams
    want = expected(algorithm, data)
    put = s3.put_object(Bucket=bucket, Key="obj", Body=data, ChecksumAlgorithm=algorithm,
                        **{f"Checksum{algorithm}": want})
    assert put[f"Checksum{algorithm}"] == want
    assert f"Checksum{algorithm}" not in s3.head_object(Bucket=bucket, Key="obj")
    head = s3.head_object(Bucket=bucket, Key="obj", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == want
    assert head["ChecksumType"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bucket, Key="obj", ChecksumMode="ENABLED")
    assert got[f"Checksum{algorithm}"] == want
    assert got["Body"].read() == data
    # A range is not the object: its checksum is not shown.
    part = s3.get_object(Bucket=bucket, Key="obj", Range="bytes=0-9", ChecksumMode="ENABLED")
    assert f"Checksum{algorithm}" not in part
    # A wrong checksum (well formed, or not a checksum at all) stores nothing.
    for wrong in (expected(algorithm, b"other"), "bad"):
        with pytest.raises(ClientError) as exc:
            s3.put_object(Bucket=bucket, Key="wrong", Body=data, ChecksumAlgorithm=algorithm,
                          **{f"Checksum{algorithm}": wrong})
        assert code_of(exc) == (400, "BadDigest")
    assert keys(s3, bucket) == ["obj"]


def test_default_checksum_of_boto3(s3):
    """boto3's default (a CRC32 it computes for every PutObject) is kept and shown."""
    s3.create_bucket(Bucket="sums-default")
    data = os.urandom(5000)
    s3.put_object(Bucket="sums-default", Key="k", Body=data)
    head = s3.head_object(Bucket="sums-default", Key="k", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == expected("CRC32", data)


def test_two_checksums_refused(cluster, s3):
    s3.create_bucket(Bucket="sums-two")
    data = b"payload"
    status, _, body = _signed(cluster, "PUT", "/sums-two/k", data, headers={
        "x-amz-checksum-crc32": expected("CRC32", data),
        "x-amz-checksum-sha1": expected("SHA1", data)})
    assert status == 400 and b"InvalidRequest" in body
    assert keys(s3, "sums-two") == []


@pytest.mark.parametrize("algorithm", ["CRC32C", "CRC64NVME", "SHA256"])
def test_trailing_checksums(cluster, s3, algorithm):
    """An aws-chunked body (STREAMING-UNSIGNED-PAYLOAD-TRAILER, as boto3 sends over HTTPS)
    with the checksum in its trailer: verified, kept, and a wrong one stores nothing."""
    bucket = f"trail-{algorithm.lower()}"
    s3.create_bucket(Bucket=bucket)
    data = os.urandom(150_000)
    name = f"x-amz-checksum-{algorithm.lower()}"
    for key, value in (("good", expected(algorithm, data)),
                       ("bad", expected(algorithm, b"nope"))):
        body = b""
        for i in range(0, len(data), 65536):
            piece = data[i:i + 65536]
            body += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        body += f"0\r\n{name}:{value}\r\n\r\n".encode()
        status, headers, answer = _signed(cluster, "PUT", f"/{bucket}/{key}", body, headers={
            "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            "x-amz-trailer": name, "content-encoding": "aws-chunked",
            "x-amz-decoded-content-length": str(len(data))})
        if key == "good":
            assert status == 200, answer
            assert {k.lower(): v for k, v in headers.items()}[name] == value
        else:
            assert status == 400 and b"BadDigest" in answer
    assert keys(s3, bucket) == ["good"]
    head = s3.head_object(Bucket=bucket, Key="good", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == expected(algorithm, data)


PART = 5 * 1024 * 1024


def _upload(s3, bucket: str, key: str, algorithm: str, kind: str | None,
            bodies: list[bytes]) -> tuple[str, list[dict]]:
    extra = {"ChecksumType": kind} if kind else {}
    made = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm,
                                      **extra)
    assert made["ChecksumAlgorithm"] == algorithm
    upload = made["UploadId"]
    parts = []
    for number, body in enumerate(bodies, 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                           Body=body, ChecksumAlgorithm=algorithm)
        assert r[f"Checksum{algorithm}"] == expected(algorithm, body)
        parts.append({"ETag": r["ETag"], "PartNumber": number,
                      f"Checksum{algorithm}": r[f"Checksum{algorithm}"]})
    return upload, parts


def test_multipart_composite(s3):
    s3.create_bucket(Bucket="mp-sums")
    bodies = [os.urandom(PART), os.urandom(1000)]
    upload, parts = _upload(s3, "mp-sums", "comp", "SHA256", None, bodies)
    listed = s3.list_parts(Bucket="mp-sums", Key="comp", UploadId=upload)
    assert listed["ChecksumAlgorithm"] == "SHA256"
    assert [p["ChecksumSHA256"] for p in listed["Parts"]] == \
        [expected("SHA256", b) for b in bodies]
    composite = b64(hashlib.sha256(b"".join(hashlib.sha256(b).digest()
                                             for b in bodies)).digest()) + "-2"
    # A whole-object checksum that is not the upload's: refused, nothing made.
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="mp-sums", Key="comp", UploadId=upload,
                                     MultipartUpload={"Parts": parts},
                                     ChecksumSHA256=expected("SHA256", b"x") + "-2")
    assert code_of(exc) == (400, "BadDigest")
    assert keys(s3, "mp-sums") == []
    done = s3.complete_multipart_upload(Bucket="mp-sums", Key="comp", UploadId=upload,
                                        MultipartUpload={"Parts": parts},
                                        ChecksumSHA256=composite)
    assert done["ChecksumSHA256"] == composite and done["ChecksumType"] == "COMPOSITE"
    head = s3.head_object(Bucket="mp-sums", Key="comp", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == composite
    # A part read shows that part's checksum.
    first = s3.get_object(Bucket="mp-sums", Key="comp", PartNumber=1, ChecksumMode="ENABLED")
    assert first["ChecksumSHA256"] == expected("SHA256", bodies[0])
    assert first["Body"].read() == bodies[0]
    # Completing again answers as the first completion did.
    again = s3.complete_multipart_upload(Bucket="mp-sums", Key="comp", UploadId=upload,
                                         MultipartUpload={"Parts": parts})
    assert (again["ETag"], again["ChecksumSHA256"]) == (done["ETag"], composite)


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
def test_multipart_full_object(s3, algorithm):
    """FULL_OBJECT: the CRC of the whole object, combined from the parts'."""
    bucket = f"mp-full-{algorithm.lower()}"
    s3.create_bucket(Bucket=bucket)
    bodies = [os.urandom(PART), os.urandom(PART), os.urandom(777)]
    upload, parts = _upload(s3, bucket, "full", algorithm, "FULL_OBJECT", bodies)
    whole = expected(algorithm, b"".join(bodies))
    done = s3.complete_multipart_upload(Bucket=bucket, Key="full", UploadId=upload,
                                        MultipartUpload={"Parts": parts},
                                        **{f"Checksum{algorithm}": whole})
    assert done[f"Checksum{algorithm}"] == whole and done["ChecksumType"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert got[f"Checksum{algorithm}"] == whole
    assert got["Body"].read() == b"".join(bodies)  # boto3 checks it against the body too


def test_multipart_refusals(s3):
    s3.create_bucket(Bucket="mp-refuse")
    for algorithm, kind in (("SHA256", "FULL_OBJECT"), ("CRC64NVME", "COMPOSITE")):
        with pytest.raises(ClientError) as exc:
            s3.create_multipart_upload(Bucket="mp-refuse", Key="k",
                                       ChecksumAlgorithm=algorithm, ChecksumType=kind)
        assert code_of(exc) == (400, "InvalidRequest")
    assert s3.list_multipart_uploads(Bucket="mp-refuse").get("Uploads") is None
    # A part whose checksum does not match its body is not kept.
    upload = s3.create_multipart_upload(Bucket="mp-refuse", Key="k",
                                        ChecksumAlgorithm="SHA1")["UploadId"]
    with pytest.raises(ClientError) as exc:
        s3.upload_part(Bucket="mp-refuse", Key="k", UploadId=upload, PartNumber=1,
                       Body=b"data", ChecksumSHA1=expected("SHA1", b"other"))
    assert code_of(exc) == (400, "BadDigest")
    assert s3.list_parts(Bucket="mp-refuse", Key="k", UploadId=upload).get("Parts") is None
    # A part checksum named in the completion that is not the part's.
    r = s3.upload_part(Bucket="mp-refuse", Key="k", UploadId=upload, PartNumber=1,
                       Body=b"data", ChecksumAlgorithm="SHA1")
    with pytest.raises(ClientError) as exc:
        s3.complete_multipart_upload(Bucket="mp-refuse", Key="k", UploadId=upload,
                                     MultipartUpload={"Parts": [{
                                         "ETag": r["ETag"], "PartNumber": 1,
                                         "ChecksumSHA1": expected("SHA1", b"x")}]})
    assert code_of(exc) == (400, "InvalidPart")
    assert keys(s3, "mp-refuse") == []


def test_checksum_headers_of_raw_get(cluster, s3):
    """Without checksum mode, a GET shows no checksum (and no sysmeta leaks)."""
    s3.create_bucket(Bucket="sums-raw")
    s3.put_object(Bucket="sums-raw", Key="k", Body=b"abc", ChecksumAlgorithm="SHA1")
    status, headers, _ = _signed(cluster, "GET", "/sums-raw/k")
    assert status == 200
    assert not any(k.lower().startswith(("x-amz-checksum", "x-object-sysmeta"))
                   for k in headers)


@pytest.mark.parametrize("case", ["good", "wrong-sum", "tampered"])
def test_signed_trailer(cluster, s3, case):
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER: signed chunks, then a trailer whose
    signature chains from the last chunk's: verified, and neither a wrong checksum nor a
    trailer changed after signing stores anything."""
    import hmac

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.helpers import http_request
    from tests.integration.test_s3_api import _signing_key
    bucket = "signed-trailer"
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    chunks = [os.urandom(70000), b"tail"]
    data = b"".join(chunks)
    value = expected("CRC32C", data if case != "wrong-sum" else b"other")
    headers = {"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
               "x-amz-decoded-content-length": str(len(data)),
               "x-amz-trailer": "x-amz-checksum-crc32c", "content-encoding": "aws-chunked"}
    req = AWSRequest(method="PUT", url=cluster.proxy_url + f"/{bucket}/{case}",
                     headers=headers)
    SigV4Auth(Credentials("test:tester", "testing"), "s3", "us-east-1").add_auth(req)
    sent = dict(req.headers.items())
    prev = sent["Authorization"].rsplit("Signature=", 1)[1]
    amz_date = sent["X-Amz-Date"]
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    key = _signing_key("testing", amz_date[:8])

    def sign(kind: str, digest: str) -> str:
        sts = "\n".join((kind, amz_date, scope, prev, *(
            [hashlib.sha256(b"").hexdigest()] if kind.endswith("PAYLOAD") else []), digest))
        return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    body = b""
    for chunk in chunks + [b""]:
        prev = sign("AWS4-HMAC-SHA256-PAYLOAD", hashlib.sha256(chunk).hexdigest())
        body += f"{len(chunk):x};chunk-signature={prev}\r\n".encode() + chunk + \
            (b"\r\n" if chunk else b"")
    trailer = f"x-amz-checksum-crc32c:{value}\n"
    signature = sign("AWS4-HMAC-SHA256-TRAILER", hashlib.sha256(trailer.encode()).hexdigest())
    if case == "tampered":
        value = expected("CRC32C", b"forged")
    body += f"x-amz-checksum-crc32c:{value}\r\nx-amz-trailer-signature:{signature}\r\n\r\n" \
        .encode()
    sent["Content-Length"] = str(len(body))
    status, _, answer = http_request(cluster.proxy_url, "PUT", f"/{bucket}/{case}", sent, body)
    if case == "good":
        assert status == 200, answer
        head = s3.head_object(Bucket=bucket, Key="good", ChecksumMode="ENABLED")
        assert head["ChecksumCRC32C"] == expected("CRC32C", data)
    else:
        assert (status, b"BadDigest" in answer) == (400, True) if case == "wrong-sum" else \
            (status, b"SignatureDoesNotMatch" in answer) == (403, True), answer
        with pytest.raises(ClientError):
            s3.head_object(Bucket=bucket, Key=case)


def test_part_checksum_computed_when_not_sent(s3):
    """A part sent with another algorithm's checksum (or none) gets the upload's computed."""
    s3.create_bucket(Bucket="mp-computed")
    upload = s3.create_multipart_upload(Bucket="mp-computed", Key="k",
                                        ChecksumAlgorithm="SHA256")["UploadId"]
    body = os.urandom(1000)
    r = s3.upload_part(Bucket="mp-computed", Key="k", UploadId=upload, PartNumber=1,
                       Body=body, ChecksumAlgorithm="CRC32")
    assert r["ChecksumSHA256"] == expected("SHA256", body)
    done = s3.complete_multipart_upload(Bucket="mp-computed", Key="k", UploadId=upload,
                                        MultipartUpload={"Parts": [
                                            {"ETag": r["ETag"], "PartNumber": 1}]})
    assert done["ChecksumSHA256"] == \
        b64(hashlib.sha256(hashlib.sha256(body).digest()).digest()) + "-1"


def test_no_tracebacks(cluster):
    assert "Traceback" not in log_text(cluster)
