"""Where image variants are kept: hidden derived objects in the reserved namespace.

A variant of `/v1/<a>/<c>/<o>` is the object
    `/v1/<a>/\\x00image\\x00<c>/\\x00<sha1(o)>\\x00<sha256(etag "\\n" canonical)[:32]>`
(`<c>` replaced by its sha1 where the name would pass the container-name limit). No client
can name it (common/reserved.py); only the image feature reads and writes it, after the
caller was judged on the original. The key holds the original's ETag, so an overwrite of
the original makes every variant of its old bytes unreachable at once: a request for the
new bytes looks under a new name. Old variants are reclaimed by expiry (`image_cache_ttl`,
X-Delete-After on each) where an operator sets one; all variants of one object share the
`\\x00<sha1(o)>\\x00` prefix, so a sweeper can list them.
"""

from __future__ import annotations

import hashlib
import logging
from urllib.parse import quote

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common import constraints
from swiftlite.common.reserved import reserved_name
from swiftlite.image.formats import CONTENT_TYPES
from swiftlite.image.render import Rendered
from swiftlite.proxy.request import ApiPath, send_sub
from swiftlite.proxy.response import BodyResponse, close_answer

log = logging.getLogger("swiftlite.proxy")
# Metadata on a stored variant, for operators (and a sweeper): what it was made from.
SOURCE_ETAG = "X-Object-Meta-Image-Source-Etag"
VARIANT = "X-Object-Meta-Image-Variant"


def variant_names(path: ApiPath, etag: str, canonical: str) -> tuple[str, str]:
    assert path.container is not None and path.obj is not None
    container = reserved_name("image", path.container)
    if len(container.encode()) > constraints.MAX_CONTAINER_NAME_LENGTH:
        container = reserved_name("image", hashlib.sha1(path.container.encode()).hexdigest())
    key = hashlib.sha256(f"{etag}\n{canonical}".encode()).hexdigest()[:32]
    obj = reserved_name(hashlib.sha1(path.obj.encode("utf-8", "surrogateescape")).hexdigest(),
                        key)
    return container, obj


class VariantStore:
    def __init__(self, app, ttl: int = 0) -> None:
        self.app = app
        self.ttl = ttl

    @staticmethod
    def _path(path: ApiPath, container: str, obj: str | None = None) -> str:
        out = f"/{path.version}/{quote(path.account, safe='')}/{quote(container, safe='')}"
        return out + (f"/{quote(obj, safe='')}" if obj is not None else "")

    async def read(self, request: web.Request, path: ApiPath, names: tuple[str, str],
                   method: str) -> BodyResponse | None:
        """The stored variant's answer, or None (not made yet, or unreadable: make it)."""
        # No caller headers: the reserved namespace is the feature's own (the core treats
        # its sub-requests there as the owner's), and a caller's token has been judged.
        resp = await send_sub(self.app, request, method, self._path(path, *names),
                              CIMultiDict(), reserved=True)
        if resp.status == 200 and isinstance(resp, BodyResponse):
            return resp
        close_answer(resp)
        return None

    async def write(self, request: web.Request, path: ApiPath, names: tuple[str, str],
                    rendered: Rendered, etag: str, canonical: str) -> None:
        """Store a variant; a failure only means the next request makes it again."""
        headers = CIMultiDict({"Content-Type": CONTENT_TYPES[rendered.format],
                               SOURCE_ETAG: etag, VARIANT: canonical})
        if self.ttl > 0:
            headers["X-Delete-After"] = str(self.ttl)
        target = self._path(path, *names)
        for attempt in range(2):
            resp = await send_sub(self.app, request, "PUT", target, headers,
                                  body=rendered.body, reserved=True)
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
