"""Who holds an S3 access key: every tempauth user, as `<account>:<user>`, its password the
secret. The identity is the one that user's token would carry, so an S3 request is judged
exactly as the same user's Swift request (ACLs, account ACLs, reseller admin)."""

from __future__ import annotations

import time

from swiftlite.proxy.auth import Identity, TempAuth

IDENTITY_LIFE = 300.0  # an identity is rebuilt this often: config reloads show


class Credentials:
    def __init__(self, auth: TempAuth | None) -> None:
        self.auth = auth
        self._made: dict[str, Identity] = {}

    def lookup(self, access_key: str) -> tuple[str, Identity] | None:
        """(secret, identity) for `access_key`, None when nobody holds it."""
        auth = self.auth
        user = auth.users.get(access_key) if auth is not None else None
        if auth is None or user is None:
            return None
        now = time.time()
        ident = self._made.get(access_key)
        if ident is None or ident.expires <= now:
            groups = [user.account, f"{user.account}:{user.name}", *user.groups]
            ident = Identity(access_key, user.account,
                             auth.expand_groups(user.account, groups), now + IDENTITY_LIFE)
            self._made[access_key] = ident
        return user.key, ident

    def account_of(self, ident: Identity) -> str:
        """The Swift account whose containers are this user's buckets."""
        prefix = self.auth.reseller_prefix if self.auth is not None else "AUTH_"
        return prefix + ident.account
