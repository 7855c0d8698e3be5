"""S3 odds and ends through boto3 and raw requests: re-creating one's bucket, usage and
limits (HeadBucket read-stats, GET /?usage, max_buckets), ListBuckets paging, listing
details, stored Cache-Control/Expires, and the errors for missing buckets and anonymous
callers, also before an Expect: 100-continue body."""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from swiftlite.common.config import load_sections
from tests.helpers import free_port, wait_for
from tests.integration.s3_support import client, code_of


@pytest.fixture(scope="module")
def s3(cluster):
    return client(cluster)


def with_query(s3, operation: str, extra: str):
    """Register a handler adding `extra` to the operation's query; returns it (unregister)."""
    def add(params, **_):
        params["url"] += ("&" if "?" in params["url"] else "?") + extra
    s3.meta.events.register(f"before-call.s3.{operation}", add)
    return add


def test_recreate_own_bucket_keeps_objects(s3):
    s3.create_bucket(Bucket="again")
    s3.put_object(Bucket="again", Key="k", Body=b"kept")
    s3.create_bucket(Bucket="again")  # us-east-1: a success that changes nothing
    assert s3.get_object(Bucket="again", Key="k")["Body"].read() == b"kept"


def test_head_bucket_read_stats(s3):
    s3.create_bucket(Bucket="stats")
    for key in ("a", "b", "c"):
        s3.put_object(Bucket="stats", Key=key, Body=b"xyz")
    add = with_query(s3, "HeadBucket", "read-stats=true")
    try:
        def counted() -> dict:
            h = s3.head_bucket(Bucket="stats")["ResponseMetadata"]["HTTPHeaders"]
            return h if h.get("x-rgw-object-count") == "3" else {}
        headers = wait_for(counted, 10, what="container stats")
    finally:
        s3.meta.events.unregister("before-call.s3.HeadBucket", add)
    assert headers["x-rgw-bytes-used"] == "9"
    assert headers["x-rgw-quota-max-buckets"] == "1000"
    plain = s3.head_bucket(Bucket="stats")["ResponseMetadata"]["HTTPHeaders"]
    assert "x-rgw-object-count" not in plain


def test_account_usage(cluster):
    s3 = client(cluster)
    body: dict[str, bytes] = {}

    def keep(http_response, **_):
        body["xml"] = http_response.content
    add = with_query(s3, "ListBuckets", "usage")
    s3.meta.events.register("after-call.s3.ListBuckets", keep)
    s3.list_buckets()
    summary = ET.fromstring(body["xml"]).find("Summary")
    assert summary is not None
    assert summary.findtext("QuotaMaxBuckets") == "1000"
    assert summary.findtext("QuotaMaxBytes") == "-1"
    assert summary.findtext("QuotaMaxObjCountPerBucket") == "-1"
    assert int(summary.findtext("TotalObjects") or "-1") >= 0
    s3.meta.events.unregister("before-call.s3.ListBuckets", add)


def test_list_buckets_pages(s3):
    names = ["page-a", "page-b", "page-c"]
    for name in [*names, "other-page"]:
        s3.create_bucket(Bucket=name)
    seen, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_buckets(MaxBuckets=2, Prefix="page-", **kw)
        assert len(page["Buckets"]) <= 2
        seen += [b["Name"] for b in page["Buckets"]]
        token = page.get("ContinuationToken")
        if not token:
            break
    assert seen == names
    everything = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert set(names) | {"other-page"} <= set(everything)
    for bad in ("0", "10001", "x"):  # boto3 would refuse these itself: sent raw
        add = with_query(s3, "ListBuckets", "max-buckets=" + bad)
        try:
            with pytest.raises(ClientError) as exc:
                s3.list_buckets()
            assert code_of(exc) == (400, "InvalidArgument")
        finally:
            s3.meta.events.unregister("before-call.s3.ListBuckets", add)


def test_listing_details(s3):
    s3.create_bucket(Bucket="listing")
    for key in ("a/1", "a/2", "b"):
        s3.put_object(Bucket="listing", Key=key, Body=b"x")
    add = with_query(s3, "ListObjects", "allow-unordered=true")
    try:
        assert len(s3.list_objects(Bucket="listing")["Contents"]) == 3
        with pytest.raises(ClientError) as exc:
            s3.list_objects(Bucket="listing", Delimiter="/")
        assert code_of(exc) == (400, "InvalidArgument")
    finally:
        s3.meta.events.unregister("before-call.s3.ListObjects", add)
    # v1's Prefix comes back as given (boto3 asks for url encoding, decodes only keys)
    assert s3.list_objects(Bucket="listing", Prefix="\n")["Prefix"] == "\n"
    # a listing's LastModified is the object's (whole seconds, as HEAD's)
    row = s3.list_objects(Bucket="listing", Prefix="b")["Contents"][0]
    head = s3.head_object(Bucket="listing", Key="b")
    assert row["LastModified"] == head["LastModified"]


def test_cache_control_expires_language(s3, cluster):
    s3.create_bucket(Bucket="headers")
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    s3.put_object(Bucket="headers", Key="k", Body=b"x", CacheControl="public, max-age=60",
                  Expires=expires, ContentLanguage="fr")
    head = s3.head_object(Bucket="headers", Key="k")
    assert head["CacheControl"] == "public, max-age=60"
    assert head["ContentLanguage"] == "fr"
    assert head["ResponseMetadata"]["HTTPHeaders"]["expires"] == \
        "Wed, 02 Jan 2030 03:04:05 GMT"
    swift = cluster.connection().head_object("headers", "k")
    assert swift["cache-control"] == "public, max-age=60"
    s3.copy_object(Bucket="headers", Key="copy", CopySource="headers/k")
    assert s3.head_object(Bucket="headers", Key="copy")["CacheControl"] == \
        "public, max-age=60"


def test_anonymous_path_is_access_denied(s3, cluster):
    s3.create_bucket(Bucket="anon")
    try:
        urllib.request.urlopen(cluster.proxy_url + "/anon?list-type=2")
        raise AssertionError("anonymous listing answered")
    except urllib.error.HTTPError as e:
        assert e.code == 403
        assert ET.fromstring(e.read()).findtext("Code") == "AccessDenied"


def test_missing_bucket_is_no_such_bucket(s3):
    s3.create_bucket(Bucket="here")
    s3.put_object(Bucket="here", Key="k", Body=b"x")
    calls = (lambda: s3.get_object_acl(Bucket="not-here", Key="k"),
             lambda: s3.copy_object(Bucket="here", Key="c", CopySource="not-here/k"),
             lambda: s3.delete_object(Bucket="not-here", Key="k", IfMatch="*"))
    for call in calls:
        with pytest.raises(ClientError) as exc:
            call()
        assert code_of(exc) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as exc:  # a missing key in a bucket that exists
        s3.get_object_acl(Bucket="here", Key="nope")
    assert code_of(exc) == (404, "NoSuchKey")


@contextmanager
def proxy_with(cluster, **options: str) -> Iterator[str]:
    """A second proxy of the cluster, with `options` in its config, served from a thread."""
    from swiftlite.proxy.server import create_app

    conf = load_sections(os.path.join(cluster.etc_dir, "proxy.conf"))["proxy-server"]
    for k, v in options.items():
        conf[k] = v
    loop = asyncio.new_event_loop()
    port = free_port()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(create_app(conf))
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def test_max_buckets(cluster):
    with proxy_with(cluster, max_buckets="2") as url:
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="test2:tester2", aws_secret_access_key="testing2",
                          config=Config(signature_version="s3v4",
                                        s3={"addressing_style": "path"},
                                        retries={"max_attempts": 1}))
        s3.create_bucket(Bucket="limit-1")
        s3.put_bucket_versioning(Bucket="limit-1",  # its hidden container does not count
                                 VersioningConfiguration={"Status": "Enabled"})
        s3.create_bucket(Bucket="limit-2")
        with pytest.raises(ClientError) as exc:
            s3.create_bucket(Bucket="limit-3")
        assert code_of(exc) == (400, "TooManyBuckets")
        names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert "limit-3" not in names
        s3.create_bucket(Bucket="limit-2")  # one's own: still a success
        s3.delete_bucket(Bucket="limit-2")
        s3.create_bucket(Bucket="limit-3")


def _expecting(cluster, path: str, headers: dict[str, str], body: bytes) -> tuple[bytes, bytes]:
    """A PUT announcing `body` with Expect: 100-continue: (the first answer, and what follows
    once the body is sent if that first answer was 100 Continue, else the rest)."""
    u = urllib.parse.urlsplit(cluster.proxy_url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
        lines = [f"PUT {path} HTTP/1.1", f"Host: {u.netloc}",
                 f"Content-Length: {len(body)}", "Expect: 100-continue",
                 *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        first = b""
        while b"\r\n\r\n" not in first:
            chunk = sock.recv(65536)
            if not chunk:
                break
            first += chunk
        if not first.startswith(b"HTTP/1.1 100"):
            head, _, rest = first.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(rest) < length:
                rest += sock.recv(65536)
            return head, rest
        sock.sendall(body)
        then = b""
        while b"\r\n\r\n" not in then:
            then += sock.recv(65536)
        return first, then


def _signed(cluster, path: str) -> dict[str, str]:
    req = AWSRequest(method="PUT", url=cluster.proxy_url + path,
                     headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    SigV4Auth(Credentials("test:tester", "testing"), "s3", "us-east-1").add_auth(req)
    return dict(req.headers)


def test_expect_100_continue(s3, cluster):
    s3.create_bucket(Bucket="expect")
    # anonymous: refused before the body (no anonymous_account here)
    first, rest = _expecting(cluster, "/expect/k", {}, b"hello")
    assert first.startswith(b"HTTP/1.1 403") and b"AccessDenied" in first + rest
    # a bucket that does not exist: NoSuchBucket, before the body
    first, rest = _expecting(cluster, "/no-bucket-here/k", _signed(cluster, "/no-bucket-here/k"),
                             b"hello")
    assert first.startswith(b"HTTP/1.1 404") and b"NoSuchBucket" in first + rest
    bad = {**_signed(cluster, "/expect/k"), "X-Amz-Date": "20200101T000000Z"}
    first, _ = _expecting(cluster, "/expect/k", bad, b"hello")
    assert first.startswith(b"HTTP/1.1 403")
    with pytest.raises(ClientError):
        s3.head_object(Bucket="expect", Key="k")
    # a good one: 100 Continue, then the body, then its 200
    first, then = _expecting(cluster, "/expect/k", _signed(cluster, "/expect/k"), b"hello")
    assert first.startswith(b"HTTP/1.1 100") and then.startswith(b"HTTP/1.1 200")
    assert s3.get_object(Bucket="expect", Key="k")["Body"].read() == b"hello"


def test_writer_finishing_last_wins(s3, cluster):
    """Two writers of one key: the one whose body ends last is the object, whole (its
    timestamp is taken once its body is in), though it started first."""
    s3.create_bucket(Bucket="dual")
    size = 1024 * 1024
    u = urllib.parse.urlsplit(cluster.proxy_url)
    headers = {**_signed(cluster, "/dual/k"), "Content-Length": str(size)}
    with socket.create_connection((u.hostname, u.port), timeout=30) as sock:
        lines = ["PUT /dual/k HTTP/1.1", f"Host: {u.netloc}",
                 *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b"B" * (size // 2))
        s3.put_object(Bucket="dual", Key="k", Body=b"A" * size)  # starts and ends meanwhile
        assert s3.get_object(Bucket="dual", Key="k")["Body"].read() == b"A" * size
        sock.sendall(b"B" * (size - size // 2))
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
    assert s3.get_object(Bucket="dual", Key="k")["Body"].read() == b"B" * size
