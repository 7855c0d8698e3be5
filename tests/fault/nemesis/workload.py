"""The nemesis workload: PUT/GET/DELETE/HEAD of small "images" (1-64 KiB) and listings over a
few containers, through the proxy, with every write's outcome kept per object.

Operations on one object never overlap (a lock per name), and the one proxy stamps them in
order, so "the last acknowledged write" is well defined: an object must end as that write
left it, or as a later write the client saw fail (it may have landed anyway).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from multidict import CIMultiDict

from tests.fault.nemesis.cluster import NemesisCluster

QUORUM = 2  # of 3 replicas
DEFAULT_MIX = {"PUT": 0.4, "GET": 0.3, "DELETE": 0.1, "HEAD": 0.1, "LIST": 0.1}
ABSENT = ""  # an object's state when it is deleted or was never written


@dataclass
class Write:
    op: str  # "PUT" | "DELETE"
    status: int  # 0: no answer (timeout, connection lost)
    etag: str  # the body's MD5 for a PUT

    @property
    def result(self) -> str:
        return self.etag if self.op == "PUT" else ABSENT

    @property
    def acked(self) -> bool:
        # A DELETE answered 404 still wrote tombstones on a quorum (the object server always
        # does): the object is gone either way.
        return self.status == 201 if self.op == "PUT" else self.status in (204, 404)


def allowed_states(writes: list[Write]) -> set[str]:
    """What the object may read as now: the last acknowledged write's result, or that of any
    later write that failed (it may have landed on some replica, and replication spreads it)."""
    allowed = {ABSENT}
    for w in writes:
        allowed = {w.result} if w.acked else allowed | {w.result}
    return allowed


def last_acked(writes: list[Write]) -> Write | None:
    return next((w for w in reversed(writes) if w.acked), None)


@dataclass
class Stats:
    ops: Counter = field(default_factory=Counter)  # "PUT 201", "GET 0", ...
    stale_reads: int = 0  # a read that saw an older state than the last acknowledged one
    garbage: list[str] = field(default_factory=list)  # bytes nobody wrote, or a bad listing
    unquorate: list[str] = field(default_factory=list)  # acked with < QUORUM copies on disk

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def count(self, pred) -> int:
        return sum(n for k, n in self.ops.items() if pred(*k.split()))


class Workload:
    def __init__(self, nc: NemesisCluster, http: aiohttp.ClientSession, rng: random.Random,
                 containers: list[str], names_per_container: int) -> None:
        self.nc = nc
        self.http = http
        self.rng = rng
        self.containers = containers
        self.keys = [(c, f"img-{i:04d}.jpg") for c in containers
                     for i in range(names_per_container)]
        self.writes: dict[tuple[str, str], list[Write]] = {k: [] for k in self.keys}
        self.locks = {k: asyncio.Lock() for k in self.keys}
        self.pool = rng.randbytes(128 << 10)  # bodies are slices of this, made unique
        self.mix = DEFAULT_MIX
        self.stats = Stats()
        self.done = 0
        self.url = ""
        self.account = ""
        self.token = ""
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._seq = 0

    # -- setup ---------------------------------------------------------------------------
    async def login(self) -> None:
        c = self.nc.c
        async with self.http.get(c.auth_url, headers={"X-Auth-User": c.user,
                                                      "X-Auth-Key": c.key}) as r:
            assert r.status == 200, f"auth: {r.status}"
            self.token = r.headers["X-Auth-Token"]
            self.url = r.headers["X-Storage-Url"]
        self.account = self.url.rstrip("/").rsplit("/", 1)[1]
        for cont in self.containers:
            async with self.http.put(f"{self.url}/{cont}", headers=self.headers()) as r:
                assert r.status in (201, 202), f"PUT container {cont}: {r.status}"

    def headers(self, **extra: str) -> dict[str, str]:
        return {"X-Auth-Token": self.token, **extra}

    # -- running -------------------------------------------------------------------------
    def start(self, concurrency: int) -> None:
        self._tasks = [asyncio.ensure_future(self._worker()) for _ in range(concurrency)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def wait_ops(self, n: int, min_seconds: float = 0.0, timeout: float = 120.0) -> bool:
        """Until `n` more operations finished and `min_seconds` passed; False on timeout
        (the cluster hangs: too few operations complete)."""
        target = self.done + n
        start = time.monotonic()
        while self.done < target or time.monotonic() - start < min_seconds:
            if time.monotonic() - start > timeout:
                return False
            if any(t.done() for t in self._tasks):  # a worker died: surface its error
                for t in self._tasks:
                    if t.done():
                        t.result()
            await asyncio.sleep(0.02)
        return True

    async def _worker(self) -> None:
        while not self._stop.is_set():
            mix = self.mix  # the phase's (a fault may ask for an upload burst)
            op = self.rng.choices(list(mix), list(mix.values()))[0]
            key = self.rng.choice(self.keys)
            if op == "LIST":
                status = await self._list(key[0])
            else:
                async with self.locks[key]:
                    status = await getattr(self, "_" + op.lower())(key)
            self.stats.ops[f"{op} {status}"] += 1
            self.done += 1

    async def _request(self, method: str, url: str,
                       **kw) -> tuple[int, CIMultiDict, bytes]:
        try:
            async with self.http.request(method, url, **kw) as r:
                return r.status, r.headers.copy(), await r.read()
        except (aiohttp.ClientError, TimeoutError, OSError):
            return 0, CIMultiDict(), b""

    def _body(self, key: tuple[str, str]) -> bytes:
        self._seq += 1
        head = f"{key[0]}/{key[1]}#{self._seq}\n".encode()
        size = self.rng.randint(1 << 10, 64 << 10)
        off = self.rng.randrange(len(self.pool) - size)
        return head + self.pool[off:off + size - len(head)]

    async def _put(self, key: tuple[str, str]) -> int:
        body = self._body(key)
        etag = hashlib.md5(body).hexdigest()
        status, headers, _ = await self._request(
            "PUT", f"{self.url}/{key[0]}/{key[1]}", data=body,
            headers=self.headers(**{"Content-Type": "image/jpeg", "ETag": etag}))
        w = Write("PUT", status, etag)
        self.writes[key].append(w)
        if w.acked:
            if headers.get("ETag", "").strip('"') != etag:
                self.stats.garbage.append(f"{key}: PUT answered ETag {headers.get('Etag')}")
            self._check_quorum(key, f"{headers.get('X-Timestamp')}.data")
        return status

    async def _delete(self, key: tuple[str, str]) -> int:
        status, _, _ = await self._request("DELETE", f"{self.url}/{key[0]}/{key[1]}",
                                           headers=self.headers())
        w = Write("DELETE", status, "")
        self.writes[key].append(w)
        if w.acked:
            self._check_quorum(key, ".ts")
        return status

    def _check_quorum(self, key: tuple[str, str], suffix: str) -> None:
        """An acknowledged write is on disk on a quorum of devices when it is answered."""
        w = self.nc.where(self.account, *key)
        copies = sum(self.nc.state(d, w).endswith(suffix) for d in w.primaries + w.handoffs)
        if copies < QUORUM:
            self.stats.unquorate.append(f"{key[0]}/{key[1]}: {suffix} acked with {copies} "
                                        "copies on disk")

    async def _get(self, key: tuple[str, str]) -> int:
        return await self._read("GET", key)

    async def _head(self, key: tuple[str, str]) -> int:
        return await self._read("HEAD", key)

    async def _read(self, method: str, key: tuple[str, str]) -> int:
        status, headers, body = await self._request(method, f"{self.url}/{key[0]}/{key[1]}",
                                                    headers=self.headers())
        if status not in (200, 404):
            return status
        got = headers.get("ETag", "").strip('"') if status == 200 else ABSENT
        written = {w.etag for w in self.writes[key] if w.op == "PUT"}
        if method == "GET" and status == 200 and hashlib.md5(body).hexdigest() != got:
            self.stats.garbage.append(f"{key}: GET body does not match its ETag {got}")
        elif got != ABSENT and got not in written:
            self.stats.garbage.append(f"{key}: {method} read ETag {got}, never written")
        elif got not in allowed_states(self.writes[key]):
            self.stats.stale_reads += 1  # eventual consistency allows it; counted
        return status

    async def _list(self, container: str) -> int:
        prefix = f"img-00{self.rng.randrange(10)}"
        status, _, body = await self._request(
            "GET", f"{self.url}/{container}", params={"format": "json", "prefix": prefix},
            headers=self.headers())
        if status == 200:
            try:
                rows = json.loads(body)
                bad = [r["name"] for r in rows if not r["name"].startswith(prefix)]
            except (ValueError, KeyError, TypeError) as exc:
                bad = [repr(exc)]
            if bad:
                self.stats.garbage.append(f"{container}: listing with prefix {prefix}: {bad}")
        return status
