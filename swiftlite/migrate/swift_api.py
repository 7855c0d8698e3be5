"""The little of the Swift v1 API a client needs: tempauth-style auth and object URLs.

Shared by swiftlite-migrate and loadtests/bench.py; works against any Swift endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

import aiohttp
from yarl import URL


class SwiftError(Exception):
    pass


class AuthError(SwiftError):
    pass


@dataclass
class Auth:
    storage_url: str
    token: str

    @property
    def account(self) -> str:
        """The account name: the last path segment of the storage URL (e.g. AUTH_test)."""
        return unquote(urlsplit(self.storage_url).path.rstrip("/").rsplit("/", 1)[-1])

    def url(self, container: str, obj: str | None = None) -> URL:
        raw = self.storage_url.rstrip("/") + "/" + quote(container, safe="")
        if obj is not None:
            raw += "/" + quote(obj, safe="/")
        return URL(raw, encoded=True)


async def authenticate(session: aiohttp.ClientSession, auth_url: str, user: str,
                       key: str) -> Auth:
    """v1 auth (`swift -A URL -U user -K key`): one GET, returns storage URL and token."""
    headers = {"X-Auth-User": user, "X-Auth-Key": key}
    async with session.get(auth_url, headers=headers) as resp:
        await resp.read()
        if resp.status // 100 != 2:
            raise AuthError(f"auth at {auth_url} failed: {resp.status} {resp.reason}")
        storage_url = resp.headers.get("X-Storage-Url")
        token = resp.headers.get("X-Auth-Token") or resp.headers.get("X-Storage-Token")
    if not storage_url or not token:
        raise AuthError(f"auth at {auth_url} returned no storage URL or token")
    return Auth(storage_url, token)


async def ensure_container(session: aiohttp.ClientSession, auth: Auth, container: str) -> None:
    """HEAD the container and create it when missing (PUT is idempotent anyway)."""
    headers = {"X-Auth-Token": auth.token}
    async with session.head(auth.url(container), headers=headers) as resp:
        if resp.status // 100 == 2:
            return
        if resp.status != 404:
            raise SwiftError(f"HEAD container {container}: {resp.status} {resp.reason}")
    async with session.put(auth.url(container), headers=headers) as resp:
        await resp.read()
        if resp.status // 100 != 2:
            raise SwiftError(f"PUT container {container}: {resp.status} {resp.reason}")
