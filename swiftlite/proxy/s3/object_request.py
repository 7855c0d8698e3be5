"""An object request in Swift's terms, for every module that reads or writes objects: the
query naming one version, the new object's Swift headers from the S3 request's, and the
document a copy answers. Kept below obj.py, which calls the resource modules' hooks, so that
those modules (acl.py, encryption.py, attributes.py, lock.py, multipart.py) take these
without importing obj.py back.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.context import PASSED, S3Request
from swiftlite.proxy.s3.documents import xml_response
from swiftlite.proxy.s3.errors import not_implemented

AMZ_META = "x-amz-meta-"


def version_query(vid: str | None) -> str:
    """The Swift query reading or deleting one version (`null`: the unversioned one)."""
    return "" if not vid else "version-id=" + quote(vid, safe="")


def mapped_headers(items: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """The Swift headers of S3's `x-amz-meta-*` and of the object's own headers (Content-Type
    and the like) among `items` (a request's headers, a POST form's fields)."""
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in items:
        lk = k.lower()
        if lk.startswith(AMZ_META):
            out["X-Object-Meta-" + k[len(AMZ_META):]] = v
        elif lk in PASSED:
            out[k] = v
        elif lk == "x-amz-website-redirect-location":
            raise not_implemented(f"{k} is not supported.")
    return out


def object_headers(s3: S3Request) -> CIMultiDict[str]:
    """The new object's Swift headers from the S3 request's."""
    out = mapped_headers(s3.request.headers.items())
    enc = out.get("Content-Encoding")
    if enc is not None:  # aws-chunked framing is ours to undo, not the object's
        kept = ", ".join(e for e in (p.strip() for p in enc.split(","))
                        if e and e.lower() != "aws-chunked")
        if kept:
            out["Content-Encoding"] = kept
        else:
            del out["Content-Encoding"]
    if "Content-Type" not in out:
        out["Content-Type"] = "binary/octet-stream"
    return out


def iso_from_http(value: str) -> str:
    """An HTTP date (Last-Modified) as S3's XML documents write times."""
    from email.utils import parsedate_to_datetime
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        import time
        return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def copy_result(resp: web.StreamResponse, tag: str = "CopyObjectResult") -> web.Response:
    """CopyObject's (`tag` CopyPartResult: UploadPartCopy's) answer from the copy's Swift PUT
    answer: its time and ETag."""
    root = xml.root(tag)
    xml.sub(root, "LastModified", iso_from_http(resp.headers.get("Last-Modified", "")))
    xml.sub(root, "ETag", '"' + resp.headers.get("ETag", "").strip('"') + '"')
    return xml_response(root)
