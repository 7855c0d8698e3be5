"""The names of object versioning: the container settings, the hidden versions container
and how a version object is named after its object and version id, the delete marker's type,
and the query and auth headers of its sub-requests. Kept below both the middleware
(object_versioning.py) and its `?versions` listing (version_listing.py), which the middleware
calls, so that the listing takes these without importing the middleware back.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.reserved import reserved_name, split_reserved
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.proxy.request import caller_headers

CLIENT_ENABLED = "X-Versions-Enabled"
SYSMETA_ENABLED = "X-Container-Sysmeta-Versions-Enabled"
SYSMETA_CONT = "X-Container-Sysmeta-Versions-Container"
DELETE_MARKER = "application/x-deleted;swift_versions_deleted=1"
# The listing parameter of a version that was the null object (an internal request's
# listings show it: S3 still calls that version `null`; a client's never do).
WAS_NULL = "was_null"
MAX_TICKS = 10**15 - 1  # 9999999999.99999: versions are named by the inverse, newest first


def versions_container(container: str) -> str:
    return reserved_name("versions", container)


def invert(ts: Timestamp) -> str:
    return Timestamp(MAX_TICKS - ts.ticks).normal


def version_object(name: str, version_id: str) -> str:
    return reserved_name(name, invert(Timestamp.parse(version_id)))


def parse_version_object(vname: str) -> tuple[str, str | None]:
    """(user name, version id) of a version object's name; (name, None) for another name."""
    try:
        name, inv = split_reserved(vname)
        return name, Timestamp(MAX_TICKS - Timestamp.parse(inv).ticks).normal
    except (ValueError, TimestampError):
        return vname, None


def path_of(version: str, *names: str) -> str:
    """A sub-request's path: `/<version>/<account>/<container>/<object>`, names quoted."""
    return "/" + "/".join((version, *(quote(n, safe="") for n in names)))


def auth_headers(request: web.Request) -> CIMultiDict[str]:
    """The client's credentials, passed on to a listing sub-request."""
    return caller_headers(request)


def listing_query(params: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params)


def plain_text(status: int, body: str,
               headers: dict[str, str] | None = None) -> web.Response:
    """A short text/plain answer, as Swift words versioning's refusals."""
    return web.Response(status=status, body=body.encode(),
                        headers={"Content-Type": "text/plain", **(headers or {})})
