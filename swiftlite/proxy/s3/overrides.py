"""Object ACLs set after the object was written (PutObjectAcl), kept beside the object.

An object's first ACL is object sysmeta written with it (acl.object_create_headers). A Swift
POST cannot change sysmeta, and rewriting the object would change its Last-Modified (and add
a version to a versioned bucket), so a later ACL is an entry in the bucket's hidden container
`\\x00s3acl\\x00<bucket>` (same account), named `\\x00<key>\\x00<X-Timestamp of the object>`,
its ACL in sysmeta. The timestamp names one write of one key (each version has its own), so
an entry never applies to an object written later under the same key: an overwritten or
deleted object's entry is garbage, dropped with the bucket. A bucket that never had an
entry says so in its container sysmeta, and its reads make no extra sub-request.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from multidict import CIMultiDict

from swiftlite.common.reserved import reserved_name
from swiftlite.proxy.auth import Identity
from swiftlite.proxy.request import ALLOW_RESERVED, AUTHENTICATED, answer_of, sub_request
from swiftlite.proxy.response import answer_body, close_answer

FLAG = "X-Container-Sysmeta-S3-Acl-Entries"
OBJECT_ACL = "X-Object-Sysmeta-S3-Acl"


def container(bucket: str) -> str:
    return reserved_name("s3acl", bucket)


def entry(key: str, timestamp: str) -> str:
    return reserved_name(key, timestamp)


def _path(account: str, cont: str, name: str | None = None) -> str:
    out = "/v1/" + quote(account, safe="") + "/" + quote(cont, safe="")
    return out if name is None else out + "/" + quote(name, safe="")


async def _send(s3: Any, ident: Identity, method: str, path: str,
                headers: dict[str, str] | None = None, query: str = ""):
    sub = sub_request(s3.request, method, path, CIMultiDict(headers or {}), query=query)
    sub[ALLOW_RESERVED] = True
    sub[AUTHENTICATED] = ident
    return await answer_of(s3.app, sub)


def has_entries(meta: dict[str, str]) -> bool:
    """Whether a bucket (its lowercased metadata) ever had an entry."""
    return bool(meta.get(FLAG.lower()))


async def lookup(s3: Any, ident: Identity, account: str, bucket: str, key: str,
                 timestamp: str | None) -> str | None:
    """The ACL (its JSON) set for the object written at `timestamp`, None if none was."""
    if not timestamp:
        return None
    resp = await _send(s3, ident, "HEAD", _path(account, container(bucket),
                                                entry(key, timestamp)))
    close_answer(resp)
    if resp.status // 100 != 2:
        return None
    return resp.headers.get(OBJECT_ACL)


async def store(s3: Any, ident: Identity, account: str, bucket: str, key: str,
                timestamp: str, acl_json: str, flagged: bool) -> int:
    """Write the entry (and the bucket's flag, the first time); the failing status or 0."""
    if not flagged:
        resp = await _send(s3, ident, "POST", _path(account, bucket), {FLAG: "1"})
        close_answer(resp)
        if resp.status // 100 != 2:
            return resp.status
    cont = container(bucket)
    for _ in range(2):
        resp = await _send(s3, ident, "PUT", _path(account, cont, entry(key, timestamp)),
                           {OBJECT_ACL: acl_json, "Content-Length": "0"})
        close_answer(resp)
        if resp.status != 404:
            return 0 if resp.status // 100 == 2 else resp.status
        made = await _send(s3, ident, "PUT", _path(account, cont))
        close_answer(made)
    return 503


async def drop_all(s3: Any, ident: Identity, account: str, bucket: str) -> None:
    """Delete a deleted bucket's entries and their container (best effort)."""
    cont = container(bucket)
    marker = ""
    while True:
        resp = await _send(s3, ident, "GET", _path(account, cont),
                           query=urlencode({"format": "json", "marker": marker},
                                           quote_via=quote))
        if resp.status // 100 != 2:
            close_answer(resp)
            break
        rows = json.loads(await answer_body(resp) or b"[]")
        if not rows:
            break
        for row in rows:
            gone = await _send(s3, ident, "DELETE", _path(account, cont, row["name"]))
            close_answer(gone)
        marker = rows[-1]["name"]
    gone = await _send(s3, ident, "DELETE", _path(account, cont))
    close_answer(gone)
