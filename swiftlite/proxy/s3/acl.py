"""S3 ACLs: Get/Put Bucket and Object ACL, and the ACL a new bucket or object starts with.

An ACL is kept as sysmeta (access.Acl: the owner's canonical id `account:user` and its
grants), on the container for a bucket and on the object (each version its own) for an
object; access.py reads it to decide. Sources of an ACL, at most one per request:

- a canned `x-amz-acl` (private, public-read, public-read-write, authenticated-read,
  bucket-owner-read, bucket-owner-full-control, log-delivery-write);
- `x-amz-grant-{read,write,read-acp,write-acp,full-control}` headers, each a list of
  `id="account:user"`, `emailAddress="..."` or `uri="<group>"`;
- an AccessControlPolicy document (PutBucketAcl / PutObjectAcl only).

A grant by email is stored as the user's id: emails come from `email_<account>_<user>` lines
in the proxy's config (as tempauth's `user_<account>_<user>`). A grantee that is no known user
is refused (InvalidArgument; UnresolvableGrantByEmailAddress for an email). S3 ACLs are not
mirrored into Swift's container ACLs: a public-read bucket lets anyone list it, not read its
objects, and Swift's `.r:*` (the only anonymous read Swift has) would open every object in
it. So Swift's URLs stay closed to anonymous callers; S3's serve what the ACLs grant.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from swiftlite.proxy.response import close_answer
from swiftlite.proxy.s3 import access, documents, overrides, ownership, xml
from swiftlite.proxy.s3.access import ALL_USERS, AUTH_USERS, BUCKET_ACL, OBJECT_ACL, Acl
from swiftlite.proxy.s3.errors import S3Error, from_swift, invalid_argument, malformed_xml
from swiftlite.proxy.s3.routes import route

LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
GROUPS = (ALL_USERS, AUTH_USERS, LOG_DELIVERY)
XSI = "http://www.w3.org/2001/XMLSchema-instance"
GRANT_HEADERS = {"x-amz-grant-read": "READ", "x-amz-grant-write": "WRITE",
                 "x-amz-grant-read-acp": "READ_ACP", "x-amz-grant-write-acp": "WRITE_ACP",
                 "x-amz-grant-full-control": "FULL_CONTROL"}
CANNED = ("private", "public-read", "public-read-write", "authenticated-read",
          "bucket-owner-read", "bucket-owner-full-control", "log-delivery-write")
_GRANTEE = re.compile(r'\s*(id|emailaddress|uri)\s*=\s*"?([^",]*)"?\s*', re.I)


def invalid_acl(message: str = "The ACL you provided is not valid") -> S3Error:
    return invalid_argument(message)


def canned(name: str, owner: str, bucket_owner: str | None = None) -> Acl:
    """The ACL `x-amz-acl: name` means: its group or bucket-owner grants, then the owner's
    full control (the order S3 lists them in)."""
    if name not in CANNED:
        raise invalid_argument(f"The canned ACL {name} is not valid", "x-amz-acl", name)
    grants: list[tuple[str, str, str]] = []
    if name in ("public-read", "public-read-write"):
        grants.append(("group", ALL_USERS, "READ"))
        if name == "public-read-write":
            grants.append(("group", ALL_USERS, "WRITE"))
    elif name == "authenticated-read":
        grants.append(("group", AUTH_USERS, "READ"))
    elif name == "log-delivery-write":
        grants += [("group", LOG_DELIVERY, "WRITE"), ("group", LOG_DELIVERY, "READ_ACP")]
    grants.append(("id", owner, "FULL_CONTROL"))
    if bucket_owner is not None and bucket_owner != owner:
        if name == "bucket-owner-read":
            grants.append(("id", bucket_owner, "READ"))
        elif name == "bucket-owner-full-control":
            grants.append(("id", bucket_owner, "FULL_CONTROL"))
    return Acl(owner, grants)


def known_users(s3: Any) -> dict[str, Any]:
    auth = s3.conf.creds.auth
    return auth.users if auth is not None else {}


def emails(s3: Any) -> dict[str, str]:
    """email (lowercased) -> canonical id, from the config's `email_<account>_<user>`."""
    found = getattr(s3.conf, "user_emails", None)
    if found is None:
        found = {}
        for key, value in s3.conf.conf.items():
            if key.startswith("email_") and value.strip():
                account, _, user = key[len("email_"):].partition("_")
                if account and user:
                    found[value.strip().lower()] = f"{account}:{user}"
        s3.conf.user_emails = found
    return found


def display_name(s3: Any, user_id: str) -> str:
    return user_id


def grantee(s3: Any, kind: str, value: str) -> tuple[str, str]:
    """(`id` or `group`, who) for a grantee named by id, email or group URI."""
    kind = kind.lower()
    value = value.strip()
    if kind == "id":
        if value not in known_users(s3):
            raise invalid_acl("Invalid CanonicalUser id")
        return "id", value
    if kind in ("emailaddress", "email"):
        user = emails(s3).get(value.lower())
        if user is None:
            raise S3Error("UnresolvableGrantByEmailAddress", 400, "The e-mail address you "
                          "provided does not match any account on record.",
                          EmailAddress=value)
        return "id", user
    if kind == "uri":
        if value not in GROUPS:
            raise invalid_acl("Invalid group uri")
        return "group", value
    raise invalid_acl()


def from_headers(s3: Any, owner: str, bucket_owner: str | None = None) -> Acl | None:
    """The ACL a request's `x-amz-acl` or `x-amz-grant-*` headers give (None: neither)."""
    h = s3.request.headers
    name = h.get("x-amz-acl")
    granted = [(k.lower(), v) for k, v in h.items() if k.lower() in GRANT_HEADERS]
    if name is not None and granted:
        raise S3Error("InvalidRequest", 400, "Specifying both Canned ACLs and Header Grants "
                      "is not allowed")
    if name is not None:
        return canned(name.strip(), owner, bucket_owner)
    if not granted:
        return None
    grants: list[tuple[str, str, str]] = []
    for header, value in granted:
        for part in value.split(","):
            if not part.strip():
                continue
            m = _GRANTEE.fullmatch(part)
            if m is None:
                raise invalid_acl(f"Invalid grantee in {header}")
            kind, who = grantee(s3, m.group(1), m.group(2))
            grants.append((kind, who, GRANT_HEADERS[header]))
    return Acl(owner, grants)


def from_document(s3: Any, body: bytes, owner: str) -> Acl:
    """The ACL of an AccessControlPolicy document; its Owner, if named, must be `owner`."""
    try:
        doc = xml.parse(body)
    except xml.BadXml:
        raise malformed_xml() from None
    if doc.tag != "AccessControlPolicy":
        raise malformed_xml()
    named = doc.find("Owner")
    if named is not None:
        oid = xml.text(named, "ID")
        if oid is not None and oid.strip() != owner:
            raise access_denied_owner()
    grants: list[tuple[str, str, str]] = []
    acl_el = doc.find("AccessControlList")
    for g in (acl_el.findall("Grant") if acl_el is not None else []):
        perm = (xml.text(g, "Permission") or "").strip()
        who_el = g.find("Grantee")
        if perm not in access.PERMISSIONS or who_el is None:
            raise malformed_xml()
        kind = next((who_el.get(k) for k in who_el.keys() if k.endswith("type")), None)
        if kind == "CanonicalUser" or (kind is None and who_el.find("ID") is not None):
            got = grantee(s3, "id", xml.text(who_el, "ID") or "")
        elif kind == "AmazonCustomerByEmail" or \
                (kind is None and who_el.find("EmailAddress") is not None):
            got = grantee(s3, "emailaddress", xml.text(who_el, "EmailAddress") or "")
        elif kind == "Group" or (kind is None and who_el.find("URI") is not None):
            got = grantee(s3, "uri", xml.text(who_el, "URI") or "")
        else:
            raise malformed_xml()
        grants.append((got[0], got[1], perm))
    return Acl(owner, grants)


def access_denied_owner() -> S3Error:
    return S3Error("AccessDenied", 403, "Access Denied")


def document(s3: Any, acl: Acl) -> web.Response:
    """The AccessControlPolicy answer for `acl`."""
    root = xml.root("AccessControlPolicy")
    el = xml.sub(root, "Owner")
    xml.sub(el, "ID", acl.owner)
    xml.sub(el, "DisplayName", display_name(s3, acl.owner))
    grants = xml.sub(root, "AccessControlList")
    # Groups first, then users (each as stored): the order S3's canned ACLs list them in.
    for kind, who, perm in sorted(acl.grants, key=lambda g: g[0] != "group"):
        g = xml.sub(grants, "Grant")
        who_el = xml.sub(g, "Grantee")
        who_el.set("xmlns:xsi", XSI)
        if kind == "id":
            who_el.set("xsi:type", "CanonicalUser")
            xml.sub(who_el, "ID", who)
            xml.sub(who_el, "DisplayName", display_name(s3, who))
        else:
            who_el.set("xsi:type", "Group")
            xml.sub(who_el, "URI", who)
        xml.sub(g, "Permission", perm)
    return web.Response(status=200, body=xml.dump(root), content_type="application/xml")


def new_bucket_acl(s3: Any) -> Acl:
    """The ACL a CreateBucket asks for (private unless its headers say otherwise)."""
    owner = access.canonical_id(s3.ident) or ""
    return from_headers(s3, owner) or Acl.private(owner)


def new_bucket_headers(acl: Acl) -> dict[str, str]:
    return {BUCKET_ACL: acl.dump()}


def same_grants(a: Acl, b: Acl) -> bool:
    return sorted(a.grants) == sorted(b.grants)


async def bucket_acl(s3: Any) -> Acl:
    """The request's bucket's ACL (for a bucket with none stored: its owner's private one)."""
    info = await s3.proxy.container_info(s3.request, s3.account, s3.bucket)
    if info.status == 404:
        from swiftlite.proxy.s3.errors import no_such_bucket
        raise no_such_bucket(s3.bucket or "")
    meta = {k.lower(): v for k, v in info.meta.items()}
    found = Acl.load(meta.get(BUCKET_ACL.lower()))
    if found is not None:
        return found
    owner = access.canonical_id(s3.ident) if await access.owns(s3, s3.account) else None
    return Acl.private(owner or s3.account)


async def object_owner_acl(s3: Any, bucket_owner: str | None = None) -> Acl:
    """The ACL a new object written by this request starts with (its writer owns it, unless
    the bucket's ownership controls give it to the bucket owner)."""
    writer = access.canonical_id(s3.ident) or "anonymous"
    if bucket_owner is None:
        bucket_owner = (await bucket_acl(s3)).owner
    return from_headers(s3, writer, bucket_owner) or Acl.private(writer)


def object_acl_of(headers: Any, bucket_owner: str) -> Acl:
    return Acl.load(headers.get(OBJECT_ACL)) or Acl.private(bucket_owner)


# ---- the ACL a new object starts with (PutObject, CopyObject, CreateMultipartUpload) -------

async def object_create_headers(s3: Any) -> dict[str, str]:
    """Object sysmeta for the ACL of the object this request writes: none for the bucket
    owner's write without ACL headers (the default: private, the bucket owner's)."""
    h = s3.request.headers
    asked = "x-amz-acl" in h or any(k.lower() in GRANT_HEADERS for k in h)
    if not asked and s3.acting is None and s3.ident is not None:
        return {}  # the owner's own write (access.authorize elevates everyone else)
    meta = await ownership.bucket_meta(s3)
    bucket_owner = (Acl.load(meta.get(BUCKET_ACL.lower())) or
                    Acl.private(access.canonical_id(s3.ident) or "")).owner
    mode = ownership.mode_of(meta)
    writer = access.canonical_id(s3.ident) or "anonymous"
    new = from_headers(s3, writer, bucket_owner)
    ownership.check_new_acl(meta, new, asked, bucket_owner, h.get("x-amz-acl"))
    if mode == "BucketOwnerEnforced" or (
            mode == "BucketOwnerPreferred" and
            h.get("x-amz-acl") == "bucket-owner-full-control"):
        return {OBJECT_ACL: Acl.private(bucket_owner).dump()}
    if new is None:
        if writer == bucket_owner:
            return {}
        new = Acl.private(writer)
    return {OBJECT_ACL: new.dump()}


# ---- Get/Put Bucket and Object ACL ---------------------------------------------------------

@route("bucket", "GET", "acl")
@route("bucket", "HEAD", "acl")
async def get_bucket_acl(s3: Any) -> web.StreamResponse:
    return document(s3, await bucket_acl(s3))


@route("bucket", "PUT", "acl")
async def put_bucket_acl(s3: Any) -> web.StreamResponse:
    meta = await ownership.bucket_meta(s3)
    current = await bucket_acl(s3)
    new = await requested_acl(s3, current.owner)
    ownership.check_new_acl(meta, new, True, current.owner, s3.request.headers.get("x-amz-acl"))
    await s3.swift_ok("POST", s3.bucket, headers={BUCKET_ACL: new.dump()})
    return web.Response(status=200)


async def requested_acl(s3: Any, owner: str, bucket_owner: str | None = None) -> Acl:
    """The ACL a Put*Acl asks for: by its headers or by its document (one of them)."""
    body = await documents.small_body(s3)
    by_headers = from_headers(s3, owner, bucket_owner)
    if by_headers is not None:
        if body.strip():
            raise S3Error("UnexpectedContent", 400, "This request does not support content")
        return by_headers
    if not body.strip():
        raise S3Error("MissingSecurityHeader", 400, "Your request was missing a required "
                      "header", MissingHeaderName="x-amz-acl")
    return from_document(s3, body, owner)


@route("object", "GET", "acl")
@route("object", "HEAD", "acl")
async def get_object_acl(s3: Any) -> web.StreamResponse:
    found, _ = await stored_object_acl(s3)
    return document(s3, found)


@route("object", "PUT", "acl")
async def put_object_acl(s3: Any) -> web.StreamResponse:
    current, head = await stored_object_acl(s3)
    meta = await ownership.bucket_meta(s3)
    bucket_owner = (Acl.load(meta.get(BUCKET_ACL.lower())) or current).owner
    new = await requested_acl(s3, current.owner, bucket_owner)
    ownership.check_new_acl(meta, new, True, bucket_owner, s3.request.headers.get("x-amz-acl"))
    failed = await overrides.store(s3, access.owner_rights(s3, s3.account), s3.account,
                                   s3.bucket, s3.key, head.headers.get("X-Timestamp", ""),
                                   new.dump(), overrides.has_entries(meta))
    if failed:
        raise from_swift(failed, s3.bucket, s3.key)
    return web.Response(status=200)


async def stored_object_acl(s3: Any) -> tuple[Acl, Any]:
    """The request's object's ACL (its version's, with versionId), and its HEAD answer."""
    from swiftlite.proxy.s3.object_request import version_query
    head = await s3.swift_ok("HEAD", s3.bucket, s3.key, err_key=s3.key,
                             query=version_query(s3.query.get("versionId")))
    close_answer(head)
    meta = await ownership.bucket_meta(s3)
    acl = None
    if overrides.has_entries(meta):
        acl = Acl.load(await overrides.lookup(
            s3, access.owner_rights(s3, s3.account), s3.account, s3.bucket or "",
            s3.key or "", head.headers.get("X-Timestamp")))
    if acl is None:
        acl = Acl.load(head.headers.get(OBJECT_ACL))
    if acl is None:
        acl = Acl.private((await bucket_acl(s3)).owner)
    return acl, head


# ---- multipart uploads: the object's ACL and who initiated ---------------------------------

INITIATOR = "X-Object-Sysmeta-S3-Initiator"


async def upload_headers(s3: Any) -> dict[str, str]:
    """Sysmeta for an upload's marker: the future object's ACL (CompleteMultipartUpload
    writes it with the object) and the initiator's id (ListMultipartUploads shows it)."""
    out = await object_create_headers(s3)
    out[INITIATOR] = access.canonical_id(s3.ident) or "anonymous"
    return out


def upload_owner(marker_headers: Any) -> str | None:
    """Who will own an upload's object (ListParts' Owner): its ACL's owner, as ownership
    controls decided when it began; else (the owner's own upload) who initiated it."""
    found = Acl.load(marker_headers.get(OBJECT_ACL))
    return found.owner if found is not None else marker_headers.get(INITIATOR)


async def initiators(s3: Any, hidden: str, markers: list[str]) -> list[str | None]:
    """Who initiated each upload (None: unknown), read from the markers' sysmeta."""
    if not markers:
        return []
    limit = asyncio.Semaphore(8)

    async def one(name: str) -> str | None:
        async with limit:
            head = await s3.swift("HEAD", hidden, name, reserved=True)
            close_answer(head)
            return head.headers.get(INITIATOR) if head.status // 100 == 2 else None
    return list(await asyncio.gather(*(one(m) for m in markers)))
