"""The proxy: its pipeline of features (swiftlite/proxy/pipeline.py) around the core, which
routes Swift v1 API requests for accounts, containers and objects to the rings."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from swiftlite.common import constraints, policies
from swiftlite.common.clients.fastclient import Pool
from swiftlite.common.config import Section
from swiftlite.common.ec import ECScheme
from swiftlite.common.http import HTTPError, error, txid
from swiftlite.common.runtime import aiohttp_seams
from swiftlite.common.runtime.server import make_app
from swiftlite.common.timestamp import Timestamp
from swiftlite.proxy import account, container, obj, stack
from swiftlite.proxy.auth import TempAuth
from swiftlite.proxy.backend.local_reads import LocalReads, parse_local_devices
from swiftlite.proxy.backend.nodes import ErrorLimiter
from swiftlite.proxy.backend.replicas import Backend
from swiftlite.proxy.caches.info import (
    AccountInfo,
    ContainerInfo,
    InfoCache,
    SyncedInfo,
    container_digest,
    info_caches,
    shared_table,
)
from swiftlite.proxy.caches.object_cache import ObjectCache
from swiftlite.proxy.caches.write_log import WriteLog
from swiftlite.proxy.common import read_any
from swiftlite.proxy.core_api import Target
from swiftlite.proxy.request import (
    ALLOW_RESERVED,
    AUTHORIZER,
    IDENTITY,
    INTERNAL,
    api_path,
    unauthorized,
)
from swiftlite.ring import Ring

PROXY = web.AppKey("proxy", object)
# Request key: the container and account info this request (and its sub-requests, which
# share it) already looked up, as Swift's per-request info cache: an anonymous read of a
# public container asks for its container three times (staticweb, versioning, the ACL).
INFO_MEMO = "swiftlite.info_memo"


class Proxy:
    """The core: routing to the account, container and object controllers, the caches and
    the backend; implements core_api.ProxyCore for the features around it."""

    def __init__(self, conf: Section) -> None:
        self.conf = conf
        swift_dir = conf.get_str("swift_dir", "/etc/swiftlite")
        reload = conf.get_float("ring_reload_interval", 15.0)
        # One object ring per storage policy (swiftlite/common/policies.py).
        self.policies = policies.load(swift_dir)
        self.object_rings = {p.index: Ring.load(os.path.join(swift_dir, f"{p.ring_name}.ring.gz"),
                                                reload) for p in self.policies}
        for p in self.policies:  # an EC policy's ring has one replica per fragment archive
            p.check_ring(self.object_rings[p.index])
        self.object_ring = self.object_rings[0]
        self.container_ring = Ring.load(os.path.join(swift_dir, "container.ring.gz"), reload)
        self.account_ring = Ring.load(os.path.join(swift_dir, "account.ring.gz"), reload)
        self.auth: TempAuth | None = None  # set by the tempauth feature when it is in use
        self.limiter = ErrorLimiter(conf.get_int("error_suppression_limit", 10),
                                    conf.get_float("error_suppression_interval", 60.0))
        self.conn_timeout = conf.get_float("conn_timeout", 0.5)
        self.node_timeout = conf.get_float("node_timeout", 10.0)
        self.client_timeout = conf.get_float("client_timeout", 60.0)
        # Reads: ask the next replica as well when one has not answered in this long.
        self.concurrent_gets = conf.get_bool("concurrent_gets", True)
        self.concurrency_timeout = conf.get_float("concurrency_timeout", 0.5)
        # Writes: once a quorum of replicas stored one, wait at most this for the rest.
        self.post_quorum_timeout = conf.get_float("post_quorum_timeout", 0.5)
        self.put_buffer_size = conf.get_size("put_buffer_size", 1024 * 1024)
        self.grouped_writes = conf.get_bool("grouped_writes", True)
        self.account_autocreate = conf.get_bool("account_autocreate", True)
        # X-Open-Expired: true lets a client read (or revive by POST) an object past its
        # X-Delete-At until the expirer reaps it; off by default, as in Swift.
        self.allow_open_expired = conf.get_bool("allow_open_expired", False)
        self.max_file_size = conf.get_size("max_file_size", constraints.MAX_FILE_SIZE)
        # Coherent across this host's workers, and across hosts through memcache_servers.
        self.container_cache, self.account_cache = info_caches(conf)
        # Where each recently read link (a symlink, an object version's link) points, so
        # a GET through it reads only its target. Dropped by every object write through any
        # worker of this host (the stamp table); kept locally only, so a change made through
        # another proxy host is seen after at most link_cache_ttl seconds. 0: off.
        link_ttl = conf.get_float("link_cache_ttl", 10.0)
        self.link_cache = InfoCache(link_ttl, "link", None, link_ttl) if link_ttl > 0 \
            else None
        # Object writes published to (and, with an object cache, read from) memcached, so
        # every host's cache drops what another host changed (swiftlite/proxy/caches/write_log.py).
        memcache = self.container_cache.memcache
        self.write_log = WriteLog(
            memcache, shared_table(), conf.get_float("write_log_interval", 0.25),
            conf.get_float("write_log_max_lag", 1.0)) \
            if memcache is not None and conf.get_bool("share_object_writes", True) else None
        # Hot small objects in this worker's memory (swiftlite/proxy/caches/object_cache.py).
        cache_size = conf.get_size("object_cache_size", 0)
        self.object_cache = ObjectCache(
            cache_size, conf.get_size("object_cache_max_object", 1024 * 1024),
            # The longest an entry lives. Without the write log it is also how late a write
            # through another host is seen; with it, only a write whose proxy could not
            # reach memcached is (and a long life is what makes a skewed mix hit).
            conf.get_float("object_cache_ttl", 300.0 if self.write_log else 5.0),
            write_log=self.write_log) if cache_size > 0 else None
        # With the cache and its write log, whether a plain read's container is versioned
        # is kept in the worker until the container is written (info.SyncedInfo): a
        # memcached round trip less on every hit.
        # Not with memcache_local_ttl: an entry kept in this worker may predate a write
        # another host published, and would then be vouched for from a later moment.
        self.synced_containers = SyncedInfo(self.container_cache.ttl, self.write_log) \
            if self.object_cache is not None and self.write_log is not None and \
            self.container_cache.local_ttl_ns == 0 else None
        # Replicas on this host's object servers read here, without the HTTP hop
        # (swiftlite/proxy/backend/local_reads.py); empty: every read goes to its object server.
        local = parse_local_devices(conf.get_str("local_object_devices", ""))
        self.local_reads = LocalReads(
            local, conf.get_bool("local_mount_check", False),
            conf.get_size("local_read_chunk", 1024 * 1024),
            conf.get_float("local_open_timeout", 2.0), self.node_timeout,
            self.limiter.interval) if local else None
        self.backend: Backend | None = None
        self._last_ts = Timestamp(0)
        self.pipeline, self.middleware = stack.build(self, conf, self.handle)

    async def startup(self, app: web.Application) -> None:
        pool = Pool(self.conn_timeout, self.node_timeout,
                    self.conf.get_int("backend_connections_per_host", 256))
        self.backend = Backend(pool, self.limiter, self.post_quorum_timeout)
        if self.write_log is not None:
            self.write_log.start(poll=self.object_cache is not None)

    async def cleanup(self, app: web.Application) -> None:
        if self.write_log is not None:
            await self.write_log.stop()
        if self.backend:
            await self.backend.pool.close()

    def next_timestamp(self) -> Timestamp:
        """Wall clock, but strictly increasing within this process."""
        ts = Timestamp.now()
        if ts <= self._last_ts:
            ts = Timestamp(self._last_ts.ticks + 1)
        self._last_ts = ts
        return ts

    def backend_headers(self, request: web.Request, ts: Timestamp | None = None) -> dict[str, str]:
        headers = {"X-Trans-Id": txid(request)}
        if ts is not None:
            headers["X-Timestamp"] = ts.internal
        return headers

    # ---- routing (the core: the last step of the pipeline) --------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The core's answer, after every pipeline feature had its turn."""
        if request.path == "/info":
            return self.handle_info(request)
        path = api_path(request)
        if path is None:
            # As Swift answers: "//v1/a" names nothing (404); "/foo" is no API version (412).
            return error(404 if request.path.startswith("//") else 412,
                         "Not Found" if request.path.startswith("//") else "Bad URL")
        if len(request.raw_path) > constraints.MAX_URL_LENGTH:
            return error(414, "URL too long")
        if len(request.headers) > constraints.MAX_HEADER_COUNT:
            raise HTTPError(400, "Too many headers")
        state = aiohttp_seams.request_state(request)
        if state.get(INTERNAL) and state.get(IDENTITY) is not None:
            await self._grant_for(request, path.account)
        target = self.target(request, path.account, path.container, path.obj)
        if path.obj is not None:
            return await obj.handle(self, request, target)
        if path.container is not None:
            return await container.handle(self, request, target)
        return await account.handle(self, request, target)

    def target(self, request: web.Request, acct: str, cont: str | None,
               name: str | None) -> Target:
        """Who asks for what; ownership as the pipeline's authorizer sees it."""
        state = aiohttp_seams.request_state(request)
        ident = state.get(IDENTITY)
        authorizer = state.get(AUTHORIZER)
        owner = authorizer is not None and authorizer.is_owner(ident, acct)
        if state.get(ALLOW_RESERVED) and cont is not None and cont.startswith("\x00"):
            # A feature's own sub-request into the reserved namespace: the feature judged
            # the caller on the user-visible resource first (no client can set this key).
            # Only there: a request cloned from it (a symlink's target) is judged as usual.
            owner = True
        return Target(acct, cont, name, ident, owner)

    async def _grant_for(self, request: web.Request, acct: str) -> None:
        """A feature's sub-request may reach another account than the one its caller was
        judged on (a copy from or to it): the caller's identity gains what that account's
        ACL grants, as the authorizer says (Swift's authorize reads the ACL per request)."""
        state = aiohttp_seams.request_state(request)
        grant_for = getattr(state.get(AUTHORIZER), "grant_for", None)
        if grant_for is not None:
            state[IDENTITY] = await grant_for(request, state[IDENTITY], acct)

    async def authorize_read(self, request: web.Request, target: Target) -> None:
        """An object GET/HEAD: the owner may; anyone else as the container's ACLs say."""
        if not target.is_owner:
            await self.authorize_container(request, target, write=False)

    async def object_written(self, target: Target) -> None:
        """After any object write, whatever its outcome: no worker follows an older link."""
        key = (target.account, target.container or "", target.obj or "")
        if self.object_cache is not None:
            self.object_cache.drop(key)
        if self.write_log is not None:
            self.write_log.written(*key)
        if self.link_cache is not None:
            await self.link_cache.drop(key)

    def container_written(self, acct: str, cont: str) -> None:
        """After any container write, whatever its outcome: facts kept about it are void
        on every worker of this host now, and on other hosts through the write log."""
        self.container_cache.table.stamp(container_digest(acct, cont))
        if self.write_log is not None:
            self.write_log.written(acct, cont, "")

    def authorize_account_write(self, request: web.Request, target: Target) -> None:
        """A container PUT/POST/DELETE: the owner may; anyone else as the account's ACLs
        say. Raises 401/403."""
        if not target.is_owner:
            authorizer = aiohttp_seams.request_state(request).get(AUTHORIZER)
            if authorizer is None:
                raise self.deny(target)
            authorizer.authorize_account(request, target.ident, target.account,
                                         target.container)

    def deny(self, target: Target) -> HTTPError:
        return HTTPError(403, "Forbidden") if target.ident else unauthorized(target.account)

    async def authorize_container(self, request: web.Request, target: Target, write: bool,
                                  listing: bool = False) -> ContainerInfo:
        """Owner, or what the pipeline's authorizer allows; raises 401/403/404."""
        info = await self.container_info(request, target.account, target.container)
        if target.is_owner:
            if info.status == 404:
                raise HTTPError(404, "Container not found")
            return info
        authorizer = aiohttp_seams.request_state(request).get(AUTHORIZER)
        if authorizer is None:
            raise self.deny(target)
        authorizer.authorize_container(request, target.ident, target.account, info, write,
                                       listing)
        return info

    # ---- cached info ---------------------------------------------------------------------

    async def container_info(self, request: web.Request, acct: str, cont: str) -> ContainerInfo:
        return await self._cached_info(request, self.container_cache, (acct, cont),
                                       self.container_ring, (acct, cont), ContainerInfo,
                                       _container_fields)

    async def container_facts(self, request: web.Request, acct: str,
                              cont: str) -> ContainerInfo:
        """The container's info for a decision that is not about access, which may be kept
        in this worker while the write log vouches for it (SyncedInfo); never for ACLs."""
        synced = self.synced_containers
        if synced is None:
            return await self.container_info(request, acct, cont)
        info = synced.get(acct, cont)
        if info is None:
            # Kept only when read now: info this request already holds was read earlier,
            # and a write between then and `since` would go unnoticed.
            memo = aiohttp_seams.request_state(request).get(INFO_MEMO)
            now = memo is None or ("container", (acct, cont)) not in memo
            since = time.monotonic_ns()
            info = await self.container_info(request, acct, cont)
            if now and info.status // 100 == 2:
                synced.keep(acct, cont, info, since)
        return info

    async def object_policy(self, request: web.Request, acct: str, cont: str) -> int:
        """The storage policy index of a container's objects (from its cached info)."""
        if len(self.policies) == 1:
            return 0  # no info lookup where there is one policy only
        return (await self.container_info(request, acct, cont)).policy_index

    def ec_scheme(self, index: int) -> ECScheme | None:
        """The EC scheme of policy `index`, None for a replicated (or unknown) one."""
        policy = self.policies.get(index)
        return policy.ec if policy is not None else None

    def object_ring_for(self, index: int) -> Ring:
        ring = self.object_rings.get(index)
        if ring is None:  # a container of a policy this proxy's swiftlite.conf lacks
            raise HTTPError(503, f"No object ring for storage policy {index}")
        return ring

    async def account_info(self, request: web.Request, acct: str) -> AccountInfo:
        """The account's counts and metadata (for ACLs and quotas); status 404 if missing."""
        return await self._cached_info(request, self.account_cache, ("info", acct),
                                       self.account_ring, (acct,), AccountInfo,
                                       _account_fields)

    async def _cached_info(self, request: web.Request, cache: InfoCache, key: tuple,
                           ring: Ring, names: tuple[str, ...], cls: type,
                           fields: Callable[[Any], tuple]) -> Any:
        """A container's or account's info from the cache, else from a HEAD of a replica
        (only a 2xx answer is cached). Kept for the rest of the request until this worker
        writes any such info (a sub-request's PUT, say): `cache.changes` then moves on."""
        state = aiohttp_seams.request_state(request)
        memo = state.get(INFO_MEMO)
        if memo is None:
            memo = state[INFO_MEMO] = {}
        mkey = (cache.kind, key)
        seen = memo.get(mkey)
        changes = cache.changes
        if seen is not None and seen[0] == changes:
            return seen[1]
        cached, fill = await cache.lookup(key)
        if cached is not None:
            memo[mkey] = (changes, cached)
            return cached
        resp = await read_any(self, request, ring, ring.get_part(*names), "HEAD", names)
        if resp.status // 100 != 2:
            info = cls(404 if resp.status == 404 else resp.status)
        else:
            info = cls(resp.status, *fields(resp.headers))
            await cache.put(key, info, fill)
        memo[mkey] = (changes, info)
        return info

    # ---- auth and info endpoints ---------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        return {
            "swift": {
                "version": "swiftlite-0.1",
                "max_file_size": self.max_file_size,
                "max_meta_name_length": constraints.MAX_META_NAME_LENGTH,
                "max_meta_value_length": constraints.MAX_META_VALUE_LENGTH,
                "max_meta_count": constraints.MAX_META_COUNT,
                "max_meta_overall_size": constraints.MAX_META_OVERALL_SIZE,
                "max_header_size": constraints.MAX_HEADER_SIZE,
                "max_object_name_length": constraints.MAX_OBJECT_NAME_LENGTH,
                "max_container_name_length": constraints.MAX_CONTAINER_NAME_LENGTH,
                "max_account_name_length": constraints.MAX_ACCOUNT_NAME_LENGTH,
                "container_listing_limit": constraints.CONTAINER_LISTING_LIMIT,
                "account_listing_limit": constraints.ACCOUNT_LISTING_LIMIT,
                "extra_header_count": constraints.EXTRA_HEADER_COUNT,
                "valid_api_versions": ["v1", "v1.0"],
                "allow_open_expired": self.allow_open_expired,
                "strict_cors_mode": self.conf.get_bool("strict_cors_mode", True),
                "policies": self.policies.info(),
            },
            "swiftlite": {"replicas": self.object_ring.replica_count,
                          "part_power": self.object_ring.part_power},
        }

    def handle_info(self, request: web.Request) -> web.Response:
        if request.method == "OPTIONS":  # as Swift answers it (CORS adds the preflight's)
            return web.Response(status=200, headers={"Allow": "GET, HEAD, OPTIONS"})
        if request.method not in ("GET", "HEAD"):
            return error(405, "Method Not Allowed", {"Allow": "GET, HEAD, OPTIONS"})
        caps = self.capabilities()
        for mw in self.middleware:
            caps.update(mw.info_entries())
        return web.json_response(caps)


def _container_fields(h: Any) -> tuple:
    return (h.get("X-Container-Read", ""), h.get("X-Container-Write", ""),
            int(h.get("X-Container-Object-Count", 0) or 0),
            int(h.get("X-Container-Bytes-Used", 0) or 0),
            {k: v for k, v in h.items()
             if k.lower().startswith(("x-container-meta-", "x-container-sysmeta-"))},
            int(h.get(policies.POLICY_INDEX_HEADER, 0) or 0))


def _account_fields(h: Any) -> tuple:
    return (int(h.get("X-Account-Container-Count", 0) or 0),
            int(h.get("X-Account-Object-Count", 0) or 0),
            int(h.get("X-Account-Bytes-Used", 0) or 0),
            {k: v for k, v in h.items()
             if k.lower().startswith(("x-account-meta-", "x-account-sysmeta-"))})


# The methods the proxy serves, exactly as spelled: methods are case-sensitive, and `put`
# must never reach a feature that checks for "PUT" (Swift answers 405 to it too).
METHODS = frozenset(("GET", "HEAD", "PUT", "POST", "DELETE", "COPY", "OPTIONS"))
ALLOW = ", ".join(sorted(METHODS))


async def _dispatch(request: web.Request) -> web.StreamResponse:
    if request.method not in METHODS:
        return error(405, "Method Not Allowed", {"Allow": ALLOW})
    return await request.app[PROXY].pipeline(request)


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """Before 100 Continue: a pipeline feature's refusal (its `expect`), if it has one."""
    for mw in request.app[PROXY].middleware:
        hook = getattr(mw, "expect", None)
        if hook is not None:
            resp = await hook(request)
            if resp is not None:
                return resp
    return None


def create_app(conf: Section) -> web.Application:
    aiohttp_seams.keep_content_length_on_204()
    proxy = Proxy(conf)
    app = make_app(route=_dispatch, expect=_expect)
    app[PROXY] = proxy
    app.on_startup.append(proxy.startup)
    app.on_cleanup.append(proxy.cleanup)
    return app
