"""Tempauth-compatible authentication with self-validating tokens.

Users come from config lines `user_<account>_<user> = <key> [.admin] [.reseller_admin] ...`.
A token is `AUTH_tk<payload>.<hmac>` where payload carries the user, groups and expiry, signed
with `auth_secret`: any proxy worker (or host sharing the secret) validates it without a
shared cache.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from swiftlite.common.config import Section

TOKEN_PREFIX = "AUTH_tk"


@dataclass
class Identity:
    user: str  # "account:user"
    account: str  # tempauth account name ("test")
    groups: list[str] = field(default_factory=list)
    expires: float = 0.0

    @property
    def is_reseller_admin(self) -> bool:
        return ".reseller_admin" in self.groups

    def is_admin_of(self, storage_account: str, reseller_prefix: str) -> bool:
        return ".admin" in self.groups and storage_account == reseller_prefix + self.account


@dataclass
class User:
    account: str
    name: str
    key: str
    groups: list[str]


class TempAuth:
    def __init__(self, conf: Section) -> None:
        self.reseller_prefix = conf.get_str("reseller_prefix", "AUTH_")
        self.token_life = conf.get_int("token_life", 86400)
        secret = conf.get_str("auth_secret", "")
        # Without a configured secret tokens only validate in this process; warn-worthy for
        # multi-worker setups, which is why `swiftlite up` always writes one.
        self.secret = (secret or secrets.token_hex(32)).encode()
        self.storage_url_scheme = conf.get_str("storage_url_scheme", "default")
        self.users: dict[str, User] = {}
        for key, value in conf.items():
            if not key.startswith("user_"):
                continue
            account, _, name = key[len("user_"):].partition("_")
            parts = value.split()
            if not parts or not account or not name:
                continue
            self.users[f"{account}:{name}"] = User(account, name, parts[0], parts[1:])
        self._cache: dict[str, Identity] = {}

    def authenticate(self, user: str, key: str) -> User | None:
        entry = self.users.get(user)
        if entry is None or not hmac.compare_digest(entry.key.encode(), key.encode()):
            return None
        return entry

    def issue_token(self, user: User) -> tuple[str, int]:
        expires = int(time.time()) + self.token_life
        groups = [user.account, f"{user.account}:{user.name}", *user.groups]
        payload = json.dumps({"u": f"{user.account}:{user.name}", "g": groups, "e": expires},
                             separators=(",", ":")).encode()
        body = base64.urlsafe_b64encode(payload).rstrip(b"=")
        sig = hmac.new(self.secret, body, hashlib.sha256).digest()[:20]
        sig_text = base64.urlsafe_b64encode(sig).decode().rstrip("=")
        token = f"{TOKEN_PREFIX}{body.decode()}.{sig_text}"
        return token, self.token_life

    def validate(self, token: str | None) -> Identity | None:
        if not token or not token.startswith(TOKEN_PREFIX):
            return None
        now = time.time()
        ident = self._cache.get(token)
        if ident is not None:
            if ident.expires > now:
                return ident
            del self._cache[token]
            return None
        body, _, sig = token[len(TOKEN_PREFIX):].partition(".")
        try:
            want = hmac.new(self.secret, body.encode(), hashlib.sha256).digest()[:20]
            got = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
            if not hmac.compare_digest(want, got):
                return None
            payload: dict[str, Any] = json.loads(
                base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, TypeError):
            return None
        if payload.get("e", 0) <= now:
            return None
        user = payload["u"]
        ident = Identity(user, user.split(":", 1)[0], list(payload.get("g", [])), payload["e"])
        if len(self._cache) > 100000:
            self._cache.clear()
        self._cache[token] = ident
        return ident

    def storage_url(self, host_url: str, account: str) -> str:
        if self.storage_url_scheme not in ("default", ""):
            host_url = self.storage_url_scheme + "://" + host_url.split("://", 1)[-1]
        return f"{host_url}/v1/{self.reseller_prefix}{account}"
