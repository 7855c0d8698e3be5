"""Who may do what in S3: the one place an S3 request is allowed or refused.

Every request passes `check_request` (middleware.dispatch) before its handler: it finds the
bucket's owning account (registry.py), names the request's S3 action (`s3:GetObject`, ...)
and calls `authorize`. A handler that touches a second resource (CopyObject's source) calls
`authorize` for it too. The decision, in order:

1. Each decider in DECIDERS (bucket policies plug in here) answers ALLOW, DENY or None
   (no opinion). Any DENY refuses the request, owner or not.
2. The bucket's owner (who owns its Swift account, as tempauth judges: the account's `.admin`
   users, a reseller admin, an account ACL's `admin`) may do anything, but for the ACL of
   an object another account wrote and owns (ObjectWriter, BucketOwnerPreferred without
   `bucket-owner-full-control`): that ACL decides who reads or changes it, the bucket's
   owner and its policy's grantees included (check_foreign_acp).
3. Anyone else is allowed by a decider's ALLOW or by the S3 ACL of the bucket (bucket
   actions, object writes) or of the object (object reads, its ACL): then the request's
   Swift sub-requests run with the owner's rights on that account only
   (`S3Request.acting`, an identity granted `admin` there, as an account ACL would), since
   the caller has none of its own there.
4. A bucket with no S3 ACL (made through Swift, or before S3 ACLs) is judged by Swift for
   the data actions (object reads and writes, listings): the sub-requests go as the caller,
   and container ACLs decide, as they did before.
5. Anything else: AccessDenied.

ACLs are JSON in sysmeta (X-Container-Sysmeta-S3-Acl, X-Object-Sysmeta-S3-Acl): the owner's
canonical id (`account:user`) and grants (kind `id` or `group`, grantee, permission). A
bucket's ownership controls and public access block, also sysmeta, are read here too: with
BucketOwnerEnforced no ACL grants anything; with IgnorePublicAcls no group grant does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from multidict import CIMultiDict

from swiftlite.proxy.acl import parse_acl, principal_allowed
from swiftlite.proxy.auth import Identity
from swiftlite.proxy.request import AUTHENTICATED, answer_of, sub_request
from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import overrides, routes
from swiftlite.proxy.s3.errors import S3Error, access_denied, no_such_bucket
from swiftlite.proxy.s3.registry import Entry, Registry, RegistryError

log = logging.getLogger("swiftlite.proxy")

ALLOW = "allow"
DENY = "deny"

BUCKET_ACL = "X-Container-Sysmeta-S3-Acl"
OBJECT_ACL = "X-Object-Sysmeta-S3-Acl"
OWNERSHIP = "X-Container-Sysmeta-S3-Ownership"  # ObjectWriter / BucketOwnerPreferred / ...
PUBLIC_BLOCK = "X-Container-Sysmeta-S3-Public-Access-Block"  # JSON {flag: bool}

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTH_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
PERMISSIONS = ("FULL_CONTROL", "READ", "WRITE", "READ_ACP", "WRITE_ACP")

# What an anonymous caller's allowed sub-requests run as (with a grant on the one account).
ANONYMOUS = Identity("anonymous", "")


@dataclass
class Acl:
    owner: str  # canonical id, "account:user"
    grants: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, who, perm)

    def dump(self) -> str:
        return json.dumps({"o": self.owner, "g": self.grants}, separators=(",", ":"))

    @classmethod
    def load(cls, text: str | None) -> Acl | None:
        if not text:
            return None
        try:
            doc = json.loads(text)
            return cls(str(doc["o"]), [tuple(g) for g in doc.get("g", [])])  # type: ignore
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def private(cls, owner: str) -> Acl:
        return cls(owner, [("id", owner, "FULL_CONTROL")])

    def permits(self, who: str | None, permission: str, ignore_public: bool = False) -> bool:
        """Whether `who` (a canonical id; None: anonymous) holds `permission`. The owner
        always may read and write the ACL itself."""
        if who is not None and who == self.owner and permission in ("READ_ACP", "WRITE_ACP"):
            return True
        for kind, grantee, perm in self.grants:
            if perm != permission and perm != "FULL_CONTROL":
                continue
            if kind == "id":
                if who is not None and grantee == who:
                    return True
            elif not ignore_public and (grantee == ALL_USERS or
                                        (grantee == AUTH_USERS and who is not None)):
                return True
        return False


Decider = Callable[["Ask"], Awaitable[str | None]]
# Evaluators consulted for every decision, in order (policy.py appends its own). Each must
# be cheap for a bucket it has nothing to say about: it runs on every request.
DECIDERS: list[Decider] = []


@dataclass
class Ask:
    """One decision: may the caller of `s3` do `action` on `bucket` (and `key`)?"""
    s3: Any  # context.S3Request
    action: str
    bucket: str | None
    key: str | None
    account: str  # the Swift account holding the bucket
    is_owner: bool  # the caller owns that account


# (level, method, sub-resource) -> S3 action; a request not named here is its owner's only
# (unless a decider allows it), under the name action_of() makes up.
ACTIONS: dict[tuple[str, str, str], str] = {
    ("service", "GET", ""): "s3:ListAllMyBuckets",
    ("service", "HEAD", ""): "s3:ListAllMyBuckets",
    ("bucket", "PUT", ""): "s3:CreateBucket",
    ("bucket", "DELETE", ""): "s3:DeleteBucket",
    ("bucket", "HEAD", ""): "s3:ListBucket",
    ("bucket", "GET", ""): "s3:ListBucket",
    ("bucket", "GET", "versions"): "s3:ListBucketVersions",
    ("bucket", "GET", "uploads"): "s3:ListBucketMultipartUploads",
    ("bucket", "POST", "delete"): "s3:DeleteObject",
    ("bucket", "GET", "acl"): "s3:GetBucketAcl",
    ("bucket", "HEAD", "acl"): "s3:GetBucketAcl",
    ("bucket", "PUT", "acl"): "s3:PutBucketAcl",
    ("bucket", "GET", "location"): "s3:GetBucketLocation",
    ("bucket", "GET", "versioning"): "s3:GetBucketVersioning",
    ("bucket", "PUT", "versioning"): "s3:PutBucketVersioning",
    ("bucket", "GET", "tagging"): "s3:GetBucketTagging",
    ("bucket", "PUT", "tagging"): "s3:PutBucketTagging",
    ("bucket", "DELETE", "tagging"): "s3:PutBucketTagging",
    ("bucket", "GET", "policy"): "s3:GetBucketPolicy",
    ("bucket", "PUT", "policy"): "s3:PutBucketPolicy",
    ("bucket", "DELETE", "policy"): "s3:DeleteBucketPolicy",
    ("bucket", "GET", "policyStatus"): "s3:GetBucketPolicyStatus",
    ("bucket", "GET", "ownershipControls"): "s3:GetBucketOwnershipControls",
    ("bucket", "PUT", "ownershipControls"): "s3:PutBucketOwnershipControls",
    ("bucket", "DELETE", "ownershipControls"): "s3:PutBucketOwnershipControls",
    ("bucket", "GET", "publicAccessBlock"): "s3:GetBucketPublicAccessBlock",
    ("bucket", "PUT", "publicAccessBlock"): "s3:PutBucketPublicAccessBlock",
    ("bucket", "DELETE", "publicAccessBlock"): "s3:PutBucketPublicAccessBlock",
    ("bucket", "GET", "cors"): "s3:GetBucketCORS",
    ("bucket", "PUT", "cors"): "s3:PutBucketCORS",
    ("bucket", "DELETE", "cors"): "s3:PutBucketCORS",
    ("bucket", "GET", "lifecycle"): "s3:GetLifecycleConfiguration",
    ("bucket", "PUT", "lifecycle"): "s3:PutLifecycleConfiguration",
    ("bucket", "DELETE", "lifecycle"): "s3:PutLifecycleConfiguration",
    ("bucket", "GET", "encryption"): "s3:GetEncryptionConfiguration",
    ("bucket", "PUT", "encryption"): "s3:PutEncryptionConfiguration",
    ("bucket", "DELETE", "encryption"): "s3:PutEncryptionConfiguration",
    ("bucket", "GET", "object-lock"): "s3:GetBucketObjectLockConfiguration",
    ("bucket", "PUT", "object-lock"): "s3:PutBucketObjectLockConfiguration",
    ("object", "GET", ""): "s3:GetObject",
    ("object", "HEAD", ""): "s3:GetObject",
    ("object", "PUT", ""): "s3:PutObject",
    ("object", "DELETE", ""): "s3:DeleteObject",
    ("object", "GET", "acl"): "s3:GetObjectAcl",
    ("object", "HEAD", "acl"): "s3:GetObjectAcl",
    ("object", "PUT", "acl"): "s3:PutObjectAcl",
    ("object", "GET", "tagging"): "s3:GetObjectTagging",
    ("object", "PUT", "tagging"): "s3:PutObjectTagging",
    ("object", "DELETE", "tagging"): "s3:DeleteObjectTagging",
    ("object", "GET", "attributes"): "s3:GetObjectAttributes",
    ("object", "GET", "retention"): "s3:GetObjectRetention",
    ("object", "PUT", "retention"): "s3:PutObjectRetention",
    ("object", "GET", "legal-hold"): "s3:GetObjectLegalHold",
    ("object", "PUT", "legal-hold"): "s3:PutObjectLegalHold",
    ("object", "POST", "uploads"): "s3:PutObject",
    ("object", "PUT", "uploadId"): "s3:PutObject",
    ("object", "PUT", "partNumber"): "s3:PutObject",
    ("object", "POST", "uploadId"): "s3:PutObject",
    ("object", "DELETE", "uploadId"): "s3:AbortMultipartUpload",
    ("object", "GET", "uploadId"): "s3:ListMultipartUploadParts",
}
# The versioned variants AWS names separately, when the request carries a versionId.
VERSIONED = {"s3:GetObject": "s3:GetObjectVersion", "s3:DeleteObject": "s3:DeleteObjectVersion",
             "s3:GetObjectAcl": "s3:GetObjectVersionAcl",
             "s3:PutObjectAcl": "s3:PutObjectVersionAcl",
             "s3:GetObjectTagging": "s3:GetObjectVersionTagging",
             "s3:PutObjectTagging": "s3:PutObjectVersionTagging",
             "s3:DeleteObjectTagging": "s3:DeleteObjectVersionTagging"}
# What an ACL must grant for each action: on the object (reads, its ACL) or on the bucket.
OBJECT_PERMISSION = {"s3:GetObject": "READ", "s3:GetObjectVersion": "READ",
                     "s3:GetObjectAcl": "READ_ACP", "s3:GetObjectVersionAcl": "READ_ACP",
                     "s3:PutObjectAcl": "WRITE_ACP", "s3:PutObjectVersionAcl": "WRITE_ACP"}
BUCKET_PERMISSION = {"s3:ListBucket": "READ", "s3:ListBucketVersions": "READ",
                     "s3:ListBucketMultipartUploads": "READ",
                     "s3:ListMultipartUploadParts": "READ",
                     "s3:PutObject": "WRITE", "s3:DeleteObject": "WRITE",
                     "s3:DeleteObjectVersion": "WRITE", "s3:AbortMultipartUpload": "WRITE",
                     "s3:GetBucketAcl": "READ_ACP", "s3:PutBucketAcl": "WRITE_ACP"}
# Actions Swift's container ACLs judge on a bucket with no S3 ACL (rule 4).
SWIFT_JUDGED = frozenset(("s3:GetObject", "s3:GetObjectVersion", "s3:PutObject",
                          "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:ListBucket",
                          "s3:ListBucketVersions", "s3:ListBucketMultipartUploads",
                          "s3:ListMultipartUploadParts", "s3:AbortMultipartUpload"))


def action_of(level: str, method: str, query: dict[str, str]) -> str:
    sub = ""
    for name in query:  # as routes.handler_for picks the handler
        if (level, method, name) in routes.ROUTES:
            sub = name
            break
    action = ACTIONS.get((level, method, sub))
    if action is None:
        action = f"s3:{method.title()}{level.title()}{sub[:1].upper()}{sub[1:]}"
    if "versionId" in query:
        action = VERSIONED.get(action, action)
    return action


def registry_of(s3: Any) -> Registry:
    conf = s3.conf
    reg = getattr(conf, "registry", None)
    if reg is None:
        auth = conf.creds.auth
        reg = conf.registry = Registry(auth.reseller_prefix if auth is not None else "AUTH_")
    return reg


def canonical_id(ident: Identity | None) -> str | None:
    """A caller's S3 id: `account:user`, as its access key (None: anonymous)."""
    return None if ident is None else ident.user


async def resolve(s3: Any, bucket: str) -> str:
    """The account holding `bucket`: the registry's owner, else (no entry) the caller's own
    account, or the anonymous account where one is configured; NoSuchBucket when neither."""
    try:
        entry = await registry_of(s3).lookup(s3.app, s3.request, bucket)
    except RegistryError as exc:
        raise _registry_failed(exc) from None
    if entry is not None:
        return entry.account
    if s3.ident is None:
        if s3.conf.anonymous_account:
            return s3.conf.anonymous_account
        raise no_such_bucket(bucket)
    return s3.conf.creds.account_of(s3.ident)


async def check_request(s3: Any, level: str) -> None:
    """Find the request's bucket owner (s3.account) and authorize its own action."""
    action = action_of(level, s3.request.method, s3.query)
    if level == "service":
        return  # ListBuckets lists the caller's own account (nothing, anonymous)
    if action == "s3:CreateBucket":
        if s3.ident is None:
            raise access_denied()
        return  # the caller's account; bucket.create_bucket claims the name
    tenant = None
    if ":" in s3.bucket:
        # RGW's `<tenant>:<bucket>` (`:<bucket>`: no tenant). Names are global here, so a
        # tenant only has to be the bucket's owning account.
        tenant, _, s3.bucket = s3.bucket.partition(":")
    s3.account = await resolve(s3, s3.bucket)
    auth = s3.conf.creds.auth
    if tenant and s3.account != (auth.reseller_prefix if auth else "AUTH_") + tenant:
        raise no_such_bucket(s3.bucket)
    expected = s3.request.headers.get("x-amz-expected-bucket-owner")
    if expected is not None:
        await check_expected_owner(s3, s3.bucket, s3.account, expected)
    if s3.key and s3.query.get("versionId") == "null":
        from swiftlite.proxy.s3 import versioned  # (it reads through context.py)
        await versioned.resolve_null(s3, owner_rights(s3, s3.account))
    await authorize(s3, action, s3.key)


async def check_expected_owner(s3: Any, bucket: str, account: str, expected: str) -> None:
    """`x-amz-expected-bucket-owner`: AccessDenied unless the bucket's owner is the one
    named (its canonical id `account:user`, or its Swift account)."""
    found, entry = registry_of(s3).cached(bucket)
    owner = entry.owner_id if found and entry is not None else None
    if owner is None:
        info = await s3.proxy.container_info(s3.request, account, bucket)
        meta = {k.lower(): v for k, v in info.meta.items()}
        acl = Acl.load(meta.get(BUCKET_ACL.lower()))
        owner = acl.owner if acl is not None else None
    if expected.strip() not in (owner, account):
        raise access_denied()


async def owns(s3: Any, account: str) -> bool:
    """Whether the caller owns `account` as tempauth judges (its account ACL included)."""
    ident = s3.ident
    if ident is None:
        return False
    auth = s3.conf.creds.auth
    if auth is not None and auth.is_owner(ident, account):
        return True
    tempauth = next((mw for mw in s3.proxy.middleware if mw.name == "tempauth"), None)
    if tempauth is None:
        return False
    granted = await tempauth.grant_for(s3.request, ident, account)
    return granted is not ident and auth is not None and auth.is_owner(granted, account)


def act_as_owner(s3: Any, account: str) -> None:
    """The request's sub-requests into `account` run with its owner's rights."""
    s3.acting = owner_rights(s3, account)


async def authorize(s3: Any, action: str, key: str | None = None,
                    bucket: str | None = None, account: str | None = None) -> None:
    """Raise AccessDenied unless the caller may do `action` on `bucket` (default: the
    request's) and `key`; when allowed through an ACL or a decider, the request's
    sub-requests into the bucket's account run with the owner's rights from then on."""
    if bucket is None:
        bucket = s3.bucket
        account = s3.account
    elif account is None:
        account = await resolve(s3, bucket)
    assert bucket is not None and account is not None
    is_owner = await owns(s3, account)
    if DECIDERS:
        ask = Ask(s3, action, bucket, key, account, is_owner)
        verdicts = [await decide(ask) for decide in DECIDERS]
        if DENY in verdicts:
            raise access_denied()
        if is_owner:
            return await check_foreign_acp(s3, action, bucket, key, account)
        if ALLOW in verdicts:
            # A policy is the bucket owner's: it grants no more than the owner holds.
            await check_foreign_acp(s3, action, bucket, key, account)
            act_as_owner(s3, account)
            return
    elif is_owner:
        return await check_foreign_acp(s3, action, bucket, key, account)
    info = await s3.proxy.container_info(s3.request, account, bucket)
    if info.status == 404:
        raise no_such_bucket(bucket)
    meta = {k.lower(): v for k, v in info.meta.items()}
    bucket_acl = Acl.load(meta.get(BUCKET_ACL.lower()))
    if bucket_acl is None:
        if action in SWIFT_JUDGED:
            return  # rule 4: Swift's container ACLs judge the caller's own sub-requests
        raise access_denied()
    if meta.get(OWNERSHIP.lower()) == "BucketOwnerEnforced":
        raise access_denied()  # ACLs are off: only the owner and policies grant
    ignore_public = public_block(meta).get("IgnorePublicAcls", False)
    who = canonical_id(s3.ident)
    perm = OBJECT_PERMISSION.get(action) if key is not None else None
    if perm is not None:
        obj_acl, exists = await object_acl(s3, account, bucket, key or "", meta)
        if exists:
            allowed = (obj_acl or Acl.private(bucket_acl.owner)).permits(who, perm,
                                                                         ignore_public)
        else:  # no such object: whoever may list the bucket learns that
            allowed = bucket_acl.permits(who, "READ", ignore_public)
    else:
        perm = BUCKET_PERMISSION.get(action)
        allowed = perm is not None and bucket_acl.permits(who, perm, ignore_public)
    if allowed:
        act_as_owner(s3, account)
        return
    if action in SWIFT_JUDGED and swift_grants(s3.ident, info, action):
        return  # a container ACL names the caller: Swift judges its own sub-requests
    raise access_denied()


# The object actions an object's own ACL decides even for the bucket's owner (rule 2's
# exception): S3 leaves an object's ACL to the object's owner.
FOREIGN_ACP = {"s3:GetObjectAcl": "READ_ACP", "s3:GetObjectVersionAcl": "READ_ACP",
               "s3:PutObjectAcl": "WRITE_ACP", "s3:PutObjectVersionAcl": "WRITE_ACP"}


async def check_foreign_acp(s3: Any, action: str, bucket: str, key: str | None,
                            account: str) -> None:
    """The bucket's owner (or whoever its policy allows) reads or sets the ACL of an object
    another account wrote (and still owns) only as that ACL grants: AccessDenied otherwise.
    With BucketOwnerEnforced every object is the bucket owner's, and this does not apply."""
    perm = FOREIGN_ACP.get(action)
    if perm is None or key is None:
        return
    info = await s3.proxy.container_info(s3.request, account, bucket)
    if info.status == 404:
        return  # the handler answers NoSuchBucket
    meta = {k.lower(): v for k, v in info.meta.items()}
    if meta.get(OWNERSHIP.lower()) == "BucketOwnerEnforced":
        return
    obj_acl, exists = await object_acl(s3, account, bucket, key, meta)
    if not exists or obj_acl is None or not foreign_owner(s3, obj_acl.owner, account):
        return
    if not obj_acl.permits(canonical_id(s3.ident), perm,
                           public_block(meta).get("IgnorePublicAcls", False)):
        raise access_denied()


def foreign_owner(s3: Any, owner_id: str, account: str) -> bool:
    """Whether an object owner's canonical id (`account:user`) is a user of another account
    than `account` (an anonymous writer's object is the bucket owner's to manage)."""
    if not owner_id or owner_id == "anonymous" or ":" not in owner_id:
        return False
    auth = s3.conf.creds.auth
    prefix = auth.reseller_prefix if auth is not None else "AUTH_"
    return prefix + owner_id.partition(":")[0] != account


def swift_grants(ident: Identity | None, info: Any, action: str) -> bool:
    """Whether the container's Swift ACL names the caller (a user or group, not a referrer
    rule: `.r:*` is how a public-read bucket shows to Swift, and must not open its private
    objects to S3 callers)."""
    if ident is None:
        return False
    write = action in BUCKET_PERMISSION and BUCKET_PERMISSION[action] == "WRITE"
    return principal_allowed(ident, parse_acl(info.write_acl if write else info.read_acl)
                             .groups)


def public_block(meta: dict[str, str]) -> dict[str, bool]:
    try:
        found = json.loads(meta.get(PUBLIC_BLOCK.lower()) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def owner_rights(s3: Any, account: str) -> Identity:
    """The caller's identity with the owner's rights on `account` (for lookups of state an
    S3 decision needs, which the caller may not read itself)."""
    base = s3.acting or s3.ident or ANONYMOUS
    return base if base.acl_grants.get(account) == "admin" else \
        base.with_grant(account, "admin")


async def object_acl(s3: Any, account: str, bucket: str, key: str,
                     meta: dict[str, str]) -> tuple[Acl | None, bool]:
    """(the object's ACL or None, whether the object exists), read with the owner's rights
    (the version named by the request's versionId, if any)."""
    path = "/v1/" + quote(account, safe="") + "/" + quote(bucket, safe="") + "/" + \
        quote(key, safe="/")
    vid = s3.query.get("versionId") if key == s3.key and bucket == s3.bucket else None
    query = "" if not vid else "version-id=" + quote(vid, safe="")
    sub = sub_request(s3.request, "HEAD", path, CIMultiDict(), query=query)
    ident = owner_rights(s3, account)
    sub[AUTHENTICATED] = ident
    resp = await answer_of(s3.app, sub)
    close_answer(resp)
    if resp.status // 100 != 2:
        return None, False
    if overrides.has_entries(meta):
        found = Acl.load(await overrides.lookup(s3, ident, account, bucket, key,
                                                resp.headers.get("X-Timestamp")))
        if found is not None:
            return found, True
    return Acl.load(resp.headers.get(OBJECT_ACL)), True


# ---- claiming and releasing bucket names (CreateBucket, DeleteBucket) ----------------------

def already_exists(name: str) -> S3Error:
    return S3Error("BucketAlreadyExists", 409, "The requested bucket name is not available. "
                   "The bucket namespace is shared by all users of the system. Please "
                   "select a different name and try again.", BucketName=name)


def owned_by_you(name: str) -> S3Error:
    return S3Error("BucketAlreadyOwnedByYou", 409, "Your previous request to create the "
                   "named bucket succeeded and you already own it.", BucketName=name)


def _registry_failed(exc: RegistryError | None = None) -> S3Error:
    # The store's failure, not the client's: said once in the log, without a traceback
    # (the sub-request's own failure was logged where it happened).
    log.warning("s3 bucket registry unavailable: %s", exc)
    return S3Error("ServiceUnavailable", 503, "Please reduce your request rate.")


async def claim_bucket(s3: Any, name: str, new_acl: Acl) -> bool | None:
    """Make `name` the caller's account's (s3.account) in the registry before its container
    is made: BucketAlreadyExists when another account holds it, or when the caller's bucket
    exists with another ACL than asked; BucketAlreadyOwnedByYou when it exists as asked.
    True when this call claimed the name (CreateBucket releases it if the PUT fails); None
    when the caller's bucket exists as asked and the region (us-east-1) says that is a
    success, which changes nothing."""
    reg = registry_of(s3)
    mine = s3.account
    try:
        entry = await reg.lookup(s3.app, s3.request, name, fresh=True)
        if entry is not None and entry.account != mine:
            raise already_exists(name)
        head = await s3.swift("HEAD", name)
        close_answer(head)
        if head.status in (401, 403):
            raise already_exists(name)
        exists = head.status // 100 == 2
        claimed = False
        if entry is None:
            won = await reg.claim(s3.app, s3.request, name,
                                  Entry(mine, canonical_id(s3.ident) or ""))
            if won.account != mine:
                raise already_exists(name)
            claimed = not exists
    except RegistryError as exc:
        raise _registry_failed(exc) from None
    if exists:
        stored = Acl.load(head.headers.get(BUCKET_ACL))
        if stored is not None and _shape(stored) != _shape(new_acl):
            raise already_exists(name)  # as RGW: a re-create may not change the ACL
        if s3.conf.location == "us-east-1":
            return None  # S3's us-east-1 answers its owner's re-creation with a success
        raise owned_by_you(name)
    return claimed


def _shape(acl: Acl) -> list[tuple[str, str, str]]:
    """An ACL's grants with its owner's id made anonymous (two admins of one account)."""
    return sorted((k, "$owner" if w == acl.owner else w, p) for k, w, p in acl.grants)


async def release_bucket(s3: Any, name: str) -> None:
    """Drop the registry's entry for `name` if it is the caller's account's."""
    reg = registry_of(s3)
    try:
        entry = await reg.lookup(s3.app, s3.request, name, fresh=True)
        if entry is not None and entry.account == s3.account:
            await reg.release(s3.app, s3.request, name)
        await overrides.drop_all(s3, owner_rights(s3, s3.account), s3.account, name)
    except RegistryError as exc:
        raise _registry_failed(exc) from None


async def authorize_source(s3: Any, bucket: str, key: str) -> str:
    """Authorize reading a copy's source (CopyObject, UploadPartCopy): the account holding
    its bucket, which the copy's sub-requests read from."""
    account = s3.account if bucket == s3.bucket else await resolve(s3, bucket)
    expected = s3.request.headers.get("x-amz-source-expected-bucket-owner")
    if expected is not None:
        await check_expected_owner(s3, bucket, account, expected)
    action = "s3:GetObjectVersion" if "versionId=" in \
        s3.request.headers.get("X-Amz-Copy-Source", "") else "s3:GetObject"
    await authorize(s3, action, key, bucket, account)
    return account
