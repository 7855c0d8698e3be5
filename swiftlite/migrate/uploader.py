"""Concurrent PUTs with ETag verification, retries, re-auth and the resume log."""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import aiohttp

from swiftlite.common.threadpool import run_blocking
from swiftlite.migrate.progress import Progress
from swiftlite.migrate.state import StateLog
from swiftlite.migrate.swift_api import Auth, authenticate
from swiftlite.migrate.walker import Failure, Item

INLINE_READ = 256 * 1024  # smaller files are read on the loop: a thread hop costs more
STREAM_OVER = 64 * 1024 * 1024  # bigger files are streamed from disk, not held in memory
RETRY_STATUS = {408, 422, 429, 498}  # 422: the body got damaged on the way; try again


class UploadFailed(Exception):
    def __init__(self, reason: str, retry: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry


def read_file(path: str) -> tuple[bytes, str]:
    with open(path, "rb") as f:
        data = f.read()
    return data, hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_file(path: str) -> tuple[int, str]:
    h = hashlib.md5(usedforsecurity=False)
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    return n, h.hexdigest()


def content_type(name: str) -> str:
    return mimetypes.guess_type(name, strict=False)[0] or "application/octet-stream"


@dataclass
class Credentials:
    auth_url: str
    user: str
    key: str


@dataclass
class Result:
    uploaded: int = 0
    bytes: int = 0
    skipped: int = 0
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False


class Uploader:
    def __init__(self, session: aiohttp.ClientSession, creds: Credentials, auth: Auth,
                 container: str, state: StateLog, progress: Progress, attempts: int = 4,
                 backoff: float = 0.5) -> None:
        self.session = session
        self.creds = creds
        self.auth = auth
        self.container = container
        self.state = state
        self.progress = progress
        self.attempts = attempts
        self.backoff = backoff
        self.result = Result()
        self._auth_lock = asyncio.Lock()
        self._flushing: asyncio.Future | None = None

    async def _reauth(self, stale: Auth) -> None:
        async with self._auth_lock:
            if self.auth is stale:  # one re-auth for a burst of 401s
                self.auth = await authenticate(self.session, self.creds.auth_url,
                                               self.creds.user, self.creds.key)

    async def _put_once(self, item: Item, auth: Auth) -> str:
        if item.size > STREAM_OVER:
            size, md5 = await run_blocking(md5_file, item.path)
            body: object = open(item.path, "rb")  # noqa: SIM115 (closed below)
        elif item.size > INLINE_READ:
            body, md5 = await run_blocking(read_file, item.path)
            size = len(body)
        else:
            body, md5 = read_file(item.path)
            size = len(body)
        headers = {"X-Auth-Token": auth.token, "ETag": md5, "Content-Length": str(size),
                   "Content-Type": content_type(item.name)}
        try:
            async with self.session.put(auth.url(self.container, item.name), data=body,
                                        headers=headers) as resp:
                text = await resp.read()
                if resp.status == 401:
                    await self._reauth(auth)
                    raise UploadFailed("401 Unauthorized", retry=True)
                if resp.status // 100 != 2:
                    reason = f"{resp.status} {resp.reason}: {text[:200].decode(errors='replace')}"
                    retry = resp.status >= 500 or resp.status in RETRY_STATUS
                    raise UploadFailed(reason.strip(), retry=retry)
                got = resp.headers.get("ETag", "").strip('"').lower()
                if got != md5:
                    raise UploadFailed(f"ETag mismatch: sent {md5}, server says {got!r}",
                                       retry=True)
        finally:
            if hasattr(body, "close"):
                body.close()
        item.size = size
        return md5

    async def upload(self, item: Item) -> str:
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                return await self._put_once(item, self.auth)
            except UploadFailed as exc:
                if not exc.retry or attempt == self.attempts:
                    raise
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                if attempt == self.attempts:
                    raise UploadFailed(f"connection error: {exc!r}") from exc
            except OSError as exc:  # the local file vanished or is unreadable: no retry
                raise UploadFailed(f"unreadable: {exc.strerror or exc}") from exc
            await asyncio.sleep(delay)  # back off before the next attempt
            delay *= 2
        raise AssertionError("unreachable")

    def maybe_flush(self) -> None:
        """Write the pending state records in a thread, one batch in flight at a time."""
        if (self._flushing is None or self._flushing.done()) and self.state.due():
            self._flushing = asyncio.ensure_future(run_blocking(self.state.write,
                                                                self.state.take()))

    async def _worker(self, items: Iterator[Item], stop: asyncio.Event) -> None:
        for item in items:  # one shared iterator: each item goes to exactly one worker
            if stop.is_set():
                return
            try:
                etag = await self.upload(item)
            except UploadFailed as exc:
                self.result.failures.append(Failure(item.path, exc.reason))
                self.progress.fail()
                continue
            self.state.record(item.name, item.size, etag)
            self.result.uploaded += 1
            self.result.bytes += item.size
            self.progress.add(item.size)
            self.maybe_flush()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(min(self.progress.interval, 0.25))
            self.progress.tick()
            self.maybe_flush()

    async def run(self, items: Iterable[Item], concurrency: int, stop: asyncio.Event) -> Result:
        it = iter(items)
        ticker = asyncio.ensure_future(self._ticker())
        try:
            await asyncio.gather(*(self._worker(it, stop) for _ in range(max(1, concurrency))))
        finally:
            ticker.cancel()
            if self._flushing is not None:
                try:
                    await self._flushing
                except OSError as exc:
                    print(f"error: writing state file: {exc}", file=sys.stderr)
            await run_blocking(self.state.flush)
            self.progress.finish()
        self.result.interrupted = stop.is_set()
        return self.result
