"""Container and account quotas: object PUTs that would go over a quota are refused (413).

`container_quotas`: the container's owner sets `X-Container-Meta-Quota-Bytes` and
`-Quota-Count` (digits, checked when set); a PUT whose Content-Length would take the container
past either is 413 "Upload exceeds quota." (after the caller's write permission is checked, so
the refusal never tells a stranger that the container exists).

`account_quotas`: `X-Account-Quota-Bytes` / `-Quota-Count` (and `-Policy-<name>` variants; the
legacy `X-Account-Meta-Quota-Bytes` is read as `X-Account-Quota-Bytes`) may be set or removed
only by a reseller admin; they are kept as account sysmeta, shown to the owner under their
own names, and do not bind the reseller admin's own uploads.

As in Swift, both use the cached container/account stats, so a burst of concurrent uploads, or
a chunked one (its size is unknown up front), may go over a quota once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import HTTPError
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import (
    ALLOW_RESERVED,
    AUTHORIZER,
    IDENTITY,
    api_path,
    clone,
    sub_request,
)
from swiftlite.proxy.response import BodyResponse

EXCEEDED = "Upload exceeds quota."
POLICY_EXCEEDED = "Upload exceeds policy quota."
QUOTA_TYPES = ("Quota-Bytes", "Quota-Count")
# Object versioning's sysmeta naming a container's versions container (quoted).
VERSIONS_CONT = "x-container-sysmeta-versions-container"


async def refuse(mw: Middleware, request: web.Request, account: str, container: str,
                 body: str) -> HTTPError:
    """413, unless the caller could not have written here anyway (then its 401/403)."""
    ident = request.get(IDENTITY)
    authorizer = request.get(AUTHORIZER)
    if authorizer is not None and not authorizer.is_owner(ident, account):
        info = await mw.proxy.container_info(request, account, container)
        authorizer.authorize_container(request, ident, account, info, True, False)
    return HTTPError(413, body)


def _int(value: str | None) -> int:
    """A quota's value; anything but digits means no quota (-1)."""
    # isascii: "²".isdigit() is true, and int() refuses it.
    return int(value) if value is not None and value.isascii() and value.isdigit() else -1


def _parsed(info: Any, parse: Callable[[dict[str, str]], tuple[int, ...]]) -> tuple[int, ...]:
    """The quotas in a cached info's metadata, parsed once per info (every PUT asks)."""
    memo = info.__dict__.get("_quotas")
    if memo is None:
        memo = info._quotas = parse({k.lower(): v for k, v in info.meta.items()})
    return memo


def _length(request: web.Request) -> int:
    try:
        return request.content_length or 0
    except ValueError:
        return 0


class ContainerQuotas(Middleware):
    name = "container_quotas"
    plain_reads = PASS  # acts on container PUT/POST and object PUT only

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None or path.container is None:
            return await self.app(request)
        if path.obj is None and request.method in ("PUT", "POST"):
            for kind, what in (("Bytes", "bytes"), ("Count", "count")):
                val = request.headers.get(f"X-Container-Meta-Quota-{kind}")
                if val and not (val.isascii() and val.isdigit()):
                    raise HTTPError(400, f"Invalid {what} quota.")
        elif path.obj is not None and request.method == "PUT":
            await self._check(request, path.account, path.container)
        return await self.app(request)

    async def _check(self, request: web.Request, account: str, container: str) -> None:
        info = await self.proxy.container_info(request, account, container)
        if info.status // 100 != 2:
            return  # the core answers 404
        q_bytes, q_count = _parsed(info, lambda meta: (
            _int(meta.get("x-container-meta-quota-bytes")),
            _int(meta.get("x-container-meta-quota-count"))))
        if q_bytes < 0 and q_count < 0:
            return  # the usual case: no quota, nothing to add up
        used = info.bytes_used
        if q_bytes >= 0:
            used += await self._versions_bytes(request, account, info)
        over = 0 <= q_bytes < used + _length(request)
        over = over or 0 <= q_count < info.object_count + 1
        if over:
            raise await refuse(self, request, account, container, EXCEEDED)


    async def _versions_bytes(self, request: web.Request, account: str, info: Any) -> int:
        """Object versioning keeps a container's versions in its hidden versions container
        (named in sysmeta); they count toward the container's bytes, as its HEAD shows."""
        vcont = next((v for k, v in info.meta.items() if k.lower() == VERSIONS_CONT), None)
        if not vcont:
            return 0
        # Read fresh: the cached info of a container that only features write to is not
        # refreshed by those writes (a HEAD only when a bytes quota is set).
        sub = sub_request(request, "HEAD", "/" + "/".join(
            ("v1", quote(account, safe=""), quote(unquote(vcont), safe=""))), CIMultiDict())
        sub[ALLOW_RESERVED] = True  # the caller's write to the container is judged as usual
        try:
            resp = await self.app(sub)
        except HTTPError:
            return 0
        if isinstance(resp, BodyResponse):
            resp.close()
        if resp.status // 100 != 2:
            return 0
        return int(resp.headers.get("X-Container-Bytes-Used", "0") or 0)


class AccountQuotas(Middleware):
    name = "account_quotas"
    plain_reads = PASS  # acts on account requests and object PUT only

    def _policies(self) -> list[tuple[int, str]]:
        return [(i, p["name"]) for i, p in
                enumerate(self.proxy.capabilities()["swift"]["policies"])]

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = api_path(request)
        if path is None:
            return await self.app(request)
        if path.container is None:
            return await self.account_request(request)
        if path.obj is not None and request.method == "PUT":
            ident = request.get(IDENTITY)
            if not (ident and ident.is_reseller_admin):
                await self._check(request, path.account, path.container)
        return await self.app(request)

    # ---- setting quotas -------------------------------------------------------------------

    async def account_request(self, request: web.Request) -> web.StreamResponse:
        if request.method in ("POST", "PUT"):
            request = self._translate(request)
        resp = await self.app(request)
        # Non-resellers may not change quotas, but they may see them.
        sysmeta = "X-Account-Sysmeta-"
        for qtype in QUOTA_TYPES:
            if resp.headers.get(sysmeta + qtype):
                resp.headers[f"X-Account-{qtype}"] = resp.headers[sysmeta + qtype]
            for idx, pname in self._policies():
                value = resp.headers.get(f"{sysmeta}{qtype}-Policy-{idx}")
                if value:
                    resp.headers[f"X-Account-{qtype}-Policy-{pname}"] = value
        return resp

    def _translate(self, request: web.Request) -> web.Request:
        """Quota headers to sysmeta (a reseller admin's request) or 403 (anyone else's)."""
        h = request.headers.copy()
        for legacy in ("X-Account-Meta-Quota-Bytes", "X-Remove-Account-Meta-Quota-Bytes"):
            new = legacy.replace("-Meta-", "-")
            if legacy in h and not h.get(new):
                h[new] = h[legacy]
        updates: dict[str, str | None] = {}
        for qtype in QUOTA_TYPES:
            value = h.get(f"X-Account-{qtype}")
            if h.get(f"X-Remove-Account-{qtype}"):
                value = ""  # removing wins over setting
            updates[f"X-Account-Sysmeta-{qtype}"] = value
            for idx, pname in self._policies():
                tail = f"Account-{qtype}-Policy-{pname}"
                value = h.popall(f"X-{tail}", [None])[-1]
                if h.get(f"X-Remove-{tail}"):
                    value = ""
                updates[f"X-Account-Sysmeta-{qtype}-Policy-{idx}"] = value
        ident = request.get(IDENTITY)
        if not (ident and ident.is_reseller_admin):
            if any(v is not None for v in updates.values()):
                raise HTTPError(403, "Forbidden")
            return request
        if any(v and not (v.isascii() and v.isdigit()) for v in updates.values()):
            raise HTTPError(400, "Bad Request")
        for k, v in updates.items():
            if v is not None:
                h[k] = v  # "" removes the quota
        return clone(request, headers=h)

    # ---- enforcing them ----------------------------------------------------------------------

    async def _check(self, request: web.Request, account: str, container: str) -> None:
        info = await self.proxy.account_info(request, account)
        if info.status // 100 != 2:
            return
        sysmeta = "x-account-sysmeta-"
        quotas = _parsed(info, lambda meta: (
            _int(meta.get(sysmeta + "quota-bytes", meta.get("x-account-meta-quota-bytes"))),
            _int(meta.get(sysmeta + "quota-count")),
            _int(meta.get(sysmeta + "quota-bytes-policy-0")),
            _int(meta.get(sysmeta + "quota-count-policy-0"))))
        if max(quotas) < 0:
            return  # the usual case: no quota, nothing to add up
        q_bytes, q_count, p_bytes, p_count = quotas
        length = _length(request)
        over = 0 <= q_bytes < info.bytes_used + length
        over = over or 0 <= q_count < info.object_count + 1
        if over:
            raise await refuse(self, request, account, container, EXCEEDED)
        # One policy holds every object here, so the account's totals are the policy's.
        over = 0 <= p_bytes < info.bytes_used + length
        over = over or 0 <= p_count < info.object_count + 1
        if over:
            raise await refuse(self, request, account, container, POLICY_EXCEEDED)
