"""SigV4's header parse and canonical headers, and the answer headers S3 shows: the quick
paths (one regex for the usual Authorization header, one search for the answer's names) give
what the general ones give."""

from __future__ import annotations

import re
import time

import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from swiftlite.proxy.s3 import obj, sigv4

NOW = time.time()
STAMP = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW))
CRED = f"test:tester/{STAMP[:8]}/us-east-1/s3/aws4_request"


def _parsed(auth: str, general: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    if general:
        monkeypatch.setattr(sigv4, "_USUAL_HEADER", re.compile("(?!)(.)(.)(.)"))
    headers = CIMultiDictProxy(CIMultiDict({
        "Authorization": auth, "X-Amz-Date": STAMP, "Host": "h",
        "X-Amz-Content-SHA256": sigv4.UNSIGNED}))
    try:
        v4 = sigv4.V4("GET", "/b/k", headers, [], NOW)
    except sigv4.S3Error as exc:
        return ("error", exc.code)
    finally:
        monkeypatch.undo()
    return (v4.access_key, v4.scope, v4.signed_headers, v4.signature)


@pytest.mark.parametrize("auth", [
    f"AWS4-HMAC-SHA256 Credential={CRED}, SignedHeaders=host;x-amz-date, Signature=ab12",
    f"AWS4-HMAC-SHA256 Credential={CRED},SignedHeaders=host;x-amz-date,Signature=ab12",
    f"AWS4-HMAC-SHA256 Credential={CRED},  SignedHeaders=Host;X-Amz-Date, Signature=ab12",
    f"AWS4-HMAC-SHA256 SignedHeaders=host, Credential={CRED}, Signature=ab12",
    f"AWS4-HMAC-SHA256 Credential={CRED}, SignedHeaders=host, Signature=a=b",
    f"AWS4-HMAC-SHA256 Credential={CRED}, SignedHeaders=host, Signature=ab, Signature=cd",
    f"AWS4-HMAC-SHA256 Credential={CRED}, SignedHeaders=host",
    "AWS4-HMAC-SHA256 Credential=x/y, SignedHeaders=host, Signature=ab",
])
def test_the_usual_header_parses_as_the_general_parse_does(auth, monkeypatch):
    quick = _parsed(auth, False, monkeypatch)
    assert quick == _parsed(auth, True, monkeypatch)
    if "Signature=ab12" in auth and "x-amz-date" in auth.lower():
        assert quick == ("test:tester", CRED.split("/", 1)[1], ["host", "x-amz-date"],
                         "ab12")


def test_canonical_headers_trim_fold_and_join_repeats():
    headers = CIMultiDict([("Host", " h "), ("X-A", "one  two\t three "), ("X-B", "1"),
                           ("X-B", " 2  3")])
    v4 = sigv4.V4.__new__(sigv4.V4)
    v4.headers, v4.signed_headers = CIMultiDictProxy(headers), ["host", "x-a", "x-b"]
    assert v4._canonical_headers() == "host:h\nx-a:one two three\nx-b:1,2 3\n"


def test_s3_headers_rename_metadata_and_drop_swift_internals():
    resp = web.Response(headers=CIMultiDict([
        ("Content-Type", "image/jpeg"), ("ETag", "abc"), ("X-Timestamp", "1.0"),
        ("X-Object-Meta-Color", "blue"), ("x-object-meta-Size", "L"),
        ("X-Static-Large-Object", "True"), ("X-Manifest-Etag", "m"),
        ("X-Object-Sysmeta-Other", "s"), ("X-Object-Meta-", "empty-name"),
        ("X-Timestamp-Like", "kept")]))
    obj.s3_headers(resp)
    h = resp.headers
    assert h["ETag"] == '"abc"' and h["x-amz-meta-color"] == "blue"
    assert h["x-amz-meta-size"] == "L" and h["x-amz-meta-"] == "empty-name"
    for gone in ("X-Timestamp", "X-Object-Meta-Color", "X-Static-Large-Object",
                 "X-Manifest-Etag", "X-Object-Sysmeta-Other"):
        assert gone not in h
    assert h["X-Timestamp-Like"] == "kept" and h["Content-Type"] == "image/jpeg"


def test_s3_headers_show_tags_and_the_multipart_etag():
    resp = web.Response(headers={
        "ETag": "swift", obj.S3_ETAG: "s3etag-2",
        "X-Object-Sysmeta-Mutable-S3-Tagging": "a=1&b=2"})
    obj.s3_headers(resp)
    assert resp.headers["ETag"] == '"s3etag-2"'
    assert resp.headers["x-amz-tagging-count"] == "2"
    assert obj.S3_ETAG not in resp.headers
