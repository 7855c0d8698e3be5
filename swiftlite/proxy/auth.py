"""Tempauth-compatible users, self-validating tokens, and who owns which account.

Users come from config lines `user_<account>_<user> = <key> [group ...] [storage_url]`, with
Swift's special groups `.admin` (owns the account), `.reseller_admin` (owns every account)
and `.reseller_reader` (reads every account). `reseller_prefix` may list several prefixes
(`AUTH, SERVICE`): the first names tokens and storage URLs, and a `.admin` user owns its
account under every prefix; `<PREFIX>_require_group = <group>` makes owning an account under
that prefix also need the group, which a second token (X-Service-Token) can supply.

A token is `<prefix>tk<payload>.<hmac>` where payload carries the user, groups and expiry,
signed with `auth_secret`: any proxy worker (or host sharing the secret) validates it without a
shared cache.
"""

from __future__ import annotations

import base64
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from swiftlite.common.config import Section
from swiftlite.common.hmacs import HmacSha256
from swiftlite.common.signing import check_secret


@dataclass(frozen=True)
class Identity:
    user: str  # "account:user" of the X-Auth-Token
    account: str  # tempauth account name ("test")
    # Swift's group list: account, account:user, the user's groups with `.admin` replaced by
    # the account's ids under every prefix (AUTH_test, SERVICE_test), then a valid service
    # token's groups. Container and account ACLs match these exactly.
    groups: tuple[str, ...] = ()
    expires: float = 0.0
    # Account ACL level (admin, read-write, read-only) that accounts addressed by this request
    # grant these groups; tempauth fills it per request from the account's stored ACL.
    acl_grants: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_reseller_admin(self) -> bool:
        return ".reseller_admin" in self.groups

    @property
    def is_reseller_reader(self) -> bool:
        return ".reseller_reader" in self.groups

    def with_service(self, service: Identity) -> Identity:
        """This identity plus the groups of a service token (X-Service-Token)."""
        return replace(self, groups=self.groups + service.groups)

    def with_grant(self, account: str, level: str) -> Identity:
        return replace(self, acl_grants={**self.acl_grants, account: level})


@dataclass
class User:
    account: str
    name: str
    key: str
    groups: list[str]
    storage_url: str | None = None


def parse_prefixes(value: str) -> list[str]:
    """Swift's `reseller_prefix` list: "AUTH, SERVICE" -> ["AUTH_", "SERVICE_"]; '' is the
    empty prefix (every account)."""
    out: list[str] = []
    for item in (p.strip() for p in value.split(",")):
        if not item:
            continue
        prefix = "" if item in ("''", '""') else item if item.endswith("_") else item + "_"
        if prefix not in out:
            out.append(prefix)
    return out or [""]


class TempAuth:
    def __init__(self, conf: Section) -> None:
        self.reseller_prefixes = parse_prefixes(conf.get_str("reseller_prefix", "AUTH"))
        self.reseller_prefix = self.reseller_prefixes[0]
        self._prefixes_longest_first = sorted(self.reseller_prefixes, key=len, reverse=True)
        self.token_prefix = self.reseller_prefix + "tk"
        # The config parser lowercases option names: SERVICE_require_group arrives lowercased.
        default_group = conf.get_str("require_group", "")
        self.require_groups = {
            p: conf.get_str(((p or "''") + "require_group").lower(), default_group)
            for p in self.reseller_prefixes}
        self.token_life = conf.get_int("token_life", 86400)
        # Whoever knows the secret mints any user's token, reseller admin included: refuse to
        # start with none (each worker would sign with its own), a short one or a sample.
        self.secret = check_secret(conf.get_str("auth_secret", ""), "auth_secret").encode()
        self._mac = HmacSha256(self.secret)  # tokens are checked on the event loop (hmacs.py)
        self.storage_url_scheme = conf.get_str("storage_url_scheme", "default")
        self.users: dict[str, User] = {}
        for key, value in conf.items():
            if not key.startswith("user_"):
                continue
            account, _, name = key[len("user_"):].partition("_")
            parts = value.split()
            if not parts or not account or not name:
                continue
            url = parts.pop() if len(parts) > 1 and "://" in parts[-1] else None
            self.users[f"{account}:{name}"] = User(account, name, parts[0], parts[1:], url)
        self._cache: dict[str, Identity] = {}
        self._last_owner: tuple[Identity | None, str, bool] = (None, "", False)

    # ---- accounts ----------------------------------------------------------------------------

    def account_prefix(self, account: str) -> str | None:
        """The reseller prefix `account` falls under (the longest), None if not ours."""
        for prefix in self._prefixes_longest_first:
            if account.startswith(prefix):
                return prefix
        return None

    def reseller_may_touch(self, account: str) -> bool:
        """Reseller admins and readers reach every account but a bare prefix or a `.name`."""
        prefix = self.account_prefix(account)
        return prefix is not None and account not in self.reseller_prefixes and \
            account[len(prefix)] != "."

    def is_owner(self, ident: Identity | None, account: str) -> bool:
        """Swift's `swift_owner`: reseller admin, the account's `.admin` user (holding the
        prefix's required group, if any), or granted `admin` by the account's ACL."""
        if ident is None:
            return False
        # Asked several times per request (tempauth, the core, the answer's checks) about
        # one identity, which is immutable: the last verdict is kept with what it was for.
        last = self._last_owner
        if last[0] is ident and last[1] == account:
            return last[2]
        verdict = self._is_owner(ident, account)
        self._last_owner = (ident, account, verdict)
        return verdict

    def _is_owner(self, ident: Identity, account: str) -> bool:
        prefix = self.account_prefix(account)
        if prefix is None:
            return False
        if ident.is_reseller_admin and self.reseller_may_touch(account):
            return True
        if account in ident.groups:
            need = self.require_groups.get(prefix)
            if not need or need in ident.groups:
                return True
        return ident.acl_grants.get(account) == "admin"

    # ---- users and tokens --------------------------------------------------------------------

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
        sig = self._mac.digest(body)[:20]
        sig_text = base64.urlsafe_b64encode(sig).decode().rstrip("=")
        token = f"{self.token_prefix}{body.decode()}.{sig_text}"
        return token, self.token_life

    def is_ours(self, token: str | None) -> bool:
        """Whether `token` claims to be one of our tokens (others are not ours to refuse)."""
        return bool(token) and token.startswith(self.token_prefix)  # type: ignore[union-attr]

    def validate(self, token: str | None) -> Identity | None:
        ident = self._cache.get(token)  # (only ours are kept: no prefix to check first)
        if ident is not None:
            if ident.expires > time.time():
                return ident
            del self._cache[token]
            return None
        if not token or not token.startswith(self.token_prefix):
            return None
        now = time.time()
        body, _, sig = token[len(self.token_prefix):].partition(".")
        try:
            want = self._mac.digest(body.encode())[:20]
            # Compare the text exactly as issued: decoding would ignore junk appended to
            # the token (stray characters, padding, unused low bits of the last one).
            want_text = base64.urlsafe_b64encode(want).rstrip(b"=")
            if not hmac.compare_digest(want_text, sig.encode("utf-8", "surrogateescape")):
                return None
            payload: dict[str, Any] = json.loads(
                base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, TypeError):
            return None
        if payload.get("e", 0) <= now:
            return None
        user = payload["u"]
        account = user.split(":", 1)[0]
        ident = Identity(user, account, self.expand_groups(account, payload.get("g", [])),
                         payload["e"])
        if len(self._cache) > 100000:
            self._cache.clear()
        self._cache[token] = ident
        return ident

    def expand_groups(self, account: str, groups: list[str]) -> tuple[str, ...]:
        """`.admin` becomes the account's id under every prefix (as Swift's tempauth)."""
        if ".admin" not in groups:
            return tuple(groups)
        out = [g for g in groups if g != ".admin"]
        out += [p + account for p in self.reseller_prefixes
                if p and p + account not in out]
        if self.reseller_prefix + account not in out:
            out.append(self.reseller_prefix + account)
        return tuple(out)

    def storage_url(self, host_url: str, user: User) -> str:
        if user.storage_url:
            return user.storage_url.replace("$HOST", host_url)
        if self.storage_url_scheme not in ("default", ""):
            host_url = self.storage_url_scheme + "://" + host_url.split("://", 1)[-1]
        return f"{host_url}/v1/{self.reseller_prefix}{user.account}"
