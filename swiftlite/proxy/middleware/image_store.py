"""Where image variants are kept: hidden derived objects in the reserved namespace.

A variant of `/v1/<a>/<c>/<o>` is the object
    `/v1/<a>/\\x00image\\x00<c>/\\x00<sha1(o)>\\x00<sha1(etag)[:16]>\\x00<sha256(canonical)[:32]>`
(`<c>` replaced by its sha1 where the name would pass the container-name limit). No client
can name it (common/reserved.py); only the image feature reads and writes it, after the
caller was judged on the original. The name holds the original's ETag, so an overwrite of
the original makes every variant of its old bytes unreachable at once: a request for the
new bytes looks under a new name.

Reclaiming: when a variant of new bytes is made, the variants of the object's other ETags
(listed by the `\\x00<sha1(o)>\\x00` prefix) are deleted in the background; so are all of
an object's variants when it is deleted through the proxy, one by one or by a bulk delete
(whose deletes pass this feature: `image` comes after `bulk` in the pipeline), and the
variants of its older bytes when it is overwritten through the proxy. A variant of an
original with X-Delete-At gets the same X-Delete-At, so the object-expirer removes both.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from typing import Any
from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common import constraints
from swiftlite.common.reserved import RESERVED, reserved_name, split_reserved
from swiftlite.image.formats import CONTENT_TYPES
from swiftlite.image.render import Rendered
from swiftlite.proxy.request import ApiPath, send_sub
from swiftlite.proxy.response import BodyResponse, answer_body, close_answer

log = logging.getLogger("swiftlite.proxy")
# Metadata on a stored variant, for operators (and a sweeper): what it was made from.
SOURCE_ETAG = "X-Object-Meta-Image-Source-Etag"
VARIANT = "X-Object-Meta-Image-Variant"


# Old variants deleted per reclaim (one listing page): the rest go at the next one.
RECLAIM_LIMIT = 1000


def _object_tag(path: ApiPath) -> str:
    assert path.obj is not None
    return hashlib.sha1(path.obj.encode("utf-8", "surrogateescape")).hexdigest()


def etag_tag(etag: str) -> str:
    return hashlib.sha1(etag.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def variant_container(path: ApiPath) -> str:
    """The hidden container holding the variants of `path`'s container's objects."""
    assert path.container is not None
    container = reserved_name("image", path.container)
    if len(container.encode()) > constraints.MAX_CONTAINER_NAME_LENGTH:
        container = reserved_name("image", hashlib.sha1(path.container.encode()).hexdigest())
    return container


def variant_names(path: ApiPath, etag: str, canonical: str) -> tuple[str, str]:
    assert path.obj is not None
    obj = reserved_name(_object_tag(path), etag_tag(etag),
                        hashlib.sha256(canonical.encode()).hexdigest()[:32])
    return variant_container(path), obj


class VariantStore:
    def __init__(self, app, ttl: int = 0) -> None:
        self.app = app
        self.ttl = ttl
        self._reclaims: set[asyncio.Task] = set()  # held, so a running one is not collected

    @staticmethod
    def _path(path: ApiPath, container: str, obj: str | None = None) -> str:
        out = f"/{path.version}/{quote(path.account, safe='')}/{quote(container, safe='')}"
        return out + (f"/{quote(obj, safe='')}" if obj is not None else "")

    async def read(self, reads: Any, request: web.Request, path: ApiPath,
                   names: tuple[str, str]) -> BodyResponse | None:
        """The stored variant's answer, or None (not made yet, or unreadable: make it).
        `reads`: the handler to read it through (the plain-read short cut)."""
        # No caller headers: the reserved namespace is the feature's own (the core treats
        # its sub-requests there as the owner's), and a caller's token has been judged.
        # A GET for a HEAD too: its answer is a BodyResponse either way, and aiohttp sends
        # no body for a HEAD (the core's HEAD answer would be a plain one, never served).
        try:
            resp = await send_sub(reads, request, "GET", self._path(path, *names),
                                  CIMultiDict(), reserved=True)
        except Exception:  # unreadable is a miss: the variant is made again, not a 500
            log.exception("stored image variant of %s/%s unreadable", path.container,
                          path.obj)
            return None
        if resp.status == 200 and isinstance(resp, BodyResponse):
            return resp
        close_answer(resp)
        return None

    async def write(self, request: web.Request, path: ApiPath, names: tuple[str, str],
                    rendered: Rendered, etag: str, canonical: str,
                    delete_at: str | None = None) -> None:
        """Store a variant; a failure only means the next request makes it again. It expires
        with its original (`delete_at`, the original's X-Delete-At), or after `ttl` if that
        comes first."""
        headers = CIMultiDict({"Content-Type": CONTENT_TYPES[rendered.format],
                               SOURCE_ETAG: etag, VARIANT: canonical})
        ends = [int(time.time()) + self.ttl] if self.ttl > 0 else []
        if delete_at and delete_at.isdigit():
            ends.append(int(delete_at))
        if ends:
            headers["X-Delete-At"] = str(min(ends))
        try:
            await self._write(request, path, names, headers, rendered.body)
        except Exception:  # the variant is made: a store failure must not lose the answer
            log.exception("image variant of %s/%s not stored", path.container, path.obj)

    async def _write(self, request: web.Request, path: ApiPath, names: tuple[str, str],
                     headers: CIMultiDict[str], body: bytes) -> None:
        target = self._path(path, *names)
        for attempt in range(2):
            resp = await send_sub(self.app, request, "PUT", target, headers,
                                  body=body, reserved=True)
            close_answer(resp)
            if resp.status == 404 and attempt == 0:
                made = await send_sub(self.app, request, "PUT",
                                      self._path(path, names[0]), CIMultiDict(),
                                      reserved=True)
                close_answer(made)
                continue
            if resp.status // 100 != 2:
                log.warning("image variant of %s/%s not stored: %s", path.container,
                            path.obj, resp.status)
            return

    def reclaim_later(self, request: web.Request, path: ApiPath, container: str,
                      etag: str | None) -> None:
        """Delete, in the background, the stored variants of `path` made from any other
        ETag than `etag` (the bytes just read); None: all of them (a deleted original)."""
        keep = etag_tag(etag) if etag is not None else None
        task = asyncio.ensure_future(self._reclaim(request, path, container, keep))
        self._reclaims.add(task)
        task.add_done_callback(self._reclaims.discard)

    async def _reclaim(self, request: web.Request, path: ApiPath, container: str,
                       keep: str | None) -> None:
        prefix = reserved_name(_object_tag(path)) + RESERVED
        try:
            listing = await send_sub(
                self.app, request, "GET", self._path(path, container), CIMultiDict(),
                query=f"format=json&limit={RECLAIM_LIMIT}&prefix={quote(prefix, safe='')}",
                reserved=True)
            if listing.status != 200:
                close_answer(listing)
                return
            rows = json.loads(await answer_body(listing))
            for row in rows:
                parts = split_reserved(row["name"])
                if len(parts) == 3 and parts[1] != keep:
                    gone = await send_sub(self.app, request, "DELETE",
                                          self._path(path, container, row["name"]),
                                          CIMultiDict(), reserved=True)
                    close_answer(gone)
        except Exception:  # reclaiming is housekeeping: never a request's failure
            log.exception("reclaiming old image variants of %s/%s", path.container, path.obj)
