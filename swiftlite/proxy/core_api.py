"""What the proxy's core offers the features around it: `ProxyCore`, the typed interface
every middleware, the S3 front end and the request stack are written against, and `Target`,
what a /v1 request addresses once validated.

The core (`server.Proxy`) implements it; nothing below the core imports `server`, so the
stack and the pipeline sit under the core instead of beside it in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from swiftlite.common.config import Section
from swiftlite.common.ec import ECScheme
from swiftlite.common.http import HTTPError
from swiftlite.common.policies import Policies
from swiftlite.common.timestamp import Timestamp
from swiftlite.proxy.auth import Identity, TempAuth
from swiftlite.proxy.backend.local_reads import LocalReads
from swiftlite.proxy.backend.nodes import ErrorLimiter
from swiftlite.proxy.backend.replicas import Backend
from swiftlite.proxy.caches.info import AccountInfo, ContainerInfo, InfoCache
from swiftlite.proxy.caches.object_cache import ObjectCache
from swiftlite.ring import Ring


@dataclass
class Target:
    """What a /v1 request addresses, after validation."""

    account: str
    container: str | None
    obj: str | None
    ident: Identity | None
    is_owner: bool


class ProxyCore(Protocol):
    """The proxy as the pipeline's features see it."""

    conf: Section
    auth: TempAuth | None  # set by the tempauth feature when it is in use
    middleware: list[Any]  # the pipeline's features, in order (pipeline.Middleware)
    object_ring: Ring
    policies: Policies
    object_rings: dict[int, Ring]  # policy index -> its object ring
    container_ring: Ring
    account_ring: Ring
    limiter: ErrorLimiter  # this worker's error limiting of backend nodes
    container_cache: InfoCache
    link_cache: InfoCache | None
    client_timeout: float
    put_buffer_size: int
    max_file_size: int

    def next_timestamp(self) -> Timestamp: ...

    def backend_headers(self, request: web.Request,
                        ts: Timestamp | None = None) -> dict[str, str]: ...

    def target(self, request: web.Request, acct: str, cont: str | None,
               obj: str | None) -> Target: ...

    async def authorize_read(self, request: web.Request, target: Target) -> None: ...

    def authorize_account_write(self, request: web.Request, target: Target) -> None: ...

    def deny(self, target: Target) -> HTTPError: ...

    async def authorize_container(self, request: web.Request, target: Target, write: bool,
                                  listing: bool = False) -> ContainerInfo: ...

    async def container_info(self, request: web.Request, acct: str,
                              cont: str) -> ContainerInfo: ...

    async def container_facts(self, request: web.Request, acct: str,
                              cont: str) -> ContainerInfo: ...

    async def account_info(self, request: web.Request, acct: str) -> AccountInfo: ...

    def capabilities(self) -> dict[str, Any]: ...


class ProxyInterior(ProxyCore, Protocol):
    """The proxy as its own controllers (account, container, object, EC, the small-object
    tier, shard listings) see it: ProxyCore, plus the backend and the settings and caches
    only the core uses. `server.Proxy` implements it; the controllers take it typed, so what
    they may reach is written here, not found by reading `server.py`."""

    backend: Backend  # set once the worker's event loop runs (Proxy.startup)
    account_cache: InfoCache
    object_cache: ObjectCache | None
    local_reads: LocalReads | None
    concurrent_gets: bool
    concurrency_timeout: float
    post_quorum_timeout: float
    grouped_writes: bool
    account_autocreate: bool
    allow_open_expired: bool

    def object_ring_for(self, index: int) -> Ring: ...

    def ec_scheme(self, index: int) -> ECScheme | None: ...

    async def object_policy(self, request: web.Request, acct: str, cont: str) -> int: ...

    async def object_written(self, target: Target) -> None: ...

    def container_written(self, acct: str, cont: str) -> None: ...
