"""FormPOST: browsers upload straight into a container with an HTML form (POST,
multipart/form-data) signed by one of the account's or the container's temp-url keys.

The form's hidden fields `redirect`, `max_file_size`, `max_file_count`, `expires` and
`signature` (HMAC of "PATH\\nREDIRECT\\nMAX_FILE_SIZE\\nMAX_FILE_COUNT\\nEXPIRES") authorize
up to max_file_count object PUTs named PATH's prefix + each file's name; `x_delete_at` or
`x_delete_after` make them expire. Each file part streams into its PUT (memory stays at a
chunk) and a file bigger than max_file_size aborts its PUT, so nothing of it is stored. Fields
must come before the files they govern, as browsers send them in form order.

The answer is Swift's: "201 Created" (or the failure) as plain text, or a 303 to `redirect`
with `status` and `message` added to its query.
"""

from __future__ import annotations

import hmac
import html
import time
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.multipart import BodyPartReader
from multidict import CIMultiDict

from swiftlite.common.http import HTTPError
from swiftlite.proxy.forms import READ_CHUNK, field_value
from swiftlite.proxy.middleware.tempurl import (
    DEPRECATED_DIGESTS,
    DIGESTS,
    Grant,
    parse_signature,
    signing_keys,
)
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import AUTHORIZER, IDENTITY, api_path, sub_request, unauthorized
from swiftlite.proxy.response import BodyResponse


class FormInvalid(Exception):
    """400 "FormPost: <reason>", whatever the redirect."""


class FormUnauthorized(Exception):
    """401 "FormPost: <Reason>"."""


class _TooBig(Exception):
    pass


def _reason_phrase(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


class FormPost(Middleware):
    name = "formpost"
    plain_reads = PASS  # acts on multipart POSTs only

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        wanted = conf.get_str("allowed_digests", "sha1 sha256 sha512").lower().split()
        self.digests = tuple(d for d in DIGESTS if d in wanted)

    def info(self) -> dict[str, Any]:
        return {"allowed_digests": list(self.digests),
                "deprecated_digests": [d for d in DEPRECATED_DIGESTS if d in self.digests]}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST" or "boundary=" not in request.headers.get(
                "Content-Type", "") or request.content_type != "multipart/form-data":
            return await self.app(request)
        path = api_path(request)
        if path is None or path.container is None:
            return await self.app(request)
        try:
            return await self.translate(request, path)
        except FormInvalid as exc:
            return web.Response(status=400, text=f"FormPost: {exc}", content_type="text/plain")
        except FormUnauthorized as exc:
            raise unauthorized(path.account, f"FormPost: {str(exc).title()}") from None

    async def translate(self, request: web.Request, path) -> web.StreamResponse:
        try:
            reader = await request.multipart()
        except (ValueError, AssertionError, KeyError):
            raise FormInvalid("invalid starting boundary") from None
        keys: list[tuple[str, bool]] | None = None
        fields: dict[str, str] = {}
        status, message, file_count = 0, "", 0
        try:
            while True:
                part = await reader.next()
                if part is None:
                    break
                if not isinstance(part, BodyPartReader):
                    await part.release()  # a nested multipart is no field of ours
                    continue
                if part.filename:
                    file_count += 1
                    try:
                        max_count = int(fields.get("max_file_count") or 0)
                    except ValueError:
                        raise FormInvalid("max_file_count not an integer") from None
                    if file_count > max_count:
                        status, message = 400, "max file count exceeded"
                        break
                    if keys is None:
                        keys = await signing_keys(self.proxy, request, path)
                    status = await self.upload(request, path, fields, part, keys)
                    if status // 100 != 2:
                        break
                elif part.filename == "":
                    await part.release()  # a file input left empty
                else:
                    value, _ = await field_value(part)
                    if part.name:
                        fields[part.name.lower()] = value.rstrip("\r\n")
        except (ValueError, AssertionError):
            raise FormInvalid("invalid starting boundary") from None
        except BadHttpMessage:  # a part's headers are not headers
            raise FormInvalid("invalid part headers") from None
        if not status:
            status, message = 400, "no files to process"
        return self.answer(fields.get("redirect"), status, message)

    @staticmethod
    def answer(redirect: str | None, status: int, message: str) -> web.Response:
        if not redirect:
            body = _reason_phrase(status)
            if message:
                body += f"\r\nFormPost: {message.title()}"
            return web.Response(status=status, text=body, content_type="text/plain")
        redirect += "&" if "?" in redirect else "?"
        redirect += f"status={status}&message={quote(message)}"
        body = (f'<html><body><p><a href="{html.escape(redirect)}">Click to continue...</a>'
                "</p></body></html>")
        return web.Response(status=303, text=body, content_type="text/html",
                            headers={"Location": redirect})

    def check_signature(self, request: web.Request, fields: dict[str, str],
                        keys: list[tuple[str, bool]]) -> bool:
        """Whether a container key (not an account key) signed the form; raises 401 if
        no key did."""
        parsed = parse_signature(fields.get("signature", ""), self.digests)
        if parsed is None or not keys:
            raise FormUnauthorized("invalid signature")
        digest, given = parsed
        signed = "\n".join((request.path, fields.get("redirect") or "",
                            fields.get("max_file_size") or "0",
                            fields.get("max_file_count") or "0",
                            fields.get("expires") or "0"))
        for key, container_scoped in keys:
            expected = hmac.new(key.encode("utf-8"), signed.encode("utf-8", "surrogateescape"),
                                DIGESTS[digest]).hexdigest()
            if hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
                return container_scoped
        raise FormUnauthorized("invalid signature")

    async def upload(self, request: web.Request, path, fields: dict[str, str],
                     part: BodyPartReader, keys: list[tuple[str, bool]]) -> int:
        """PUT one file part as PATH + its name; the PUT's status."""
        try:
            max_size = int(fields.get("max_file_size") or 0)
        except ValueError:
            raise FormInvalid("max_file_size not an integer") from None
        headers: CIMultiDict[str] = CIMultiDict()
        for field, header in (("x_delete_at", "X-Delete-At"),
                              ("x_delete_after", "X-Delete-After")):
            if field in fields:
                try:
                    headers[header] = str(int(fields[field]))
                except ValueError:
                    raise FormInvalid(f"{field} not an integer") from None
        try:
            expires = int(fields.get("expires") or 0)
        except ValueError:
            raise FormInvalid("expired not an integer") from None
        if expires < time.time():
            raise FormUnauthorized("form expired")
        container_scoped = self.check_signature(request, fields, keys)
        headers["Content-Type"] = part.headers.get("Content-Type") or \
            "application/octet-stream"
        if "Content-Encoding" in part.headers:
            headers["Content-Encoding"] = part.headers["Content-Encoding"]
        # The form's path names a container (uploads go in it) or a prefix within it.
        obj = (path.obj or "") + (part.filename or "filename")
        target = f"/{path.version}/{path.account}/{path.container}/{obj}"
        sub = sub_request(request, "PUT", quote(target, safe="/"), headers,
                          self._capped(part, max_size))
        sub[AUTHORIZER] = Grant(path.account, path.container, obj, False,
                                frozenset({"PUT"}), container_scoped)
        sub[IDENTITY] = None
        try:
            resp = await self.app(sub)
        except _TooBig:
            raise FormInvalid("max_file_size exceeded") from None
        except HTTPError as exc:
            return exc.status
        if isinstance(resp, BodyResponse):
            resp.close()
        return resp.status

    @staticmethod
    async def _capped(part: BodyPartReader, limit: int) -> AsyncIterator[bytes]:
        """The part's bytes; past `limit` raises, which aborts the PUT before it commits."""
        seen = 0
        while True:
            chunk = await part.read_chunk(READ_CHUNK)
            if not chunk:
                return
            seen += len(chunk)
            if seen > limit:
                raise _TooBig()
            yield chunk

