"""Bucket CORS rules (s3/cors.py): parsing and validation of a CORSConfiguration, and
matching an origin, method and requested headers against the rules."""

from __future__ import annotations

import pytest

from swiftlite.proxy.s3.cors import Rule, dump_rules, load_rules, parse_cors, wild_match
from swiftlite.proxy.s3.errors import S3Error


def doc(*rules: str) -> bytes:
    return ("<CORSConfiguration>" + "".join(f"<CORSRule>{r}</CORSRule>" for r in rules) +
            "</CORSConfiguration>").encode()


@pytest.mark.parametrize("pattern,value,ok", [
    ("*", "anything", True), ("*", "", True),
    ("*suffix", "foo.suffix", True), ("*suffix", "foo.suffix.get", False),
    ("start*end", "startend", True), ("start*end", "start12end", True),
    ("start*end", "0start12end", False), ("ab*ba", "aba", False),
    ("prefix*", "prefix", True), ("prefix*", "bla.prefix", False),
    ("http://exact", "http://exact", True), ("http://exact", "http://exact2", False),
])
def test_one_wildcard(pattern, value, ok):
    assert wild_match(pattern, value) is ok


def test_rule_needs_origin_method_and_every_asked_header():
    rule = Rule(["https://*.example"], ["GET", "PUT"], ["x-amz-*", "Content-Type"])
    assert rule.allows("https://app.example", "PUT", ["X-Amz-Meta-A", "content-type"])
    assert not rule.allows("https://app.example", "DELETE")
    assert not rule.allows("https://app.other", "GET")
    assert not rule.allows("https://app.example", "GET", ["x-custom"])
    assert not Rule(["*"], ["GET"]).allows("o", "GET", ["x-amz-meta-header2"])


def test_parse_and_store_round_trip():
    rules = parse_cors(doc("<ID>r1</ID><AllowedOrigin>*.get</AllowedOrigin>"
                           "<AllowedMethod>GET</AllowedMethod><AllowedHeader>*</AllowedHeader>"
                           "<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>30</MaxAgeSeconds>",
                           "<AllowedOrigin>a</AllowedOrigin><AllowedMethod>PUT</AllowedMethod>"))
    assert load_rules(dump_rules(rules)) == rules
    assert rules[0] == Rule(["*.get"], ["GET"], ["*"], ["ETag"], 30, "r1")
    assert load_rules("") is None and load_rules("{broken") is None


@pytest.mark.parametrize("body,code", [
    (doc("<AllowedOrigin>a</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>"),
     "InvalidRequest"),
    (doc("<AllowedOrigin>*a*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"),
     "InvalidRequest"),
    (doc("<AllowedMethod>GET</AllowedMethod>"), "MalformedXML"),
    (doc("<AllowedOrigin>a</AllowedOrigin>"), "MalformedXML"),
    (doc("<AllowedOrigin>a</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
         "<MaxAgeSeconds>soon</MaxAgeSeconds>"), "MalformedXML"),
    (doc(), "MalformedXML"),
    (b"<Other/>", "MalformedXML"),
    (b"<CORSConfiguration>", "MalformedXML"),
])
def test_bad_configurations(body, code):
    with pytest.raises(S3Error) as exc:
        parse_cors(body)
    assert exc.value.code == code and exc.value.status == 400
