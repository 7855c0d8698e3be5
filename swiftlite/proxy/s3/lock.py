"""Object lock: Put/GetObjectLockConfiguration, Put/GetObjectRetention,
Put/GetObjectLegalHold, and the `x-amz-object-lock-*` headers of PutObject, CopyObject and
CreateMultipartUpload.

A bucket made with `x-amz-bucket-object-lock-enabled: true` (or a versioned bucket given a
lock configuration) is versioned for good: the container is marked VERSIONS_LOCKED, and the
core's object versioning then refuses to turn versioning off, through either API. Its lock
configuration (the default retention) is container sysmeta (JSON).

A version's retention (mode, retain-until date) and legal hold are the core's retention
sysmeta (common/sysmeta.py RETENTION_MODE, RETAIN_UNTIL, LEGAL_HOLD): set with the object,
changed by a patch POST that keeps its metadata. The core enforces them: object versioning
refuses to delete a version under retention or a legal hold (403, S3's AccessDenied), by
S3 or by Swift, unless, in GOVERNANCE mode, the S3 request says
`x-amz-bypass-governance-retention: true` (passed down as BYPASS_GOVERNANCE, a header no
client can send). A DELETE without a version id only adds a delete marker, as S3's.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.sysmeta import (
    BYPASS_GOVERNANCE,
    LEGAL_HOLD,
    RETAIN_UNTIL,
    RETENTION_MODE,
    VERSIONS_LOCKED,
)
from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.bucket_settings import bucket_setting, sysmeta_value
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import parse_xml, small_body, xml_response
from swiftlite.proxy.s3.errors import (
    S3Error,
    access_denied,
    invalid_argument,
    malformed_xml,
    no_such_bucket,
)
from swiftlite.proxy.s3.object_request import version_query
from swiftlite.proxy.s3.routes import route

LOCK_CONF = "X-Container-Sysmeta-S3api-Object-Lock"
MODES = ("GOVERNANCE", "COMPLIANCE")
DAY = 86400
BYPASS = "x-amz-bypass-governance-retention"


def invalid_bucket_state(message: str) -> S3Error:
    return S3Error("InvalidBucketState", 409, message)


def not_locked() -> S3Error:
    return S3Error("InvalidRequest", 400, "Bucket is missing Object Lock Configuration")


def bucket_lock(meta) -> dict | None:
    """The bucket's lock configuration from its sysmeta; None: object lock is off."""
    raw = sysmeta_value(meta, LOCK_CONF)
    if not raw:
        return None
    try:
        conf = json.loads(raw)
    except ValueError:
        return {}
    return conf if isinstance(conf, dict) else {}


def iso(ts: float) -> str:
    when = datetime.fromtimestamp(ts, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def parse_date(value: str, name: str) -> float:
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise invalid_argument("The retain until date is not a valid ISO 8601 date",
                               name, value) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round(when.timestamp(), 3)


def _ms(value: str | None) -> int | None:
    try:
        return round(float(value) * 1000) if value else None
    except ValueError:
        return None


# ---- buckets ----------------------------------------------------------------------------------

def create_headers(s3: S3Request) -> dict[str, str]:
    """CreateBucket's container headers for `x-amz-bucket-object-lock-enabled: true`."""
    if s3.request.headers.get("x-amz-bucket-object-lock-enabled", "").lower() != "true":
        return {}
    return {"X-Versions-Enabled": "true", LOCK_CONF: "{}", VERSIONS_LOCKED: "true"}


async def check_versioning(s3: S3Request, status: str) -> None:
    """PutBucketVersioning: a locked bucket's versioning cannot be suspended."""
    if status != "Suspended":
        return
    head = await s3.swift_ok("HEAD", s3.bucket)
    if bucket_lock(head.headers) is not None:
        raise invalid_bucket_state("An Object Lock configuration is present on this bucket, "
                                   "so the versioning state cannot be changed.")


def _positive(value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise malformed_xml() from None
    if n <= 0:
        raise S3Error("InvalidRetentionPeriod", 400,
                      "Default retention period must be a positive integer value.")
    return n


def parse_lock_configuration(body: bytes) -> dict:
    doc = parse_xml(body)
    if doc.tag != "ObjectLockConfiguration" or xml.text(doc, "ObjectLockEnabled") != "Enabled":
        raise malformed_xml()
    rule = doc.find("Rule")
    if rule is None:
        return {}
    retention = rule.find("DefaultRetention")
    if retention is None:
        raise malformed_xml()
    mode = xml.text(retention, "Mode")
    days, years = xml.text(retention, "Days"), xml.text(retention, "Years")
    if mode not in MODES or (days is None) == (years is None):
        raise malformed_xml()
    if days is not None:
        return {"mode": mode, "days": _positive(days)}
    assert years is not None
    return {"mode": mode, "years": _positive(years)}


async def _store_configuration(s3: S3Request, body: bytes) -> dict[str, str]:
    """PutObjectLockConfiguration: on a versioned bucket only; versioning then stays on."""
    conf = parse_lock_configuration(body)
    head = await s3.swift_ok("HEAD", s3.bucket)
    if bucket_lock(head.headers) is None and \
            head.headers.get("X-Versions-Enabled", "").lower() != "true":
        raise invalid_bucket_state("Versioning must be 'Enabled' on the bucket to apply a "
                                   "Object Lock configuration")
    return {LOCK_CONF: json.dumps(conf), VERSIONS_LOCKED: "true"}


def _no_configuration(bucket: str | None) -> S3Error:
    return S3Error("ObjectLockConfigurationNotFoundError", 404, "Object Lock "
                   "configuration does not exist for this bucket", BucketName=bucket)


def _configuration_document(conf: dict) -> web.Response:
    root = xml.root("ObjectLockConfiguration")
    xml.sub(root, "ObjectLockEnabled", "Enabled")
    if conf.get("mode"):
        retention = xml.sub(xml.sub(root, "Rule"), "DefaultRetention")
        xml.sub(retention, "Mode", conf["mode"])
        if "days" in conf:
            xml.sub(retention, "Days", conf["days"])
        else:
            xml.sub(retention, "Years", conf.get("years", 1))
    return xml_response(root)


# (No DeleteObjectLockConfiguration: S3 has none, object lock stays on once set.)
bucket_setting("object-lock", LOCK_CONF, load=bucket_lock, missing=_no_configuration,
               document=_configuration_document, store=_store_configuration,
               deletable=False)


# ---- new objects ------------------------------------------------------------------------------

def stamp(s3: S3Request, headers: CIMultiDict[str], meta) -> None:
    """A new object's retention and legal hold from the request's `x-amz-object-lock-*`
    headers, else the bucket's default retention."""
    req = s3.request.headers
    mode = req.get("x-amz-object-lock-mode")
    until = req.get("x-amz-object-lock-retain-until-date")
    hold = req.get("x-amz-object-lock-legal-hold")
    conf = bucket_lock(meta) if meta is not None else None
    if conf is None:
        if mode is not None or until is not None or hold is not None:
            raise not_locked()
        return
    if (mode is None) != (until is None):
        raise invalid_argument("x-amz-object-lock-retain-until-date and "
                               "x-amz-object-lock-mode must both be supplied")
    if hold is not None:
        if hold not in ("ON", "OFF"):
            raise invalid_argument("Legal Hold must be either of 'ON' or 'OFF'",
                                   "x-amz-object-lock-legal-hold", hold)
        headers[LEGAL_HOLD] = hold
    if mode is not None and until is not None:
        if mode not in MODES:
            raise invalid_argument("Unknown wormMode directive.", "x-amz-object-lock-mode",
                                   mode)
        ts = parse_date(until, "x-amz-object-lock-retain-until-date")
        if ts <= time.time():
            raise invalid_argument("The retain until date must be in the future!",
                                   "x-amz-object-lock-retain-until-date", until)
        headers[RETENTION_MODE] = mode
        headers[RETAIN_UNTIL] = f"{ts:.3f}"
    elif conf.get("mode"):
        days = conf.get("days") or 365 * int(conf.get("years", 1))
        headers[RETENTION_MODE] = conf["mode"]
        headers[RETAIN_UNTIL] = f"{time.time() + days * DAY:.3f}"


def answer_headers(h) -> None:
    """GET/HEAD: a version's retention and legal hold as S3's headers."""
    mode, until, hold = h.get(RETENTION_MODE), h.get(RETAIN_UNTIL), h.get(LEGAL_HOLD)
    if mode and until:
        try:
            h["x-amz-object-lock-retain-until-date"] = iso(float(until))
            h["x-amz-object-lock-mode"] = mode
        except ValueError:
            pass
    if hold:
        h["x-amz-object-lock-legal-hold"] = hold


def bypasses(s3: S3Request) -> bool:
    """Whether the request bypasses GOVERNANCE retention: it asks to, and its caller owns
    the account (S3's s3:BypassGovernanceRetention, which only the owner holds here)."""
    ident = s3.ident
    return s3.request.headers.get(BYPASS, "").lower() == "true" and ident is not None and \
        (s3.account in ident.groups or ident.is_reseller_admin)


def delete_headers(s3: S3Request) -> dict[str, str]:
    """A version DELETE's headers: S3's governance bypass, passed to the core."""
    return {BYPASS_GOVERNANCE: "true"} if bypasses(s3) else {}


# ---- retention and legal hold of one version --------------------------------------------------

async def _locked_bucket(s3: S3Request) -> dict:
    info = await s3.proxy.container_info(s3.request, s3.account, s3.bucket or "")
    if info.status == 404:
        raise no_such_bucket(s3.bucket or "")
    conf = bucket_lock(info.meta) if info.status // 100 == 2 else None
    if conf is None:
        raise not_locked()
    return conf


async def _head(s3: S3Request) -> web.StreamResponse:
    vq = version_query(s3.query.get("versionId"))
    return await s3.swift_ok("HEAD", s3.bucket, s3.key, query=vq,
                             err_key=s3.key)


async def _patch(s3: S3Request, headers: dict[str, str]) -> web.Response:
    vq = version_query(s3.query.get("versionId"))
    await s3.swift_ok("POST", s3.bucket, s3.key, headers=headers, query=vq,
                      err_key=s3.key)
    vid = s3.query.get("versionId")
    return web.Response(status=200, headers={"x-amz-version-id": vid} if vid else None)


def _retention_change_allowed(s3: S3Request, head, mode: str | None,
                              until_ms: int | None) -> None:
    """Raise AccessDenied unless the new retention (None, None: none) may replace the
    version's current one: COMPLIANCE only lengthens; GOVERNANCE changes otherwise only
    with the bypass header."""
    cur_mode = head.headers.get(RETENTION_MODE)
    cur_ms = _ms(head.headers.get(RETAIN_UNTIL))
    if not cur_mode or cur_ms is None or cur_ms <= time.time() * 1000:
        return  # no retention in effect
    weaker = mode != cur_mode or until_ms is None or until_ms < cur_ms
    if not weaker:
        return
    if cur_mode == "GOVERNANCE" and bypasses(s3):
        return
    raise access_denied("Access Denied because object protected by object lock.")


@route("object", "PUT", "retention")
async def put_retention(s3: S3Request) -> web.StreamResponse:
    body = await small_body(s3)
    await _locked_bucket(s3)
    doc = parse_xml(body)
    if doc.tag != "Retention":
        raise malformed_xml()
    mode, until = xml.text(doc, "Mode"), xml.text(doc, "RetainUntilDate")
    if (mode is None) != (until is None) or (mode is not None and mode not in MODES):
        raise malformed_xml()
    ts = parse_date(until, "RetainUntilDate") if until is not None else None
    if ts is not None and ts <= time.time():
        raise invalid_argument("The retain until date must be in the future!")
    head = await _head(s3)
    _retention_change_allowed(s3, head, mode, None if ts is None else round(ts * 1000))
    return await _patch(s3, {RETENTION_MODE: mode or "",
                             RETAIN_UNTIL: "" if ts is None else f"{ts:.3f}"})


@route("object", "GET", "retention")
async def get_retention(s3: S3Request) -> web.StreamResponse:
    await _locked_bucket(s3)
    head = await _head(s3)
    mode, until = head.headers.get(RETENTION_MODE), head.headers.get(RETAIN_UNTIL)
    if not mode or not until:
        raise S3Error("NoSuchObjectLockConfiguration", 404,
                      "The specified object does not have a ObjectLock configuration")
    root = xml.root("Retention")
    xml.sub(root, "Mode", mode)
    xml.sub(root, "RetainUntilDate", iso(float(until)))
    return xml_response(root)


@route("object", "PUT", "legal-hold")
async def put_legal_hold(s3: S3Request) -> web.StreamResponse:
    body = await small_body(s3)
    await _locked_bucket(s3)
    doc = parse_xml(body)
    status = xml.text(doc, "Status") if doc.tag == "LegalHold" else None
    if status not in ("ON", "OFF"):
        raise malformed_xml()
    return await _patch(s3, {LEGAL_HOLD: status})


@route("object", "GET", "legal-hold")
async def get_legal_hold(s3: S3Request) -> web.StreamResponse:
    await _locked_bucket(s3)
    head = await _head(s3)
    status = head.headers.get(LEGAL_HOLD)
    if not status:
        raise S3Error("NoSuchObjectLockConfiguration", 404,
                      "The specified object does not have a ObjectLock configuration")
    root = xml.root("LegalHold")
    xml.sub(root, "Status", status)
    return xml_response(root)
