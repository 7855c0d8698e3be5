"""Bucket default encryption: Put/Get/DeleteBucketEncryption, kept as container sysmeta, and
the default a write without SSE headers gets from it (encryption.py's for_write)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiohttp import web

from swiftlite.proxy.s3 import xml
from swiftlite.proxy.s3.bucket_settings import bucket_setting, sysmeta_value
from swiftlite.proxy.s3.context import S3Request
from swiftlite.proxy.s3.documents import parse_xml, xml_response
from swiftlite.proxy.s3.errors import S3Error, invalid_argument, malformed_xml
from swiftlite.proxy.s3.sse_keys import (
    DEFAULT_KMS_ID,
    KMS_ID,
    S3_INTERNAL_ID,
    Wanted,
    kms_not_found,
    store_of,
)

BUCKET_SSE = "X-Container-Sysmeta-S3api-Encryption"


async def bucket_default(s3: S3Request, bucket: str) -> Wanted | None:
    """The bucket's default encryption (PutBucketEncryption), from the cached container info."""
    info = await s3.proxy.container_info(s3.request, s3.account, bucket)
    value = sysmeta_value(info.meta, BUCKET_SSE)
    if not value:
        return None
    conf = json.loads(value)
    if conf.get("alg") == "AES256":
        return Wanted("s3", S3_INTERNAL_ID)
    return Wanted("kms", conf.get("kid") or DEFAULT_KMS_ID)


def no_config(bucket: str | None) -> S3Error:
    return S3Error("ServerSideEncryptionConfigurationNotFoundError", 404, "The server side "
                   "encryption configuration was not found", BucketName=bucket or "")


async def _store(s3: S3Request, body: bytes) -> dict[str, str]:
    """PutBucketEncryption: the default's algorithm and KMS key id, checked."""
    doc = parse_xml(body)
    if doc.tag != "ServerSideEncryptionConfiguration":
        raise malformed_xml()
    rules = doc.findall("Rule")
    if len(rules) != 1:
        raise malformed_xml()
    default = rules[0].find("ApplyServerSideEncryptionByDefault")
    if default is None:
        raise malformed_xml()
    alg = (xml.text(default, "SSEAlgorithm") or "").strip()
    kid = (xml.text(default, "KMSMasterKeyID") or "").strip()
    if alg not in ("AES256", "aws:kms", "aws:kms:dsse"):
        raise malformed_xml()
    if alg == "AES256" and kid:
        raise invalid_argument("a KMSMasterKeyID needs SSEAlgorithm aws:kms",
                               "KMSMasterKeyID", kid)
    if kid and not KMS_ID.fullmatch(kid):
        raise kms_not_found(kid)
    store = store_of(s3)
    if not store.configured:
        raise kms_not_found(S3_INTERNAL_ID if alg == "AES256" else kid)
    if kid:
        store.key(kid)
    value = json.dumps({"alg": "AES256" if alg == "AES256" else "aws:kms", "kid": kid})
    return {BUCKET_SSE: value}


def _document(conf: dict[str, str]) -> web.Response:
    root = xml.root("ServerSideEncryptionConfiguration")
    rule = xml.sub(root, "Rule")
    default = xml.sub(rule, "ApplyServerSideEncryptionByDefault")
    xml.sub(default, "SSEAlgorithm", conf["alg"])
    if conf.get("kid"):
        xml.sub(default, "KMSMasterKeyID", conf["kid"])
    xml.sub(rule, "BucketKeyEnabled", "false")
    return xml_response(root)


def _load(meta: Mapping[str, str]) -> dict[str, str] | None:
    value = meta.get(BUCKET_SSE)
    return json.loads(value) if value else None


bucket_setting("encryption", BUCKET_SSE, load=_load, missing=no_config, document=_document,
               store=_store)
