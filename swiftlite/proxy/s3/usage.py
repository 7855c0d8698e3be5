"""An account's buckets, counted: HeadBucket's `read-stats` headers, the account's
`GET /?usage` summary, the number of buckets an account may have (`max_buckets`,
CreateBucket's TooManyBuckets), and ListBuckets' pages (`BucketPage`).

Stats come from the container and account the core already keeps (object count and bytes
rolled up by the container servers, so they lag writes a little, as Swift's do). Quotas come
from the account's `X-Account-Quota-Bytes` / `-Count` (account_quotas); S3 has no per-bucket
default, so those read -1 (none). The bucket limit is judged on a listing of the account's
visible containers (hidden ones, a bucket's versions or uploads, do not count), so two
creates racing at the limit may both pass.
"""

from __future__ import annotations

import base64
import binascii
import json
from urllib.parse import quote, urlencode

from aiohttp import web

from swiftlite.proxy.response import answer_body, close_answer
from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.errors import S3Error, access_denied, invalid_argument
from swiftlite.proxy.s3.routes import route

DEFAULT_MAX_BUCKETS = 1000
MAX_BUCKETS_PAGE = 10000  # ListBuckets' max-buckets: 1 to this
# Sorts after every hidden (reserved, NUL-led) container name and before every visible one.
PAST_HIDDEN = "\x00\U0010ffff"


def max_buckets(s3: S3Request) -> int:
    """The account's bucket limit (0: none)."""
    return getattr(s3.conf, "max_buckets", DEFAULT_MAX_BUCKETS)


def stats_headers(head: web.StreamResponse, limit: int) -> dict[str, str]:
    """HeadBucket's `x-rgw-*` usage headers from the container's HEAD."""
    return {"X-RGW-Object-Count": head.headers.get("X-Container-Object-Count", "0"),
            "X-RGW-Bytes-Used": head.headers.get("X-Container-Bytes-Used", "0"),
            "X-RGW-Quota-Max-Buckets": str(limit or -1)}


async def check_room(s3: S3Request) -> None:
    """TooManyBuckets when the account has its limit of buckets already."""
    limit = max_buckets(s3)
    if not limit:
        return
    params = {"format": "json", "limit": str(limit), "marker": PAST_HIDDEN}
    resp = await s3.swift("GET", query=urlencode(params, quote_via=quote))
    if resp.status == 404:
        close_answer(resp)
        return
    if resp.status // 100 != 2:
        raise await error_of(resp, None, None)
    if len(json.loads(await answer_body(resp) or b"[]")) >= limit:
        raise S3Error("TooManyBuckets", 400, "You have attempted to create more buckets "
                      "than allowed.")


@route("service", "GET", "usage")
async def account_usage(s3: S3Request) -> web.StreamResponse:
    """The account's totals and limits (-1: no limit)."""
    if s3.ident is None:
        raise access_denied()
    head = await s3.swift("HEAD")
    close_answer(head)
    if head.status // 100 != 2 and head.status != 404:
        raise await error_of(head, None, None)
    h = head.headers
    root = xml.Element("Usage")
    xml.sub(root, "Entries")
    summary = xml.sub(root, "Summary")
    xml.sub(summary, "TotalObjects", h.get("X-Account-Object-Count", "0"))
    xml.sub(summary, "TotalBytes", h.get("X-Account-Bytes-Used", "0"))
    xml.sub(summary, "QuotaMaxBytes", _quota(h.get("X-Account-Quota-Bytes")))
    xml.sub(summary, "QuotaMaxBuckets", str(max_buckets(s3) or -1))
    xml.sub(summary, "QuotaMaxObjCount", _quota(h.get("X-Account-Quota-Count")))
    xml.sub(summary, "QuotaMaxBytesPerBucket", "-1")
    xml.sub(summary, "QuotaMaxObjCountPerBucket", "-1")
    return web.Response(body=xml.dump(root), content_type="application/xml")


def _quota(value: str | None) -> str:
    return value if value is not None and value.isascii() and value.isdigit() else "-1"


class BucketPage:
    """ListBuckets' paging: `max-buckets`, `continuation-token` (opaque: the last name
    listed) and `prefix`. Without max-buckets every bucket is listed, as before S3 paged."""

    def __init__(self, query: dict[str, str]) -> None:
        raw = query.get("max-buckets")
        self.limit: int | None = None
        if raw is not None:
            if not raw.isascii() or not raw.isdigit() or \
                    not 1 <= int(raw) <= MAX_BUCKETS_PAGE:
                raise invalid_argument(f"max-buckets must be an integer from 1 to "
                                       f"{MAX_BUCKETS_PAGE}", "max-buckets", raw)
            self.limit = int(raw)
        self.prefix = query.get("prefix", "")
        self.token = query.get("continuation-token")
        self.marker = ""
        if self.token is not None:
            try:
                self.marker = base64.urlsafe_b64decode(self.token.encode()).decode()
            except (binascii.Error, ValueError):
                raise invalid_argument("The continuation token provided is incorrect",
                                       "continuation-token", self.token) from None
        self.listed = 0
        self.last = ""
        self.done = False

    def swift_query(self) -> str:
        return "&prefix=" + quote(self.prefix) if self.prefix else ""

    def take(self, name: str) -> bool:
        """Whether the page has room for bucket `name` (if not, the listing is done)."""
        if self.limit is not None and self.listed >= self.limit:
            self.done = True
            return False
        self.listed += 1
        self.last = name
        return True

    def finish(self, root) -> None:
        if self.done:  # a bucket was left for the next page
            xml.sub(root, "ContinuationToken",
                    base64.urlsafe_b64encode(self.last.encode()).decode())
        if self.prefix:
            xml.sub(root, "Prefix", self.prefix)
