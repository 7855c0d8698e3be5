"""POST Object: a browser uploads into a bucket with an HTML form (`POST /bucket`,
multipart/form-data).

The form's fields come first, the file last (fields after it are ignored, as S3 does).
Field names are case-insensitive, values case-sensitive. Who sends the form:

- signed, V2: `AWSAccessKeyId`, `policy` (base64 JSON) and `signature` =
  base64(HMAC-SHA1(secret, policy as sent));
- signed, V4: `x-amz-algorithm` (AWS4-HMAC-SHA256), `x-amz-credential`
  (`AKID/date/region/s3/aws4_request`), `x-amz-date`, `policy` and `x-amz-signature` =
  hex(HMAC-SHA256(signing key of the credential's scope, policy as sent));
- unsigned: none of these; the request is anonymous, and the bucket's ACL must let anyone
  write (the same check as any anonymous S3 write).

A signed form's policy is `{"expiration": ISO 8601 time, "conditions": [...]}`, each
condition `{"field": "value"}` (exact), `["eq", "$field", "value"]`,
`["starts-with", "$field", "prefix"]` or `["content-length-range", min, max]`. `bucket` is
the bucket the form was POSTed to and `key` the key after `${filename}` is replaced by the
file's name. Every field the form sends must be named by a condition, except the signature's
own fields, `file`, `x-ignore-*` and `x-amz-checksum-*`. A form the policy refuses, or whose
signature fails, stores nothing.

The file part streams into the object PUT (memory stays at a chunk); its size is checked
against content-length-range and the proxy's max_file_size, and its `x-amz-checksum-*` field,
as it passes. The last chunk is held back until every check passes, so a failing upload's PUT
is cut short and the object servers commit nothing.

The answer: a 303 to `success_action_redirect` (or `redirect`) with `bucket`, `key` and
`etag` added to its query; else `success_action_status` 200, 201 (a `PostResponse`
document) or, by default and for any other value, 204.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import re
import time
from calendar import timegm
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.multipart import BodyPartReader
from multidict import CIMultiDict

from swiftlite.proxy.forms import READ_CHUNK, field_value
from swiftlite.proxy.s3 import access, acl, encryption, payload, sse_cipher, xml
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.documents import xml_response
from swiftlite.proxy.s3.errors import (
    S3Error,
    access_denied,
    invalid_argument,
    no_such_bucket,
)
from swiftlite.proxy.s3.obj import check_key
from swiftlite.proxy.s3.object_request import mapped_headers
from swiftlite.proxy.s3.routes import method_not_allowed, route
from swiftlite.proxy.s3.sigv4 import ALGORITHM, signature_mismatch, signing_key
from swiftlite.proxy.s3.tagging import MAX_OBJECT_TAGS, OBJECT_TAGS, encode_tags, parse_tagging

# S3's own cap on the fields before the file (policy included).
MAX_FIELDS_BYTES = 20 * 1024
MAX_FIELDS = 100
# Fields no condition needs to name: the signature's own, the file, and what S3 leaves out.
UNCONDITIONED = frozenset(("awsaccesskeyid", "signature", "policy", "file", "x-amz-signature"))
UNCONDITIONED_PREFIXES = ("x-ignore-", "x-amz-checksum-")
_EXPIRATION = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.\d{1,9})?Z")


def is_form(request: web.Request) -> bool:
    """Whether `request` may be a browser's upload form (its auth is in its fields): a POST
    of multipart/form-data with no query (the middleware also wants it about a bucket)."""
    return request.method == "POST" and not request.query_string and \
        request.content_type == "multipart/form-data"


def malformed(message: str = "The body of your POST request is not well-formed "
              "multipart/form-data.") -> S3Error:
    return S3Error("MalformedPOSTRequest", 400, message)


def invalid_policy(message: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", 400, f"Invalid Policy: {message}")


def policy_refused(message: str) -> S3Error:
    return access_denied(f"Invalid according to Policy: {message}")


def missing_field(name: str) -> S3Error:
    return invalid_argument(f"Bucket POST must contain a field named '{name}'.  If it is "
                            "specified, please check the order of the fields.", name, "")


# ---- the policy document ----------------------------------------------------------------


class Policy:
    """A POST policy, decoded and checked for shape (not yet against a form)."""

    def __init__(self, encoded: str, now: float) -> None:
        try:
            doc = json.loads(base64.b64decode(encoded.strip(), validate=True))
        except (binascii.Error, ValueError):
            raise invalid_policy("Invalid JSON.") from None
        if not isinstance(doc, dict):
            raise invalid_policy("Invalid JSON.")
        expiration = doc.get("expiration")
        if expiration is None:
            raise invalid_policy("Policy missing expiration.")
        m = _EXPIRATION.fullmatch(expiration) if isinstance(expiration, str) else None
        if m is None:
            raise invalid_policy(f"Invalid 'expiration' value: '{expiration}'")
        y, mo, d, h, mi, s = map(int, m.groups())
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
            raise invalid_policy(f"Invalid 'expiration' value: '{expiration}'")
        if timegm((y, mo, d, h, mi, s, 0, 0, 0)) < now:
            raise policy_refused("Policy expired.")
        conditions = doc.get("conditions")
        if not isinstance(conditions, list):
            raise invalid_policy("Policy missing conditions.")
        # (op, field, value): op "eq" / "starts-with" on a lowercased field name.
        self.matches: list[tuple[str, str, str, str]] = []
        self.length_range: tuple[int, int] | None = None
        for cond in conditions:
            self._add(cond)

    def _add(self, cond: Any) -> None:
        shown = json.dumps(cond)
        if isinstance(cond, dict):
            if len(cond) != 1:
                raise invalid_policy("Invalid Simple-Condition: Simple-Conditions must have "
                                     "exactly one property specified.")
            (name, value), = cond.items()
            if not isinstance(value, str):
                raise invalid_policy(f"Invalid Simple-Condition: {shown}")
            self.matches.append(("eq", name.lower(), value, shown))
            return
        if not isinstance(cond, list) or not cond or not isinstance(cond[0], str):
            raise invalid_policy(f"Invalid Condition: {shown}")
        op = cond[0].lower()
        if op == "content-length-range":
            if len(cond) != 3:
                raise invalid_policy("Invalid content-length-range: it needs a minimum and "
                                     "a maximum.")
            low, high = _size(cond[1]), _size(cond[2])
            if low is None or high is None or low > high:
                raise invalid_policy(f"Invalid content-length-range: {shown}")
            self.length_range = (low, high)
            return
        if op not in ("eq", "starts-with") or len(cond) != 3 or \
                not isinstance(cond[1], str) or not isinstance(cond[2], str):
            raise invalid_policy(f"Invalid Condition: {shown}")
        if not cond[1].startswith("$"):
            raise invalid_policy(f"Invalid Condition: {shown}: the field must start with $")
        self.matches.append((op, cond[1][1:].lower(), cond[2], shown))

    def check(self, fields: dict[str, str]) -> None:
        """Raise unless every condition holds and names every field the form sent."""
        named = set()
        for op, name, want, shown in self.matches:
            named.add(name)
            have = fields.get(name)
            if have is None and op == "starts-with" and want == "":
                continue  # "any value": S3 lets it match a field the form does not send
            if have is None or (have != want if op == "eq" else not have.startswith(want)):
                raise policy_refused(f"Policy Condition failed: {shown}")
        # The V4 fields are bound by the signature itself.
        extra = [n for n in fields if n not in named and n not in UNCONDITIONED and
                 not n.startswith(UNCONDITIONED_PREFIXES) and n not in V4_FIELDS]
        if extra:
            raise policy_refused(f"Extra input fields: {', '.join(sorted(extra))}")


V4_FIELDS = frozenset(("x-amz-algorithm", "x-amz-credential", "x-amz-date",
                       "x-amz-security-token"))
SIGNATURE_FIELDS = V4_FIELDS | {"x-amz-signature"}


def _size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


# ---- who signed the form ----------------------------------------------------------------


async def authenticate(s3: S3Request, fields: dict[str, str]) -> Policy | None:
    """Check the form's signature and make `s3` its signer's request; the policy to hold the
    form to, or None for an unsigned (anonymous) form."""
    if "x-amz-algorithm" in fields or "x-amz-signature" in fields or \
            "x-amz-credential" in fields:
        for need in ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature",
                     "policy"):
            if need not in fields:
                raise missing_field(need)
        if fields["x-amz-algorithm"] != ALGORITHM:
            raise invalid_argument("Only AWS4-HMAC-SHA256 is supported.",
                                   "x-amz-algorithm", fields["x-amz-algorithm"])
        parts = fields["x-amz-credential"].split("/")
        if len(parts) < 5 or parts[-1] != "aws4_request" or parts[-2] != "s3":
            raise invalid_argument("The credential is mal-formed.", "x-amz-credential",
                                   fields["x-amz-credential"])
        access_key = "/".join(parts[:-4])
        date, region = parts[-4], parts[-3]
        secret = await _signer(s3, access_key)
        key = signing_key(secret, date, region, "s3")
        want = hmac.new(key, fields["policy"].encode(), hashlib.sha256).hexdigest()
        given = fields["x-amz-signature"]
    elif "awsaccesskeyid" in fields:
        for need in ("signature", "policy"):
            if need not in fields:
                raise missing_field(need)
        access_key = fields["awsaccesskeyid"]
        secret = await _signer(s3, access_key)
        want = base64.b64encode(hmac.new(secret.encode(), fields["policy"].encode(),
                                         hashlib.sha1).digest()).decode()
        given = fields["signature"]
    elif "policy" in fields or "signature" in fields:
        raise missing_field("AWSAccessKeyId")
    else:
        return None
    if not hmac.compare_digest(want.encode(), given.encode("utf-8", "surrogateescape")):
        raise signature_mismatch(access_key)
    return Policy(fields["policy"], time.time())


async def _signer(s3: S3Request, access_key: str) -> str:
    """The secret of `access_key`, its holder now the request's caller."""
    creds = s3.conf.creds
    found = await creds.lookup(access_key, s3.request)
    if found is None:
        raise S3Error("InvalidAccessKeyId", 403, "The AWS Access Key Id you provided does not "
                      "exist in our records.", AWSAccessKeyId=access_key)
    secret, ident = found
    s3.ident, s3.account, s3.owner_name = ident, creds.account_of(ident), ident.user
    return secret


# ---- the upload -------------------------------------------------------------------------


async def _read_fields(reader) -> tuple[dict[str, str], BodyPartReader | None]:
    """The fields before the file (names lowercased), and the file part (None if none)."""
    fields: dict[str, str] = {}
    total = 0
    while True:
        part = await reader.next()
        if part is None:
            return fields, None
        if not isinstance(part, BodyPartReader):
            await part.release()  # a nested multipart is no field of a POST form
            continue
        name = (part.name or "").lower()
        if name == "file":
            return fields, part
        value, longer = await field_value(part, MAX_FIELDS_BYTES - total)
        total += len(value.encode("utf-8", "surrogateescape"))
        if longer or len(fields) >= MAX_FIELDS:
            raise S3Error("MaxPostPreDataLengthExceededError", 400, "Your POST request "
                          "fields preceding the upload file were too large.")
        if not name:
            continue
        if name in fields:
            raise invalid_argument(f"The form has the field '{name}' more than once.",
                                   name, value)
        fields[name] = value


def object_headers(fields: dict[str, str]) -> CIMultiDict[str]:
    out = mapped_headers(fields.items())
    if "content-type" not in out:  # as S3: the file part's own type is not the object's
        out["Content-Type"] = "binary/octet-stream"
    if "tagging" in fields:
        tags = parse_tagging(fields["tagging"].encode("utf-8", "surrogateescape"),
                             MAX_OBJECT_TAGS)
        out[OBJECT_TAGS] = encode_tags(tags)  # as tagging.py keeps an object's tags
    return out


async def _checked(part: BodyPartReader, low: int, high: int,
                   checks: payload.Checks) -> AsyncIterator[bytes]:
    """The file's bytes; a size outside [low, high] or a failed checksum raises with the last
    chunk still held back, which aborts the PUT before it commits."""
    seen = 0
    pending = b""
    while True:
        try:
            chunk = await part.read_chunk(READ_CHUNK)
        except (ValueError, AssertionError, BadHttpMessage):
            raise malformed() from None
        if not chunk:
            break
        seen += len(chunk)
        if seen > high:
            raise S3Error("EntityTooLarge", 400, "Your proposed upload exceeds the maximum "
                          "allowed size.", MaxSizeAllowed=high)
        checks.update(chunk)
        if pending:
            yield pending
        pending = chunk
    if seen < low:
        raise S3Error("EntityTooSmall", 400, "Your proposed upload is smaller than the "
                      "minimum allowed size.", ProposedSize=seen, MinSizeAllowed=low)
    checks.verify()
    if pending:
        yield pending


def as_headers(s3: S3Request, fields: dict[str, str]) -> S3Request:
    """`s3` as if the form's fields were the headers a PutObject would send (`acl` as
    `x-amz-acl`, `x-amz-*` as they are), for helpers that read a request's headers: the new
    object's ACL (acl.py), ownership controls included, is then made as PutObject's."""
    extra = {("x-amz-acl" if k == "acl" else k): v for k, v in fields.items()
             if k == "acl" or (k.startswith("x-amz-") and k not in SIGNATURE_FIELDS)}
    if not extra:
        return s3
    headers = CIMultiDict(s3.request.headers)
    headers.update(extra)
    return dataclasses.replace(s3, request=s3.request.clone(headers=headers))


@route("bucket", "POST")
async def post_object(s3: S3Request) -> web.StreamResponse:
    if not is_form(s3.request):
        raise S3Error("PreconditionFailed", 412, "At least one of the pre-conditions you "
                      "specified did not hold", Condition="Bucket POST must be of the "
                      "enclosure-type multipart/form-data")
    bucket = s3.bucket or ""
    if not bucket:
        raise method_not_allowed("POST", "service")
    try:
        reader = await s3.request.multipart()
        fields, part = await _read_fields(reader)
    except (ValueError, AssertionError, BadHttpMessage):  # aiohttp's word for a bad body
        raise malformed() from None
    if part is None:
        raise invalid_argument("POST requires exactly one file upload per request.",
                               "file", "0")
    if "key" not in fields:
        raise missing_field("key")
    policy = await authenticate(s3, fields)
    fields["key"] = key = fields["key"].replace("${filename}", part.filename or "")
    if not key:
        raise invalid_argument("User key must have a length greater than 0.", "key", "")
    check_key(key)
    if s3.ident is None and not s3.conf.anonymous_s3:
        raise access_denied()  # the operator turned anonymous S3 off
    # The signer (or, unsigned, anyone) must be allowed to write here, as for PutObject.
    s3.account = await access.resolve(s3, bucket)
    await access.authorize(s3, "s3:PutObject", key)
    fields["bucket"] = bucket  # the policy is about the bucket posted to
    high = s3.proxy.max_file_size
    low = 0
    if policy is not None:
        policy.check(fields)
        if policy.length_range is not None:
            low, high = policy.length_range[0], min(high, policy.length_range[1])
    headers = object_headers(fields)
    headers.update(await acl.object_create_headers(as_headers(s3, fields)))
    sse = await encryption.for_write(s3, bucket, headers, given=CIMultiDict(fields))
    checks, _ = payload.header_checks(
        CIMultiDict((k, v) for k, v in fields.items()
                    if k.startswith("x-amz-checksum-") and k != "x-amz-checksum-type"),
        False)
    body = _checked(part, low, high, checks)
    resp = await s3.swift("PUT", bucket, key, headers,
                          body if sse is None else sse_cipher.encrypt_body(body, sse))
    if resp.status // 100 != 2:
        if resp.status == 404:
            raise no_such_bucket(bucket)
        raise await error_of(resp, bucket, key)
    etag = '"' + resp.headers.get("ETag", "").strip('"') + '"'
    out = answer(s3, fields, bucket, key, etag)
    if sse is not None:
        out.headers.update(sse.answer_headers())
    return out


def answer(s3: S3Request, fields: dict[str, str], bucket: str, key: str,
           etag: str) -> web.StreamResponse:
    location = f"{s3.request.scheme}://{s3.request.host}/{quote(bucket)}/{quote(key)}"
    headers = {"ETag": etag, "Location": location}
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect:
        redirect += "&" if "?" in redirect else "?"
        redirect += (f"bucket={quote(bucket, safe='')}&key={quote(key, safe='')}"
                     f"&etag={quote(etag, safe='')}")
        return web.Response(status=303, headers={**headers, "Location": redirect})
    status = fields.get("success_action_status")
    if status == "201":
        root = xml.Element("PostResponse")  # S3's has no namespace, and clients read it so
        xml.sub(root, "Location", location)
        xml.sub(root, "Bucket", bucket)
        xml.sub(root, "Key", key)
        xml.sub(root, "ETag", etag)
        return xml_response(root, 201, headers)
    return web.Response(status=200 if status == "200" else 204, headers=headers)
