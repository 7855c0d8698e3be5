"""`s3_keys`: the admin API of S3 key pairs (swiftlite/proxy/s3/keys.py), on account URLs.

    POST   /v1/<account>?s3-keys[&user=<name>]   create: 201, JSON with the secret (only here)
    GET    /v1/<account>?s3-keys                 list: 200, JSON [{access_key_id, user,
                                                 created}], never a secret
    DELETE /v1/<account>?s3-keys=<key id>        revoke: 204; 404 when the account has no
                                                 such key

Swift-authenticated: the X-Auth-Token of the account's admin (its `.admin` group in tempauth,
not an account-ACL grant) or of a reseller admin. Anyone else, anonymous included, gets 403
and learns nothing, not even whether a key exists. A key is bound to `user` (a tempauth
user of the account; by default the caller), whose rights it carries; a key for a user
holding a reseller group needs a reseller admin. Only keys of the account's own S3 account
(the first reseller prefix) are made, as S3 maps a user to that account.

Sits right after tempauth (the caller's identity is known) and owns the key store every
S3 lookup uses (`proxy.s3_keys`): its sub-requests go down the pipeline below it.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from aiohttp import web

from swiftlite.common.http import error
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import IDENTITY, INTERNAL, api_path
from swiftlite.proxy.s3.keys import KeyStore

QUERY = "s3-keys"
RESELLER_GROUPS = (".reseller_admin", ".reseller_reader")


def _json(status: int, doc: Any) -> web.Response:
    # The secret is in a create's answer: no cache on the way may keep it.
    return web.Response(status=status, text=json.dumps(doc), content_type="application/json",
                        headers={"Cache-Control": "no-store"})


class S3Keys(Middleware):
    name = "s3_keys"
    plain_reads = PASS  # only account requests with ?s3-keys are its

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.store = KeyStore(app, proxy, conf.get_float("s3_key_cache_ttl", 10.0))
        proxy.s3_keys = self.store  # S3 credentials find key pairs here

    def info(self) -> dict[str, Any]:
        return {"cache_ttl": self.store.cache.ttl}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        qs = request.rel_url.raw_query_string
        if not qs or QUERY not in qs or request.get(INTERNAL):
            return await self.app(request)
        path = api_path(request)
        if path is None or path.kind != "account" or QUERY not in request.query:
            return await self.app(request)
        return await self.serve(request, path.account)

    def _is_admin(self, request: web.Request, account: str) -> bool:
        ident = request.get(IDENTITY)
        auth = getattr(self.proxy, "auth", None)
        if ident is None or auth is None:
            return False
        # Ownership by `.admin` or reseller admin only: an account-ACL admin grant is not
        # the account's admin for minting credentials.
        return auth.is_owner(replace(ident, acl_grants={}), account)

    async def serve(self, request: web.Request, account: str) -> web.StreamResponse:
        if not self._is_admin(request, account):
            return error(403, "Forbidden")
        method = request.method
        if method == "GET":
            return _json(200, await self.store.list(request, account))
        if method == "POST":
            return await self.create(request, account)
        if method == "DELETE":
            key_id = request.query.get(QUERY, "")
            if not key_id:
                return error(400, "Name the key to revoke: ?s3-keys=<access key id>")
            if not await self.store.revoke(request, account, key_id):
                return error(404, "No such key")
            return web.Response(status=204)
        resp = error(405, "Method Not Allowed")
        resp.headers["Allow"] = "DELETE, GET, POST"
        return resp

    async def create(self, request: web.Request, account: str) -> web.Response:
        auth = self.proxy.auth
        prefix = auth.reseller_prefix
        if not account.startswith(prefix) or auth.account_prefix(account) != prefix or \
                len(account) == len(prefix):
            return error(400, f"S3 keys are made for {prefix}<account> accounts only")
        tempauth_account = account[len(prefix):]
        ident = request[IDENTITY]
        name = request.query.get("user", "")
        if not name:
            acct, _, own = ident.user.partition(":")
            if acct != tempauth_account:
                return error(400, "Name the user the key is for: ?s3-keys&user=<name>")
            name = own
        user = auth.users.get(f"{tempauth_account}:{name}")
        if user is None:
            return error(400, f"No user {name!r} in account {tempauth_account!r}")
        if any(g in RESELLER_GROUPS for g in user.groups) and not ident.is_reseller_admin:
            return error(403, "Forbidden")  # a key never carries more than its maker holds
        pair = await self.store.create(request, account, f"{user.account}:{user.name}")
        return _json(201, {
            "access_key_id": pair.key_id, "secret_access_key": pair.secret,
            "account": account, "user": pair.user,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(pair.created))})
