"""Lifecycle: Put/Get/DeleteBucketLifecycleConfiguration, and expiration by the core's
object expirer.

A configuration is checked as S3 checks it (rule IDs of at most 255 characters, unique,
generated when absent; Status `Enabled`/`Disabled`; a Filter (Prefix, Tag, And) or a
rule-level Prefix; Expiration by Days, Date (midnight UTC) or ExpiredObjectDeleteMarker;
NoncurrentVersionExpiration; AbortIncompleteMultipartUpload; Transitions) and kept, as the
document (compressed), in container sysmeta.

What acts: an object written (PutObject, CopyObject, CompleteMultipartUpload) in a bucket
with an enabled Expiration rule (Days or Date) that matches its key and tags gets
`X-Delete-At` (the earliest such rule's time; Days count from the write, rounded up to the
next midnight UTC, as S3's), so the object expirer removes it; GET/HEAD answer
`x-amz-expiration` for it. Not done: rules do not reach objects written before them (no
sweep), nor noncurrent versions, delete markers, incomplete uploads or transitions, which
are kept in the configuration only; in a versioned bucket the expiry removes the current
object without leaving a delete marker.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import secrets
import time
import zlib
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.bucket_settings import bucket_setting, sysmeta_value
from swiftlite.proxy.s3.context import S3Request, http_date
from swiftlite.proxy.s3.documents import parse_xml
from swiftlite.proxy.s3.errors import S3Error, invalid_argument, malformed_xml

LIFECYCLE = "X-Container-Sysmeta-S3api-Lifecycle"
# The x-amz-expiration a GET/HEAD answers, kept with the object (its expiry itself is
# X-Delete-At, which a versioned bucket's versions do not carry).
EXPIRATION = "X-Object-Sysmeta-S3api-Expiration"
MAX_RULES = 1000
MAX_ID = 255
DAY = 86400
ACTIONS = ("Expiration", "NoncurrentVersionExpiration", "AbortIncompleteMultipartUpload",
           "Transition", "NoncurrentVersionTransition")
STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER",
                   "GLACIER_IR", "DEEP_ARCHIVE", "REDUCED_REDUNDANCY")
_MIDNIGHT = re.compile(r"\d{4}-\d{2}-\d{2}T00:00:00(\.0+)?(Z|[+-]00:00)?")


def _positive(value: str | None, what: str) -> int:
    try:
        n = int((value or "").strip())
    except ValueError:
        raise malformed_xml() from None
    if n <= 0:
        raise invalid_argument(f"'{what}' must be a positive integer")
    return n


def _midnight(value: str | None) -> float:
    """An ISO 8601 date at midnight UTC (S3's rule for Date), as epoch seconds."""
    text = (value or "").strip()
    if not _MIDNIGHT.fullmatch(text):
        raise invalid_argument("'Date' must be at midnight GMT")
    when = datetime.fromisoformat(text[:19]).replace(tzinfo=UTC)
    return when.timestamp()


def _filter(rule) -> dict[str, Any]:
    """The rule's filter as {"prefix": str, "tags": [(k, v)]}, checked."""
    prefix_el, filt = rule.find("Prefix"), rule.find("Filter")
    if (prefix_el is None) == (filt is None):
        raise malformed_xml()
    if filt is None:
        return {"prefix": prefix_el.text or "", "tags": []}
    parts = [el for el in filt if el.tag in ("Prefix", "Tag", "And",
                                             "ObjectSizeGreaterThan", "ObjectSizeLessThan")]
    if len(parts) != len(list(filt)) or len(parts) > 1:
        raise malformed_xml()
    out: dict[str, Any] = {"prefix": "", "tags": []}
    for el in parts:
        if el.tag == "Prefix":
            out["prefix"] = el.text or ""
        elif el.tag == "Tag":
            out["tags"].append(_tag(el))
        elif el.tag == "And":
            for sub in el:
                if sub.tag == "Prefix":
                    out["prefix"] = sub.text or ""
                elif sub.tag == "Tag":
                    out["tags"].append(_tag(sub))
                elif sub.tag not in ("ObjectSizeGreaterThan", "ObjectSizeLessThan"):
                    raise malformed_xml()
        else:
            out["size"] = True  # size filters: the rule is kept, it never stamps objects
    return out


def _tag(el) -> tuple[str, str]:
    key, value = xml.text(el, "Key"), xml.text(el, "Value")
    if key is None or value is None:
        raise malformed_xml()
    if not key or len(key) > 128 or len(value) > 256:
        raise S3Error("InvalidTag", 400, "The TagKey or TagValue you have provided is "
                      "invalid")
    return key, value


def _check_rule(rule) -> dict[str, Any]:
    """One Rule, checked; what expiration needs of it (status, filter, expiry)."""
    status = xml.text(rule, "Status")
    if status not in ("Enabled", "Disabled"):
        raise malformed_xml()
    found = _filter(rule)
    actions = [el for el in rule if el.tag in ACTIONS]
    if not actions:
        raise malformed_xml()
    expiry: dict[str, float] = {}
    exp = rule.find("Expiration")
    if exp is not None:
        days, date = xml.text(exp, "Days"), xml.text(exp, "Date")
        marker = xml.text(exp, "ExpiredObjectDeleteMarker")
        if sum(v is not None for v in (days, date, marker)) != 1:
            raise malformed_xml()
        if days is not None:
            expiry["days"] = _positive(days, "Days' for Expiration action")
        elif date is not None:
            expiry["date"] = _midnight(date)
        elif (marker or "").strip().lower() not in ("true", "false"):
            raise malformed_xml()
    if len(rule.findall("Expiration")) > 1:
        raise malformed_xml()
    for el in rule.findall("NoncurrentVersionExpiration"):
        _positive(xml.text(el, "NoncurrentDays"), "NoncurrentDays")
    for el in rule.findall("AbortIncompleteMultipartUpload"):
        _positive(xml.text(el, "DaysAfterInitiation"), "DaysAfterInitiation")
    for el in rule.findall("Transition") + rule.findall("NoncurrentVersionTransition"):
        days = xml.text(el, "Days") if el.tag == "Transition" else \
            xml.text(el, "NoncurrentDays")
        date = xml.text(el, "Date") if el.tag == "Transition" else None
        if (days is None) == (date is None):
            raise malformed_xml()
        if date is not None:
            _midnight(date)
        elif (days or "").strip() != "0":
            _positive(days, "Days")
        if xml.text(el, "StorageClass") not in STORAGE_CLASSES:
            raise malformed_xml()
    return {"status": status, **found, **expiry}


def parse_configuration(body: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    """The configuration, checked, with an ID for each rule (as it will be answered), and
    each rule's summary."""
    doc = parse_xml(body)
    if doc.tag != "LifecycleConfiguration":
        raise malformed_xml()
    rules = doc.findall("Rule")
    if not rules or len(rules) > MAX_RULES or len(rules) != len(list(doc)):
        raise malformed_xml()
    ids: set[str] = set()
    summaries = []
    for rule in rules:
        id_el = rule.find("ID")
        if id_el is None:
            id_el = xml.Element("ID")
            id_el.text = secrets.token_hex(16)
            rule.insert(0, id_el)
        rule_id = id_el.text or ""
        if len(rule_id) > MAX_ID:
            raise invalid_argument("ID length should not exceed allowed limit of 255")
        if rule_id in ids:
            raise invalid_argument("Rule ID must be unique. Found same ID for more than one "
                                   "rule")
        ids.add(rule_id)
        summaries.append({"id": rule_id, **_check_rule(rule)})
    doc.set("xmlns", xml.NS)
    for el in doc.iter():
        if el.text is not None and not el.text.strip() and len(el):
            el.text = None
        if el.tail is not None and not el.tail.strip():
            el.tail = None
    return xml.dump(doc), summaries


def _raw(meta) -> str | None:
    return sysmeta_value(meta, LIFECYCLE)


def _decoded(raw: str | None) -> bytes | None:
    if not raw:
        return None
    try:
        return zlib.decompress(base64.b64decode(raw))
    except (binascii.Error, zlib.error):
        return None


def _stored(meta) -> bytes | None:
    return _decoded(_raw(meta))


@functools.lru_cache(maxsize=256)
def _rules(raw: str) -> tuple[dict[str, Any], ...]:
    """A stored configuration's rules (kept: every PUT in the bucket reads them)."""
    document = _decoded(raw)
    if document is None:
        return ()
    try:
        return tuple(parse_configuration(document)[1])
    except S3Error:
        return ()


async def _store(s3: S3Request, body: bytes) -> dict[str, str]:
    """PutBucketLifecycleConfiguration: the document as the client sent it, compressed."""
    document, _ = parse_configuration(body)
    stored = base64.b64encode(zlib.compress(document, 9)).decode()
    if len(stored) > 6000:
        raise invalid_argument("The lifecycle configuration is larger than this store keeps")
    return {LIFECYCLE: stored}


def _missing(bucket: str | None) -> S3Error:
    return S3Error("NoSuchLifecycleConfiguration", 404, "The lifecycle configuration "
                   "does not exist", BucketName=bucket)


def _document(document: bytes) -> web.Response:
    return web.Response(status=200, body=document, content_type="application/xml")


bucket_setting("lifecycle", LIFECYCLE, load=_stored, missing=_missing, document=_document,
               store=_store)


# ---- expiration of new objects ----------------------------------------------------------------

def _next_midnight(ts: float) -> float:
    day = int(ts // DAY)
    return float((day + (0 if ts == day * DAY else 1)) * DAY)


def stamp(key: str, tags: list[tuple[str, str]], headers: CIMultiDict[str], meta,
          now: float | None = None) -> None:
    """X-Delete-At (and the x-amz-expiration to answer) for a new object `key` with `tags`,
    from the bucket's enabled Expiration rules that match it."""
    raw = _raw(meta) if meta is not None else None
    if not raw:
        return
    rules = _rules(raw)
    now = time.time() if now is None else now
    best: tuple[float, str] | None = None
    have = set(tags)
    for rule in rules:
        if rule["status"] != "Enabled" or rule.get("size") or \
                not key.startswith(rule["prefix"]) or not set(rule["tags"]) <= have:
            continue
        if "days" in rule:
            when = _next_midnight(now + rule["days"] * DAY)
        elif "date" in rule:
            when = max(rule["date"], float(int(now) + 1))
        else:
            continue
        if best is None or when < best[0]:
            best = (when, rule["id"])
    if best is None:
        return
    at = int(best[0])
    headers["X-Delete-At"] = str(at)
    rule_id = best[1].replace('"', "")
    headers[EXPIRATION] = f'expiry-date="{http_date(at)}", rule-id="{rule_id}"'


def answer_headers(h) -> None:
    value = h.get(EXPIRATION)
    if value:
        h["x-amz-expiration"] = value
