"""S3 key pairs: EC2-style access keys an account admin creates, lists and revokes, each
bound to one tempauth user of one account and carrying exactly that user's rights.

A key is an access key id (20 random uppercase letters and digits, like AWS's) and a secret
(40 random characters of the base64 alphabet). SigV4 and V2 check a signature with the secret
itself, so it cannot be kept only as a hash: it is sealed with AES-256-GCM under a key derived
(HKDF-SHA256) from the proxy's `auth_secret`, with the key id, account and user as associated
data, so a record copied under another id or rebound to another user no longer opens. The
plain secret is answered once, when the key is created, and never stored or logged.

Where keys live: in the cluster itself, so every proxy sees the same keys, in the reserved
namespace (common/reserved.py) of the system account `<reseller prefix>.s3keys`, which no
client can name (a NUL in a client's path is a 412, and listings show reserved names only
to a feature's own sub-requests):

- `\\x00s3keys` / `<key id>`: the key's record, JSON
  `{"v": 1, "id", "account", "user", "created", "sealed": base64(nonce 12 | ciphertext+tag)}`;
- `\\x00s3keys\\x00<account>` / `\\x00<key id>\\x00<user name>`: empty, one per key, so an
  account's keys are one listing (its last_modified is the key's creation time).

A create writes the record first (If-None-Match: *, a new id on the astronomically unlikely
clash), then the listing entry; a revoke deletes the record first, so a key stops working
as soon as the record is gone whatever becomes of its listing entry.

Lookups (every S3 request signed with a key pair) are cached per worker for
`s3_key_cache_ttl` seconds (InfoCache, without memcached), misses too. A revoke stamps the
host's shared table: every worker of the proxy that revoked stops accepting the key at once;
other proxy hosts stop within the TTL.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import string
import time
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from multidict import CIMultiDict

from swiftlite.common.http import HTTPError
from swiftlite.common.reserved import reserved_name, split_reserved
from swiftlite.proxy.caches.info import InfoCache
from swiftlite.proxy.request import (
    ALLOW_RESERVED,
    AUTHENTICATED,
    AUTHORIZER,
    IDENTITY,
    answer_of,
    sub_request,
)
from swiftlite.proxy.response import answer_body, close_answer

KEY_ID_LENGTH = 20
SECRET_LENGTH = 40
KEY_ID_ALPHABET = string.ascii_uppercase + string.digits
SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"
KEY_ID_RE = re.compile(r"[A-Z0-9]{20}")
SYSTEM_ACCOUNT = ".s3keys"  # under the first reseller prefix; no user or reseller reaches it
INDEX = reserved_name("s3keys")
NONCE = 12
# HKDF's salt and info name this use of auth_secret, so the derived key is no other one's.
KDF_SALT = b"swiftlite s3 key pairs"
KDF_INFO = b"aes-256-gcm seal v1"


def new_key_id() -> str:
    return "".join(secrets.choice(KEY_ID_ALPHABET) for _ in range(KEY_ID_LENGTH))


def new_secret() -> str:
    return "".join(secrets.choice(SECRET_ALPHABET) for _ in range(SECRET_LENGTH))


def listing_container(account: str) -> str:
    return reserved_name("s3keys", account)


@dataclass(frozen=True)
class KeyPair:
    key_id: str
    account: str  # the Swift account, "AUTH_test"
    user: str  # the bound tempauth user, "test:tester"
    created: float
    secret: str


class Sealer:
    """AES-256-GCM under a key derived from auth_secret; the associated data binds a sealed
    secret to its key id, account and user."""

    def __init__(self, auth_secret: bytes) -> None:
        key = HKDF(hashes.SHA256(), 32, KDF_SALT, KDF_INFO).derive(auth_secret)
        self._aead = AESGCM(key)

    @staticmethod
    def _aad(key_id: str, account: str, user: str) -> bytes:
        return "\x00".join((key_id, account, user)).encode()

    def seal(self, key_id: str, account: str, user: str, secret: str) -> str:
        nonce = os.urandom(NONCE)
        sealed = self._aead.encrypt(nonce, secret.encode(), self._aad(key_id, account, user))
        return base64.b64encode(nonce + sealed).decode()

    def open(self, key_id: str, account: str, user: str, sealed: str) -> str | None:
        """The secret, or None for a record that does not open (tampered, another id or
        binding, or sealed under another auth_secret)."""
        try:
            raw = base64.b64decode(sealed, validate=True)
            return self._aead.decrypt(raw[:NONCE], raw[NONCE:],
                                      self._aad(key_id, account, user)).decode()
        except (ValueError, InvalidTag, UnicodeDecodeError):
            return None


class KeyStore:
    """The key pairs of the cluster, through the core's sub-requests sent to `app` (the
    pipeline after tempauth: these requests are the feature's own, judged by its caller)."""

    def __init__(self, app, proxy, cache_ttl: float) -> None:
        self.app = app
        self.proxy = proxy
        self.cache = InfoCache(cache_ttl, "s3key", None, cache_ttl)
        self._sealer: Sealer | None = None

    @property
    def sealer(self) -> Sealer:
        if self._sealer is None:
            self._sealer = Sealer(self.proxy.auth.secret)
        return self._sealer

    @property
    def system_account(self) -> str:
        return self.proxy.auth.reseller_prefix + SYSTEM_ACCOUNT

    def _path(self, container: str, obj: str | None = None) -> str:
        out = f"/v1/{quote(self.system_account, safe='')}/{quote(container, safe='')}"
        return out + "/" + quote(obj, safe="") if obj is not None else out

    async def _send(self, request: web.Request, method: str, path: str,
                    headers: dict[str, str] | None = None, body: bytes = b"",
                    query: str = "") -> web.StreamResponse:
        sub = sub_request(request, method, path, CIMultiDict(headers or {}), body, query)
        # The feature's own request: nobody's identity, into the reserved namespace only.
        sub[ALLOW_RESERVED] = True
        sub[IDENTITY] = None
        sub[AUTHENTICATED] = None
        sub[AUTHORIZER] = None
        return await answer_of(self.app, sub)

    async def _ok(self, request: web.Request, method: str, path: str,
                  headers: dict[str, str] | None = None, body: bytes = b"",
                  ok: tuple[int, ...] = ()) -> int:
        resp = await self._send(request, method, path, headers, body)
        close_answer(resp)
        if resp.status // 100 != 2 and resp.status not in ok:
            raise HTTPError(503, "S3 key store unavailable")
        return resp.status

    # ---- the hot path ---------------------------------------------------------------------

    async def find(self, request: web.Request, key_id: str) -> KeyPair | None:
        """The live key pair `key_id`, None when there is none (or it does not open)."""
        if not KEY_ID_RE.fullmatch(key_id) or getattr(self.proxy, "auth", None) is None:
            return None
        record, fill = await self.cache.lookup((key_id,))
        if fill is not None:
            record = await self._fetch(request, key_id)
            await self.cache.put((key_id,), record, fill)
        if not record:
            return None
        secret = self.sealer.open(key_id, record["account"], record["user"], record["sealed"])
        if secret is None:
            return None
        return KeyPair(key_id, record["account"], record["user"], record["created"], secret)

    async def _fetch(self, request: web.Request, key_id: str) -> dict:
        resp = await self._send(request, "GET", self._path(INDEX, key_id))
        if resp.status == 404:
            close_answer(resp)
            return {}  # cached too: junk ids cost the cluster one read per TTL
        if resp.status // 100 != 2:
            close_answer(resp)
            raise HTTPError(503, "S3 key store unavailable")
        try:
            record = json.loads(await answer_body(resp))
            if record.get("id") != key_id or not all(
                    isinstance(record.get(k), str) for k in ("account", "user", "sealed")):
                return {}
        except (ValueError, AttributeError):
            return {}
        return record

    # ---- the admin API ----------------------------------------------------------------------

    async def create(self, request: web.Request, account: str, user: str) -> KeyPair:
        await self._ok(request, "PUT", self._path(INDEX))
        await self._ok(request, "PUT", self._path(listing_container(account)))
        for _ in range(3):
            key_id, secret, created = new_key_id(), new_secret(), time.time()
            record = {"v": 1, "id": key_id, "account": account, "user": user,
                      "created": created,
                      "sealed": self.sealer.seal(key_id, account, user, secret)}
            status = await self._ok(request, "PUT", self._path(INDEX, key_id),
                                    {"If-None-Match": "*",
                                     "Content-Type": "application/json"},
                                    json.dumps(record).encode(), ok=(412,))
            if status == 412:
                continue  # that id is taken: draw another
            await self.cache.drop((key_id,))  # a miss cached here is void now
            name = reserved_name(key_id, user.split(":", 1)[1])
            try:
                await self._ok(request, "PUT", self._path(listing_container(account), name))
            except HTTPError:
                await self._send(request, "DELETE", self._path(INDEX, key_id))
                await self.cache.drop((key_id,))
                raise
            return KeyPair(key_id, account, user, created, secret)
        raise HTTPError(503, "S3 key store unavailable")

    async def list(self, request: web.Request, account: str) -> list[dict]:
        """The account's keys, oldest first: id, user and creation time, never secrets."""
        out: list[dict] = []
        marker = ""
        prefix = self.proxy.auth.account_prefix(account) or ""
        tempauth_account = account[len(prefix):]
        while True:
            query = "format=json" + (f"&marker={quote(marker, safe='')}" if marker else "")
            resp = await self._send(request, "GET", self._path(listing_container(account)),
                                    query=query)
            if resp.status == 404:
                close_answer(resp)
                break
            if resp.status // 100 != 2:
                close_answer(resp)
                raise HTTPError(503, "S3 key store unavailable")
            rows = json.loads(await answer_body(resp) or b"[]")
            for row in rows:
                try:
                    key_id, name = split_reserved(row["name"])
                except ValueError:
                    continue
                out.append({"access_key_id": key_id, "user": f"{tempauth_account}:{name}",
                            "created": row.get("last_modified", "")[:19] + "Z"})
            if not rows:
                break
            marker = rows[-1]["name"]
        out.sort(key=lambda k: k["created"])
        return out

    async def revoke(self, request: web.Request, account: str, key_id: str) -> bool:
        """Revoke `account`'s key `key_id`: False when the account holds no such key."""
        if not KEY_ID_RE.fullmatch(key_id):
            return False
        record = await self._fetch(request, key_id)
        if not record or record.get("account") != account:
            return False
        await self._ok(request, "DELETE", self._path(INDEX, key_id), ok=(404,))
        await self.cache.drop((key_id,))
        name = reserved_name(key_id, record["user"].split(":", 1)[1])
        await self._ok(request, "DELETE", self._path(listing_container(account), name),
                       ok=(404,))
        return True
