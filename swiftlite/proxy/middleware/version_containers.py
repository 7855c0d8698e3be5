"""Object versioning's container side: turning versioning on and off, the container's
answers (HEAD/GET say whether it is on; a listing shows a link as its version), deleting a
versioned container, and the account listing that hides versions containers.

Split from object_versioning.py (the object side) and mixed into its middleware, whose
sub-request helpers these methods use.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.config import TRUE_VALUES
from swiftlite.common.http import HTTPError
from swiftlite.common.reserved import reserved_name, split_reserved
from swiftlite.common.sysmeta import VERSIONS_LOCKED
from swiftlite.proxy.middleware.version_listing import list_versions
from swiftlite.proxy.middleware.version_names import (
    CLIENT_ENABLED,
    SYSMETA_CONT,
    SYSMETA_ENABLED,
    WAS_NULL,
    auth_headers,
    listing_query,
    path_of,
    plain_text,
    versions_container,
)
from swiftlite.proxy.request import INTERNAL, ApiPath, clone
from swiftlite.proxy.response import answer_body, close_answer

SYSMETA_LOCKED = VERSIONS_LOCKED  # set by S3 object lock: versioning stays on
LEGACY = ("X-Versions-Location", "X-History-Location")


class VersionedContainers:
    """Container and account requests, for the ObjectVersioning middleware."""

    # ---- containers ------------------------------------------------------------------------

    async def container_request(self, request: web.Request,
                                path: ApiPath) -> web.StreamResponse:
        method = request.method
        if method in ("PUT", "POST") and CLIENT_ENABLED in request.headers:
            return await self.enable(request, path)
        if method == "DELETE":
            return await self.delete_container(request, path)
        if method not in ("GET", "HEAD"):
            return await self.app(request)
        if method == "GET" and "versions" in request.query:
            return await list_versions(self, request, path)
        resp = await self.app(request)
        return await self._annotate_container(request, path, resp)

    async def _annotate_container(self, request: web.Request, path: ApiPath,
                                  resp: web.StreamResponse) -> web.StreamResponse:
        """X-Versions-Enabled from sysmeta; bytes used include the versions'; a JSON
        listing marks version links."""
        enabled = resp.headers.get(SYSMETA_ENABLED)
        if enabled is not None:
            resp.headers[CLIENT_ENABLED] = enabled
        vcont = resp.headers.get(SYSMETA_CONT)
        if not vcont or resp.status // 100 != 2:
            return resp
        head = await self._container_head(request, path, unquote(vcont))
        close_answer(head)
        if head.status // 100 == 2 and "X-Container-Bytes-Used" in resp.headers:
            resp.headers["X-Container-Bytes-Used"] = str(
                int(resp.headers["X-Container-Bytes-Used"])
                + int(head.headers.get("X-Container-Bytes-Used", "0")))
        if request.method == "GET" and resp.content_type == "application/json" \
                and isinstance(resp, web.Response) and isinstance(resp.body, bytes):
            try:
                listing = json.loads(resp.body)
            except ValueError:
                return resp
            for item in listing:
                mark_link(item, path.account, path.container or "")
                if not request.get(INTERNAL):
                    item.pop(WAS_NULL, None)  # for the S3 layer's listings only
            resp.body = json.dumps(listing).encode()
        return resp

    async def enable(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        assert path.container is not None
        head = await self._container_head(request, path, path.container)
        close_answer(head)
        if head.status // 100 == 2:
            if any(head.headers.get(h) for h in LEGACY) or any(
                    request.headers.get(h) for h in LEGACY):
                raise HTTPError(400, "Cannot enable object versioning on a container that is "
                                "already using the legacy versioned writes feature.")
            if head.headers.get("X-Container-Sync-To"):
                raise HTTPError(400, "Cannot enable object versioning on a container "
                                "configured as source of container syncing.")
        is_enabled = request.headers[CLIENT_ENABLED].strip().lower() in TRUE_VALUES
        if not is_enabled and head.status // 100 == 2 and \
                (head.headers.get(SYSMETA_LOCKED) or "").lower() in TRUE_VALUES:
            raise HTTPError(409, "Object versioning cannot be turned off in a container whose "
                            "versions may be under retention.")
        headers = CIMultiDict(request.headers)
        headers[SYSMETA_ENABLED] = "True" if is_enabled else "False"
        vcont = versions_container(path.container)
        created = False
        if is_enabled:
            if not await self._authorized_write(request, path):
                return await self.app(request)  # the core answers 401/403 as it should
            made = await self._send(request, "PUT", path_of(path.version, path.account, vcont))
            close_answer(made)
            if made.status // 100 != 2 and made.status != 409:
                raise HTTPError(500, "Error enabling object versioning")
            created = made.status == 201
            headers[SYSMETA_CONT] = quote(vcont, safe="")
        resp = await self.app(clone(request, headers=headers))
        if resp.status // 100 != 2 and created:
            gone = await self._send(request, "DELETE", path_of(path.version, path.account, vcont))
            close_answer(gone)
        return resp

    async def _authorized_write(self, request: web.Request, path: ApiPath) -> bool:
        """Whether the caller may change the container itself (the owner, or an account
        ACL that allows it); the versions container is made only for such callers."""
        target = self.proxy.target(request, path.account, path.container, None)
        if target.is_owner:
            return True
        authorizer = request.get("swiftlite.authorizer")
        if authorizer is None:
            return False
        try:
            authorizer.authorize_account(request, target.ident, path.account, path.container)
        except HTTPError:
            return False
        return True

    async def delete_container(self, request: web.Request,
                               path: ApiPath) -> web.StreamResponse:
        assert path.container is not None
        head = await self._container_head(request, path, path.container)
        close_answer(head)
        vcont = head.headers.get(SYSMETA_CONT) if head.status // 100 == 2 else None
        if vcont:
            if not await self._authorized_write(request, path):
                return await self.app(request)
            vpath = path_of(path.version, path.account, unquote(vcont))
            vhead = await self._send(request, "HEAD", vpath)
            close_answer(vhead)
            if vhead.status // 100 == 2 and \
                    int(vhead.headers.get("X-Container-Object-Count", "0")) > 0:
                return plain_text(409, "Delete all versions before deleting container.")
            if vhead.status // 100 != 2 and vhead.status != 404:
                raise HTTPError(500, "Error deleting versioned container")
            gone = await self._send(request, "DELETE", vpath)
            close_answer(gone)
            if gone.status // 100 != 2 and gone.status != 404:
                raise HTTPError(500, "Error deleting versioned container")
        return await self.app(request)

    # ---- account listings ------------------------------------------------------------------

    async def account_listing(self, request: web.Request, path: ApiPath) -> web.StreamResponse:
        """A container's versions count toward its listed bytes (as Swift shows them)."""
        resp = await self.app(request)
        if resp.status != 200 or resp.content_type != "application/json" or \
                not isinstance(resp, web.Response) or not isinstance(resp.body, bytes):
            return resp
        try:
            listing = json.loads(resp.body)
        except ValueError:
            return resp
        names = [i["name"] for i in listing if "name" in i]
        if not names:
            return resp
        query = [("format", "json"), ("prefix", reserved_name("versions", ""))]
        vresp = await self._send(request, "GET", path_of(path.version, path.account),
                                 auth_headers(request), query=listing_query(query))
        if vresp.status != 200:
            close_answer(vresp)
            return resp
        try:
            hidden = {split_reserved(i["name"])[1]: i for i in json.loads(await answer_body(vresp))
                      if "name" in i}
        except (ValueError, IndexError):
            return resp
        if not hidden:
            return resp
        for item in listing:
            extra = hidden.get(item.get("name"))
            if extra is not None:
                item["bytes"] += extra.get("bytes", 0)
        resp.body = json.dumps(listing).encode()
        return resp


def mark_link(item: dict, account: str, container: str) -> None:
    """A primary listing row of a version link, as Swift shows it."""
    vid = item.pop("ov_version_id", None)
    if vid is None or "name" not in item:
        return
    item["symlink_path"] = quote(f"/v1/{account}/{container}/{item['name']}") + \
        f"?version-id={vid}"
    item["version_symlink"] = True
