"""Where recently read links point, so a GET through a link reads only its target.

A link (a client's symlink, object versioning's link to the current version) is a 0-byte
object whose target is sysmeta; following it costs a backend round trip before the target's.
The proxy keeps the headers of links it read in an `InfoCache` (`Proxy.link_cache`), keyed by
the link's (account, container, object) and dropped after every object write through any
worker of this host (`Proxy.object_written`, via the shared stamp table), so such a write is
seen by the very next read. Entries are never shared through memcached: a change made
through another proxy host is seen after at most `link_cache_ttl` seconds (as a stale replica
could show it anyway). An entry past the link's X-Delete-At is gone: the expirer's DELETE
is no proxy write.

The cache holds no verdict on who may read: a user of an entry judges the caller first.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.proxy.caches.info import Fill

Place = tuple[str, str, str]


def _alive(headers: Any) -> bool:
    at = headers.get("X-Delete-At")
    try:
        return at is None or time.time() < int(at)
    except ValueError:
        return False


async def lookup(proxy: Any, request: web.Request,
                 here: Place) -> tuple[CIMultiDict | None, Fill | None]:
    """(headers, None) when the link at `here` is known; else (None, fill), and a link
    read then may be kept with `keep(..., fill)` (fill None: not cacheable)."""
    cache = proxy.link_cache
    headers = request.headers
    # These must see the link as stored now (tested inline: every plain read asks).
    if cache is None or "X-Newest" in headers or "X-Open-Expired" in headers:
        return None, None
    cached, fill = await cache.lookup(here)
    if cached is None:
        return None, fill
    if _alive(cached):
        return cached, None
    await cache.drop(here)
    return None, (await cache.lookup(here))[1]


def keep(proxy: Any, here: Place, headers: Any, fill: Fill | None) -> None:
    """Remember a link's answer (its sysmeta and X-Delete-At: what following it needs)."""
    if fill is None:
        return
    proxy.link_cache.keep_local(here, CIMultiDict(
        (k, v) for k, v in headers.items()
        if k.lower().startswith("x-object-sysmeta-") or k.lower() == "x-delete-at"), fill)
