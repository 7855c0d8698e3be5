"""Cached account/container facts the proxy needs on every request (existence, ACLs).

Only positive answers are cached, briefly (`recheck_*_existence`), and this process drops
its entry whenever it changes the container itself, so a fresh container is usable at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ContainerInfo:
    status: int
    read_acl: str = ""
    write_acl: str = ""
    object_count: int = 0
    bytes_used: int = 0
    meta: dict[str, str] = field(default_factory=dict)


class InfoCache:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[tuple, tuple[float, Any]] = {}

    def get(self, key: tuple) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: tuple, value: Any) -> None:
        if len(self._entries) > 50000:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + self.ttl, value)

    def drop(self, key: tuple) -> None:
        self._entries.pop(key, None)


@dataclass
class AccountInfo:
    status: int
    container_count: int = 0
    object_count: int = 0
    bytes_used: int = 0
    meta: dict[str, str] = field(default_factory=dict)  # X-Account-Meta-* and -Sysmeta-*
