"""S3's versioning semantics where they differ from Swift's object versioning.

- A GET/HEAD that finds no object says whether a delete marker hides it
  (`x-amz-delete-marker: true|false`): in a bucket that was ever versioned, a key with
  versions but no current object is one a delete marker (or a delete while suspended) hides.
- Deleting the current version by id makes the newest remaining version current (S3), where
  Swift's leaves the name without a current object: the newest remaining version, unless it
  is a delete marker, is restored (Swift's `PUT ?version-id=`, an empty body).
- A DELETE that writes a delete marker answers `x-amz-delete-marker: true` with the marker's
  version id; deleting a delete marker by id answers `x-amz-delete-marker: true` too.
- `versionId=null` names the object written before versioning was enabled even after object
  versioning kept it as a version under a timestamp id (its listing row says `was_null`):
  `resolve_null` sends the request to that id before it is authorized, and `null_answer`
  says `null` again in the answer. (DeleteObjects and a copy source's `versionId=null`
  reach only an unversioned current object.)
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.auth import Identity
from swiftlite.proxy.request import AUTHENTICATED, answer_of, sub_request
from swiftlite.proxy.response import answer_body, close_answer
from swiftlite.proxy.s3.context import S3Request, error_of
from swiftlite.proxy.s3.errors import S3Error, no_such_bucket

NULL_ALIAS = "null_alias"  # s3.extra: the version id `null` was resolved to
NULL_SCAN = 1000  # the versions of one key searched for the one that was `null`

DELETED = "application/x-deleted;swift_versions_deleted=1"
MARKER = "x-amz-delete-marker"


def is_marker(resp: web.StreamResponse) -> bool:
    return resp.headers.get("Content-Type", "").startswith(DELETED)


async def key_versions(s3: S3Request, key: str, limit: int = 20) -> list[dict]:
    """The newest versions of exactly `key` (its rows come first in a listing by prefix)."""
    query = urlencode({"versions": "", "format": "json", "prefix": key, "limit": str(limit)},
                      quote_via=quote)
    resp = await s3.swift("GET", s3.bucket, query=query)
    if resp.status // 100 != 2:
        close_answer(resp)
        return []
    try:
        rows = json.loads(await answer_body(resp) or b"[]")
    except ValueError:
        return []
    return [r for r in rows if r.get("name") == key]


async def not_found(s3: S3Request, resp: web.StreamResponse, is_get: bool) -> S3Error:
    """The S3 error for a GET/HEAD's 404, with `x-amz-delete-marker`."""
    err = await error_of(resp, s3.bucket, s3.key)
    head = await s3.swift("HEAD", s3.bucket)
    close_answer(head)
    if head.status == 404:
        return no_such_bucket(s3.bucket or "") if is_get else err
    marker = False
    if "X-Versions-Enabled" in head.headers:
        if s3.query.get("versionId"):
            marker = is_marker(resp)
        else:
            marker = bool(await key_versions(s3, s3.key or "", 1))
    err.headers[MARKER] = "true" if marker else "false"
    return err


PROMOTE_TRIES = 5


async def promote(s3: S3Request, key: str) -> None:
    """After the current version of `key` was deleted by id: its newest remaining version,
    unless a delete marker, becomes current.

    Another request may be deleting that very version meanwhile (a multi-object delete of
    every version, sent several times at once): if it is gone by the time it would be
    current (404), or once it is (a delete that looked before the link was made leaves the
    link), the link goes and the next newest is tried."""
    gone: set[str] = set()
    for _ in range(PROMOTE_TRIES):
        rows = [r for r in await key_versions(s3, key) if r.get("version_id") not in gone]
        if not rows or rows[0].get("content_type", "").startswith(DELETED):
            return
        vid = rows[0].get("version_id")
        if not vid or vid == "null":
            return
        query = "version-id=" + quote(vid, safe="")
        resp = await s3.swift("PUT", s3.bucket, key, {"Content-Length": "0"}, b"",
                              query=query)
        close_answer(resp)
        if resp.status == 404:
            gone.add(vid)  # deleted meanwhile (the listing may show it a little longer)
            continue
        if resp.status // 100 != 2:
            return
        head = await s3.swift("HEAD", s3.bucket, key, query=query)
        close_answer(head)
        if head.status != 404:
            return
        # Current, and deleted under it: the link goes with a delete of that version.
        close_answer(await s3.swift("DELETE", s3.bucket, key, query=query))
        gone.add(vid)


def delete_headers(resp: web.StreamResponse, vid: str | None) -> dict[str, str]:
    """An S3 DELETE's version headers from the Swift answer (see delete_one)."""
    out: dict[str, str] = {}
    if vid:
        out["x-amz-version-id"] = vid
        if resp.headers.get(MARKER) == "true":
            out[MARKER] = "true"
    elif resp.headers.get("X-Object-Version-Id"):
        out[MARKER] = "true"
        out["x-amz-version-id"] = resp.headers["X-Object-Version-Id"]
    return out


async def resolve_null(s3: S3Request, ident: Identity) -> None:
    """`versionId=null` on an object: where no unversioned object is current but a version
    was the null one (object versioning kept it when versioning began), name that version
    instead. Looked up as `ident` (the bucket owner's rights: the caller is judged after,
    on the version it then names)."""
    if s3.query.get("versionId") != "null" or not s3.key or not s3.bucket:
        return
    base = "/v1/" + quote(s3.account, safe="") + "/" + quote(s3.bucket, safe="")

    async def ask(method: str, path: str, query: str) -> web.StreamResponse:
        sub = sub_request(s3.request, method, path, CIMultiDict(), query=query)
        sub[AUTHENTICATED] = ident
        return await answer_of(s3.app, sub)
    head = await ask("HEAD", base + "/" + quote(s3.key, safe="/"), "version-id=null")
    close_answer(head)
    if head.status != 404:
        return
    listing = await ask("GET", base, urlencode(
        {"versions": "", "format": "json", "prefix": s3.key, "limit": str(NULL_SCAN)},
        quote_via=quote))
    if listing.status // 100 != 2:
        close_answer(listing)
        return
    try:
        rows = json.loads(await answer_body(listing) or b"[]")
    except ValueError:
        return
    for row in rows:
        vid = row.get("version_id")
        if row.get("name") == s3.key and row.get("was_null") and vid and vid != "null":
            s3.query["versionId"] = vid
            s3.extra[NULL_ALIAS] = vid
            return


def null_answer(s3: S3Request, resp: web.StreamResponse) -> web.StreamResponse:
    """The answer to a request whose `null` resolve_null resolved says `null` again."""
    alias = s3.extra.get(NULL_ALIAS)
    if alias and resp.headers.get("x-amz-version-id") == alias:
        resp.headers["x-amz-version-id"] = "null"
    return resp
