"""Server-side copy: `COPY` with `Destination` and `PUT` with `X-Copy-From`.

The source is read with a GET sent down the pipeline as the caller (so its ACLs, cross-account
rules and large-object features apply, and `Range` copies only that range), then written with
a PUT sub-request carrying the source's metadata under the caller's own headers
(`X-Fresh-Metadata: true` drops the source's). The source is checked before the destination,
as in Swift: a source the caller may not read is 403 whatever the destination.

`?multipart-manifest=get` copies a large object's manifest rather than its data: an SLO's in
its PUT form, PUT again with `multipart-manifest=put` so its segments are checked where it
lands (as the caller, in the destination account). `?part-number=N` copies that part only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common import constraints
from swiftlite.common.http import HTTPError
from swiftlite.common.sysmeta import S3_SSE
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import api_path, sub_request
from swiftlite.proxy.response import BodyResponse, close_answer

# Source headers a copy keeps besides X-Object-Meta-* (a large object's manifest header
# only when the manifest itself is copied: ?multipart-manifest=get; else its joined data).
COPIED = ("content-type", "content-encoding", "content-disposition")
MANIFEST_HEADERS = ("x-object-manifest", "x-static-large-object")
# A symlink's own headers, kept by `?symlink=get` (the copy is a link; the caller's
# X-Symlink-Target-Account wins).
LINK_HEADERS = ("x-symlink-target", "x-symlink-target-account", "x-symlink-target-etag")
# Request headers that describe the copy itself, not the new object.
NOT_FORWARDED = ("x-copy-from", "x-copy-from-account", "destination", "destination-account",
                 "range", "if-match", "if-none-match", "if-modified-since",
                 "if-unmodified-since", "x-fresh-metadata", "content-length",
                 "transfer-encoding", "etag")


def _split_ref(value: str, header: str) -> tuple[str, str]:
    """'c/o' (or '/c/o'), percent-encoded, to (container, object)."""
    # surrogateescape: %-escapes that are not UTF-8 fail the name checks below (unquote's
    # default turned them into U+FFFD, and the copy went to a name nobody asked for).
    ref = unquote(value, errors="surrogateescape")
    if ref.startswith("/"):
        ref = ref[1:]
    cont, _, name = ref.partition("/")
    if not cont or not name:
        raise HTTPError(412, f"{header} header must be of the form "
                             "<container name>/<object name>")
    for check, v in ((constraints.check_container, cont), (constraints.check_object, name)):
        bad = check(v)
        if bad:
            raise HTTPError(412, bad)
    return cont, name


def _account(value: str | None, default: str, header: str) -> str:
    if value is None:
        return default
    acct = unquote(value, errors="surrogateescape")
    bad = constraints.check_account(acct)
    if bad:
        raise HTTPError(412, f"{header}: {bad}")
    return acct


def _link_copy(request: web.Request) -> bool:
    return request.query.get("symlink") == "get"


def _manifest_copy(request: web.Request) -> bool:
    return request.query.get("multipart-manifest") == "get"


def _path(acct: str, cont: str, name: str, version: str = "v1") -> str:
    return "/" + "/".join((version, quote(acct), quote(cont), quote(name)))


class Copy(Middleware):
    name = "copy"
    plain_reads = PASS  # acts on COPY and PUT with X-Copy-From only

    def info(self) -> None:
        return None  # Swift does not list copy in /info either

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        if method == "COPY" or (method == "PUT" and "X-Copy-From" in request.headers):
            path = api_path(request)
            if path is not None and path.obj is not None:
                return await self.copy(request, path)
        return await self.app(request)

    async def copy(self, request: web.Request, path) -> web.StreamResponse:
        h = request.headers
        if request.method == "COPY":
            if "Destination" not in h:
                raise HTTPError(412, "You must provide a Destination header")
            d_cont, d_name = _split_ref(h["Destination"], "Destination")
            d_acct = _account(h.get("Destination-Account"), path.account,
                              "Destination-Account")
            src = (path.account, path.container, path.obj)
        else:
            if request.content_length not in (None, 0):
                raise HTTPError(400, "Copy requests require a zero byte body")
            d_acct, d_cont, d_name = path.account, path.container, path.obj
            s_cont, s_name = _split_ref(h["X-Copy-From"], "X-Copy-From")
            src = (_account(h.get("X-Copy-From-Account"), path.account,
                            "X-Copy-From-Account"), s_cont, s_name)
        source = await self._read_source(request, path.version, src)
        if not isinstance(source, BodyResponse) or source.status // 100 != 2:
            # The read's refusal (416, 412, ...) is the answer, its body sent as it came:
            # closed here, it kept its Content-Length with nothing left to send, and the
            # client waited for bytes that never came.
            return source
        try:
            return await self._write(request, path.version, src, source,
                                     (d_acct, d_cont, d_name))
        finally:
            source.close()

    async def _read_source(self, request: web.Request, version: str,
                           src: tuple[str, str, str]) -> web.StreamResponse:
        headers: CIMultiDict[str] = CIMultiDict()
        for k in ("X-Auth-Token", "X-Storage-Token", "X-Service-Token", "Range", "Referer"):
            if k in request.headers:
                headers[k] = request.headers[k]
        headers["X-Newest"] = "true"
        params = []
        if _manifest_copy(request):
            # An SLO manifest in the form it is PUT in (checked again where it lands).
            params.append("multipart-manifest=get&format=raw")
        if "part-number" in request.query:
            params.append(f"part-number={quote(request.query['part-number'], safe='')}")
        if "version-id" in request.query:  # object versioning: copy that version
            params.append(f"version-id={quote(request.query['version-id'], safe='')}")
        if _link_copy(request):
            params.append("symlink=get")  # the link itself, not its target
        sub = sub_request(request, "GET", _path(*src, version=version), headers,
                          query="&".join(params))
        resp = await self.app(sub)
        if resp.status // 100 == 2 and S3_SSE in resp.headers:
            close_answer(resp)  # ciphertext: S3's CopyObject decrypts and re-encrypts instead
            raise HTTPError(400, "The source is encrypted by S3 server-side encryption: "
                            "copy it through the S3 API.")
        if resp.status == 416 or (resp.status // 100 != 2 and resp.status != 404):
            return resp
        if resp.status == 404:
            if isinstance(resp, BodyResponse):
                resp.close()
            raise HTTPError(404, "Not Found")
        return resp

    async def _write(self, request: web.Request, version: str, src: tuple[str, str, str],
                     source: BodyResponse, dest: tuple[str, str, str]) -> web.StreamResponse:
        fresh = request.headers.get("X-Fresh-Metadata", "").lower() in ("true", "1", "yes")
        kept = COPIED + MANIFEST_HEADERS if _manifest_copy(request) else COPIED
        if _link_copy(request):
            kept += LINK_HEADERS
        headers: CIMultiDict[str] = CIMultiDict()
        for k, v in source.headers.items():
            lk = k.lower()
            if (not fresh and (lk.startswith("x-object-meta-") or lk in kept)) or \
                    (lk in MANIFEST_HEADERS + LINK_HEADERS and lk in kept):
                headers[k] = v
        for k, v in request.headers.items():
            lk = k.lower()
            if lk in NOT_FORWARDED:
                continue
            if lk.startswith("x-object-meta-") or lk in COPIED or lk in LINK_HEADERS:
                headers[k] = v  # the caller's own values win over the source's
            elif lk not in headers:
                headers.add(k, v)
        length = source.content_length
        if length is None:
            raise HTTPError(500, "Copy source has no length")
        if length > self.proxy.max_file_size:
            raise HTTPError(413, "Copy source larger than the maximum object size")
        headers["Content-Length"] = str(length)
        body: Any = await source.read() if length <= self.proxy.put_buffer_size \
            else source.chunks()
        query = ""
        if _manifest_copy(request) and "X-Static-Large-Object" in source.headers:
            query = "multipart-manifest=put"  # the SLO feature checks its segments again
        put = sub_request(request, "PUT", _path(*dest, version=version), headers, body,
                          query=query)
        resp = await self.app(put)
        if resp.status // 100 == 2:
            resp.headers["X-Copied-From"] = quote(f"{src[1]}/{src[2]}")
            if src[0] != dest[0]:
                resp.headers["X-Copied-From-Account"] = quote(src[0])
            if "Last-Modified" in source.headers:
                resp.headers["X-Copied-From-Last-Modified"] = source.headers["Last-Modified"]
        return resp
