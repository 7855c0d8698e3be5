"""S3's global bucket namespace: which account owns each bucket name.

A bucket is a container of its owner's account, but S3 names buckets globally: anyone may
address `/<bucket>/<key>`, and only one account may hold a name. The registry is one hidden
object per bucket, `<reseller prefix>.s3/\\x00s3\\x00buckets/<bucket>`, its owner in object
sysmeta (the account, and the canonical id `account:user` of whoever created it). Invariants:

- A name is claimed with `If-None-Match: *`: of two accounts racing for one name, the object
  servers let exactly one PUT through (each refuses the second on its own), the other sees
  412 and reads the winner.
- The registry's account starts with `.` after the prefix (no reseller admin reaches it) and
  its container is reserved (no client path names it): only this module's sub-requests
  (request.ALLOW_RESERVED, which the core treats as the owner's) read or write it.
- A name with no entry (a bucket made before the registry, or a container made through
  Swift) is the caller's own container, as before; anonymous callers find nothing there.

Lookups are on every S3 request's path, so each worker keeps what it read for CACHE_TTL
seconds (a hit is a dict lookup, no sub-request); a create or delete made by this worker
updates its cache at once, others see it within the TTL.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from multidict import CIMultiDict

from swiftlite.common.reserved import reserved_name
from swiftlite.proxy.auth import Identity
from swiftlite.proxy.request import ALLOW_RESERVED, AUTHENTICATED, answer_of, sub_request
from swiftlite.proxy.response import close_answer

CONTAINER = reserved_name("s3", "buckets")
OWNER_ACCOUNT = "X-Object-Sysmeta-S3-Owner-Account"
OWNER_ID = "X-Object-Sysmeta-S3-Owner-Id"
CACHE_TTL = 10.0  # seconds a worker trusts what it read (another worker's create/delete)
MAX_CACHED = 65536


@dataclass(frozen=True)
class Entry:
    account: str  # the Swift account holding the container
    owner_id: str  # canonical id of the creator, "account:user"


class RegistryError(Exception):
    """The registry could not be read or written (a storage failure, not the client's)."""


class Registry:
    def __init__(self, reseller_prefix: str) -> None:
        self.account = reseller_prefix + ".s3"
        self._cache: dict[str, tuple[float, Entry | None]] = {}
        self._identity = Identity(".s3-registry", "").with_grant(self.account, "admin")
        self._container_made = False
        self._pending: dict[str, asyncio.Future[Entry | None]] = {}

    def _path(self, bucket: str | None = None) -> str:
        out = "/v1/" + quote(self.account, safe="") + "/" + quote(CONTAINER, safe="")
        if bucket is not None:
            out += "/" + quote(bucket, safe="")
        return out

    async def _send(self, app: Any, request: Any, method: str, bucket: str | None,
                    headers: dict[str, str] | None = None):
        sub = sub_request(request, method, self._path(bucket), CIMultiDict(headers or {}))
        sub[ALLOW_RESERVED] = True
        sub[AUTHENTICATED] = self._identity
        return await answer_of(app, sub)

    def cached(self, bucket: str) -> tuple[bool, Entry | None]:
        """(found, entry) from this worker's cache: a dict lookup."""
        hit = self._cache.get(bucket)
        if hit is not None and hit[0] > time.monotonic():
            return True, hit[1]
        return False, None

    def _remember(self, bucket: str, entry: Entry | None) -> None:
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[bucket] = (time.monotonic() + CACHE_TTL, entry)

    async def lookup(self, app: Any, request: Any, bucket: str,
                     fresh: bool = False) -> Entry | None:
        """Who owns `bucket` (None: no entry). `fresh` skips the cache (before a create)."""
        if not fresh:
            found, entry = self.cached(bucket)
            if found:
                return entry
            # When an entry expires under load, every request for the bucket misses at once:
            # one HEAD answers them all.
            pending = self._pending.get(bucket)
            if pending is not None:
                return await asyncio.shield(pending)
            task = asyncio.ensure_future(self._read(app, request, bucket))
            self._pending[bucket] = task
            task.add_done_callback(lambda _t: self._pending.pop(bucket, None))
            return await asyncio.shield(task)
        return await self._read(app, request, bucket)

    async def _read(self, app: Any, request: Any, bucket: str) -> Entry | None:
        resp = await self._send(app, request, "HEAD", bucket)
        close_answer(resp)
        if resp.status == 404:
            entry = None
        elif resp.status // 100 == 2 and resp.headers.get(OWNER_ACCOUNT):
            entry = Entry(resp.headers[OWNER_ACCOUNT], resp.headers.get(OWNER_ID, ""))
        else:
            raise RegistryError(f"bucket registry HEAD answered {resp.status}")
        self._remember(bucket, entry)
        return entry

    async def claim(self, app: Any, request: Any, bucket: str, entry: Entry) -> Entry:
        """Write `entry` for `bucket` unless it has one: the entry that holds afterwards
        (`entry` itself when this call won)."""
        headers = {OWNER_ACCOUNT: entry.account, OWNER_ID: entry.owner_id,
                   "If-None-Match": "*", "Content-Length": "0"}
        for _ in range(3):
            if not self._container_made:
                made = await self._send(app, request, "PUT", None)
                close_answer(made)
                if made.status // 100 != 2:
                    raise RegistryError(f"bucket registry container PUT answered "
                                        f"{made.status}")
                self._container_made = True
            resp = await self._send(app, request, "PUT", bucket, headers)
            close_answer(resp)
            if resp.status // 100 == 2:
                self._remember(bucket, entry)
                return entry
            if resp.status == 404:  # the container went (or never was): make it again
                self._container_made = False
                continue
            if resp.status == 412:
                held = await self.lookup(app, request, bucket, fresh=True)
                if held is not None:
                    return held
                continue  # deleted in between: try again
            raise RegistryError(f"bucket registry PUT answered {resp.status}")
        raise RegistryError("bucket registry: no stable answer")

    async def release(self, app: Any, request: Any, bucket: str) -> None:
        """Drop `bucket`'s entry (its container is gone)."""
        self._cache.pop(bucket, None)
        resp = await self._send(app, request, "DELETE", bucket)
        close_answer(resp)
        self._cache.pop(bucket, None)
        if resp.status // 100 != 2 and resp.status != 404:
            raise RegistryError(f"bucket registry DELETE answered {resp.status}")

    def forget(self, bucket: str) -> None:
        self._cache.pop(bucket, None)
