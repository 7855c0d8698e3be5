"""Bucket CORS: PutBucketCors, GetBucketCors, DeleteBucketCors, browser preflights
(`OPTIONS /bucket[/key]`) and the CORS headers of actual S3 answers.

A bucket's rules are kept with its container as sysmeta (JSON), which no Swift client can
set or see. A rule allows origins (each with at most one `*`, standing for any run of
characters), methods (GET, PUT, HEAD, POST, DELETE), request headers (case-insensitive, one
`*` each), exposes headers and may set a max age. The first rule that matches wins:

- a preflight needs no credentials (a browser sends none): `Origin` and
  `Access-Control-Request-Method` are required (400), a bucket without rules or a request no
  rule allows (origin, method, every `Access-Control-Request-Headers` item) is 403;
- an actual request with `Origin` is answered as always, with the matching rule's headers
  added (its method: `Access-Control-Request-Method` if sent, else the request's), errors
  included, so the page can read why it failed.

Swift's own container CORS (proxy/middleware/cors.py) is separate: different metadata and
matching rules; the two share only header helpers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from swiftlite.common.http import add_vary, csv_items
from swiftlite.proxy.s3 import access, xml
from swiftlite.proxy.s3.bucket_settings import bucket_setting
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import parse_xml, xml_response
from swiftlite.proxy.s3.errors import S3Error, malformed_xml

BUCKET_CORS = "X-Container-Sysmeta-S3api-Cors"
METHODS = ("GET", "PUT", "HEAD", "POST", "DELETE")
MAX_RULES = 100
# The rules travel as one header to the container servers: well under aiohttp's 8 KiB line.
MAX_STORED = 7 * 1024


@dataclass
class Rule:
    origins: list[str]
    methods: list[str]
    headers: list[str] = field(default_factory=list)
    expose: list[str] = field(default_factory=list)
    max_age: int | None = None
    id: str | None = None

    def allows(self, origin: str, method: str, asked: Sequence[str] = ()) -> bool:
        return method in self.methods and any(wild_match(o, origin) for o in self.origins) \
            and all(any(wild_match(h.lower(), a.lower()) for h in self.headers)
                    for a in asked)


def wild_match(pattern: str, value: str) -> bool:
    """`value` against `pattern`, where one `*` stands for any run of characters."""
    if "*" not in pattern:
        return pattern == value
    head, _, tail = pattern.partition("*")
    return len(value) >= len(head) + len(tail) and value.startswith(head) and \
        value.endswith(tail)


def invalid_request(message: str) -> S3Error:
    return S3Error("InvalidRequest", 400, message)


def parse_cors(body: bytes) -> list[Rule]:
    """The rules of a `<CORSConfiguration>` document, checked."""
    doc = parse_xml(body)
    if doc.tag != "CORSConfiguration":
        raise malformed_xml()
    rules: list[Rule] = []
    for el in doc.findall("CORSRule"):
        origins = [o.text or "" for o in el.findall("AllowedOrigin")]
        methods = [m.text or "" for m in el.findall("AllowedMethod")]
        if not origins or not methods:
            raise malformed_xml()
        for m in methods:
            if m not in METHODS:
                raise invalid_request("Found unsupported HTTP method in CORS config. "
                                      f"Unsupported method is {m}")
        headers = [h.text or "" for h in el.findall("AllowedHeader")]
        for what, items in (("AllowedOrigin", origins), ("AllowedHeader", headers)):
            for item in items:
                if item.count("*") > 1:
                    raise invalid_request(f'{what} "{item}" can not have more than one '
                                          "wildcard.")
        max_age = xml.text(el, "MaxAgeSeconds")
        if max_age is not None:
            try:
                age: int | None = int(max_age)
            except ValueError:
                raise malformed_xml() from None
        else:
            age = None
        rules.append(Rule(origins, methods, headers,
                          [e.text or "" for e in el.findall("ExposeHeader")], age,
                          xml.text(el, "ID")))
    if not rules or len(rules) > MAX_RULES:
        raise malformed_xml()
    return rules


def dump_rules(rules: list[Rule]) -> str:
    return json.dumps([[r.origins, r.methods, r.headers, r.expose, r.max_age, r.id]
                       for r in rules], separators=(",", ":"))


def load_rules(stored: str | None) -> list[Rule] | None:
    """The stored rules; None when the bucket has none (or they are unreadable)."""
    if not stored:
        return None
    try:
        return [Rule(*row) for row in json.loads(stored)]
    except (ValueError, TypeError):
        return None


def cors_document(rules: list[Rule]) -> web.Response:
    root = xml.root("CORSConfiguration")
    for r in rules:
        el = xml.sub(root, "CORSRule")
        if r.id is not None:
            xml.sub(el, "ID", r.id)
        for tag, items in (("AllowedHeader", r.headers), ("AllowedMethod", r.methods),
                           ("AllowedOrigin", r.origins), ("ExposeHeader", r.expose)):
            for item in items:
                xml.sub(el, tag, item)
        if r.max_age is not None:
            xml.sub(el, "MaxAgeSeconds", r.max_age)
    return xml_response(root)


async def _store(s3: S3Request, body: bytes) -> dict[str, str]:
    """PutBucketCors: the rules checked, in their stored form."""
    stored = dump_rules(parse_cors(body))
    if len(stored.encode()) > MAX_STORED:
        raise S3Error("MaxMessageLengthExceeded", 400, "Your CORS configuration is too big.")
    return {BUCKET_CORS: stored}


bucket_setting("cors", BUCKET_CORS, load=lambda meta: load_rules(meta.get(BUCKET_CORS)),
               missing=lambda bucket: no_such_cors(bucket or ""), document=cors_document,
               store=_store)


def no_such_cors(bucket: str) -> S3Error:
    return S3Error("NoSuchCORSConfiguration", 404, "The CORS configuration does not exist",
                   BucketName=bucket)


# ---- answering browsers -----------------------------------------------------------------


async def bucket_rules(s3: S3Request) -> list[Rule] | None:
    """The bucket's rules, read without the caller's rights (a preflight has none): the
    rules are what the bucket's owner publishes to browsers. None: no bucket, or no rules."""
    if not s3.bucket:
        return None
    try:
        account = await access.resolve(s3, s3.bucket)
    except S3Error:
        return None  # no such bucket (or none the registry can name now)
    info = await s3.proxy.container_info(s3.request, account, s3.bucket)
    if info.status // 100 != 2:
        return None
    want = BUCKET_CORS.lower()
    return load_rules(next((v for k, v in info.meta.items() if k.lower() == want), None))


def _allow(headers: Any, rule: Rule, origin: str) -> None:
    if "*" in rule.origins and origin not in rule.origins:
        headers["Access-Control-Allow-Origin"] = "*"
    else:
        headers["Access-Control-Allow-Origin"] = origin
        headers["Access-Control-Allow-Credentials"] = "true"
    add_vary(headers, "Origin")
    headers["Access-Control-Allow-Methods"] = ", ".join(rule.methods)
    if rule.expose:
        headers["Access-Control-Expose-Headers"] = ", ".join(rule.expose)
    if rule.max_age is not None:
        headers["Access-Control-Max-Age"] = str(rule.max_age)


def forbidden(s3: S3Request) -> S3Error:
    return S3Error("AccessForbidden", 403, "CORSResponse: This CORS request is not allowed. "
                   "This is usually because the evaluation of Origin, request method / "
                   "Access-Control-Request-Method or Access-Control-Request-Headers are not "
                   "whitelisted by the resource's CORS spec.", Method="OPTIONS",
                   ResourceType="BUCKET" if s3.key is None else "OBJECT")


async def preflight(s3: S3Request) -> web.StreamResponse:
    """Answer `OPTIONS`: the preflight headers of the first rule that allows the request."""
    req = s3.request.headers
    origin = req.get("Origin")
    if not origin:
        raise S3Error("BadRequest", 400, "Insufficient information. Origin request header "
                      "needed.")
    method = req.get("Access-Control-Request-Method")
    if not method:
        raise S3Error("BadRequest", 400, "Invalid Access-Control-Request-Method: null")
    if not s3.bucket:
        raise forbidden(s3)
    rules = await bucket_rules(s3)
    if rules is None:
        raise S3Error("AccessForbidden", 403, "CORSResponse: CORS is not enabled for this "
                      "bucket.", Method="OPTIONS",
                      ResourceType="BUCKET" if s3.key is None else "OBJECT")
    asked = csv_items(req.get("Access-Control-Request-Headers", ""))
    rule = next((r for r in rules if r.allows(origin, method, asked)), None)
    if rule is None:
        raise forbidden(s3)
    headers: dict[str, str] = {}
    _allow(headers, rule, origin)
    if asked:
        headers["Access-Control-Allow-Headers"] = ", ".join(a.lower() for a in asked)
    add_vary(headers, "Access-Control-Request-Headers")
    add_vary(headers, "Access-Control-Request-Method")
    return web.Response(status=200, headers=headers)


async def decorate(s3: S3Request, resp: web.StreamResponse) -> None:
    """Add the matching rule's CORS headers to an actual answer for a request with Origin."""
    origin = s3.request.headers.get("Origin")
    if not origin or s3.request.method == "OPTIONS" or \
            "Access-Control-Allow-Origin" in resp.headers:
        return
    rules = await bucket_rules(s3)
    if not rules:
        return
    method = s3.request.headers.get("Access-Control-Request-Method") or s3.request.method
    rule = next((r for r in rules if r.allows(origin, method)), None)
    if rule is not None:
        _allow(resp.headers, rule, origin)
