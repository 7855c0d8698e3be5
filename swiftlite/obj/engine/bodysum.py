"""The sums a stored body carries: its MD5 (the ETag clients see) and a fast check.

MD5 runs at about 0.6 GB/s on this class of CPU: checking it on every full GET cost a third of
the object server's CPU on 1 MiB reads. So a PUT also records xxh3-64 of the body (about 20x
faster) under `CHECK_KEY` in the file's metadata, and a GET verifies that instead: a copy whose
bytes changed on disk is still caught before its last byte leaves. The ETag itself is still
verified where it is the point: on PUT (against the client's ETag), when a replica arrives,
and by the auditor. Files written before the check existed are verified by MD5 as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import xxhash

from swiftlite.common.hashing import FAST_CHECK_PREFIX as _PREFIX
from swiftlite.common.hashing import fast_check

CHECK_KEY = "X-Backend-Body-Check"  # internal: never sent to clients (not user metadata)
# A metadata value the writer replaces with the body's MD5 before the file is written: an EC
# archive's own MD5 (EC_ARCHIVE_ETAG), which only the object server computes.
OWN_MD5 = "\x00own-md5"


class Summer:
    """MD5 and the fast check of a body fed in pieces."""

    __slots__ = ("_md5", "_fast")

    def __init__(self) -> None:
        self._md5 = hashlib.md5()
        self._fast = xxhash.xxh3_64()

    def update(self, data: Any) -> None:
        self._md5.update(data)
        self._fast.update(data)

    def feed(self, chunks: Iterable[Any]) -> Summer:
        for c in chunks:
            self.update(c)
        return self

    @property
    def etag(self) -> str:
        return self._md5.hexdigest()

    @property
    def check(self) -> str:
        return fast_check(self._fast)

    def refuses(self, expected: str | None) -> bool:
        """Whether the body is not what its sender said: `expected` is its MD5 (an ETag)
        or its fast check (an EC archive's footer)."""
        if not expected:
            return False
        want = expected.strip('"').lower()
        return want != (self.check if want.startswith(_PREFIX) else self.etag)

    def stamp(self, metadata: dict[str, str]) -> dict[str, str]:
        """`metadata` with the sums a stored body carries (ETag, CHECK_KEY) and any OWN_MD5
        placeholder filled in."""
        etag = self.etag
        out = {k: (etag if v == OWN_MD5 else v) for k, v in metadata.items()}
        out["ETag"] = etag
        out[CHECK_KEY] = self.check
        return out


class Verifier:
    """Checks a body read back against what its metadata recorded: the fast check when the
    file has one, else the ETag."""

    __slots__ = ("_want", "_h")

    def __init__(self, metadata: dict[str, str]) -> None:
        check = metadata.get(CHECK_KEY, "")
        if check.startswith(_PREFIX):
            self._want, self._h = check[len(_PREFIX):], xxhash.xxh3_64()
        else:
            self._want, self._h = metadata.get("ETag", ""), hashlib.md5()

    def update(self, data: Any) -> None:
        self._h.update(data)

    def ok(self) -> bool:
        return self._h.hexdigest() == self._want


def body_ok(body: Any, metadata: dict[str, str]) -> bool:
    v = Verifier(metadata)
    v.update(body)
    return v.ok()


def all_ok(body_sums: Summer, metadata: dict[str, str]) -> bool:
    """Both sums of a whole body agree with its metadata (a fast check is optional): what a
    replica receiver and the auditor ask before trusting a copy."""
    check = metadata.get(CHECK_KEY)
    return body_sums.etag == metadata.get("ETag") and (check is None or
                                                       check == body_sums.check)
