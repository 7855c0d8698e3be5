"""Server-to-server HTTP: one pooled keep-alive session per process, paths quoted once."""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import quote

import aiohttp
from yarl import URL

from swiftlite.common import signing


def signing_middleware(signer: signing.Signer) -> aiohttp.ClientMiddlewareType:
    """An aiohttp client middleware adding the backend signature to every request."""

    async def sign(req: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType):
        # raw_path_qs is the request target aiohttp writes on the wire, as servers see it.
        req.headers[signing.HEADER] = signer.sign(req.method, req.url.raw_path_qs,
                                                  req.headers.get("X-Timestamp"))
        return await handler(req)

    return sign


def make_session(conn_timeout: float = 0.5, node_timeout: float = 10.0,
                 limit_per_host: int = 64,
                 signer: signing.Signer | None = None) -> aiohttp.ClientSession:
    """A session for storage servers; its requests are signed with `signer` or the
    process-wide signer (storage servers refuse unsigned ones)."""
    signer = signer or signing.current()
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=limit_per_host,
                                     keepalive_timeout=60, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, connect=conn_timeout,
                                    sock_connect=conn_timeout, sock_read=node_timeout)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                 skip_auto_headers=("User-Agent", "Content-Type"),
                                 middlewares=(signing_middleware(signer),) if signer else ())


def quote_path(*segments: Any) -> str:
    """"/dev/part/a/c/o" with each name percent-encoded exactly once."""
    return "/" + "/".join(quote(str(s), safe="/") for s in segments)


def node_url(node: dict[str, Any], path: str, query: str = "") -> URL:
    host = node["ip"]
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    raw = f"http://{host}:{node['port']}{path}"
    if query:
        raw += "?" + query
    return URL(raw, encoded=True)


@lru_cache(maxsize=4096)
def _quoted(*segments: str | None) -> str:
    # A write sends the same names to every replica: quote them once per request, not per node.
    return "".join("/" + quote(s, safe="/") for s in segments if s is not None)


def node_path(node: dict[str, Any], part: int, *names: str | None) -> str:
    """The backend path for a device: /<device>/<part>/<a>[/<c>[/<o>]]."""
    return f"{_quoted(node['device'])}/{part}{_quoted(*names)}"
