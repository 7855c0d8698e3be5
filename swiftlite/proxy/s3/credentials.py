"""Who holds an S3 access key: every tempauth user, as `<account>:<user>`, its password the
secret; then the key pairs an account admin made (keys.py), each bound to one tempauth user.
The identity is the one that user's token would carry, so an S3 request is judged exactly as
the same user's Swift request (ACLs, account ACLs, reseller admin): a key pair never carries
more than its user has, and stops working when the user is gone from the config."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from swiftlite.proxy.auth import Identity, TempAuth, User

IDENTITY_LIFE = 300.0  # an identity is rebuilt this often: config reloads show


class Credentials:
    def __init__(self, auth: TempAuth | None, proxy: Any = None) -> None:
        self.auth = auth
        self.proxy = proxy  # its `s3_keys` (the s3_keys middleware's store), when present
        self._made: dict[str, Identity] = {}

    async def lookup(self, access_key: str,
                     request: web.Request) -> tuple[str, Identity] | None:
        """(secret, identity) for `access_key`, None when nobody holds it."""
        auth = self.auth
        if auth is None:
            return None
        user = auth.users.get(access_key)
        if user is not None:
            return user.key, self._identity(access_key, user)
        keys = getattr(self.proxy, "s3_keys", None)
        if keys is None:
            return None
        pair = await keys.find(request, access_key)
        if pair is None:
            return None
        user = auth.users.get(pair.user)
        if user is None or auth.reseller_prefix + user.account != pair.account:
            return None
        return pair.secret, self._identity(pair.user, user)

    def _identity(self, name: str, user: User) -> Identity:
        now = time.time()
        ident = self._made.get(name)
        if ident is None or ident.expires <= now:
            auth = self.auth
            assert auth is not None
            groups = [user.account, f"{user.account}:{user.name}", *user.groups]
            ident = Identity(name, user.account,
                             auth.expand_groups(user.account, groups), now + IDENTITY_LIFE)
            self._made[name] = ident
        return ident

    def account_of(self, ident: Identity) -> str:
        """The Swift account whose containers are this user's buckets."""
        prefix = self.auth.reseller_prefix if self.auth is not None else "AUTH_"
        return prefix + ident.account
