"""Every S3 resource module, imported so that its `@route` handlers are registered.

A new resource module (acl, policy, lock, ...) adds its line here."""

from swiftlite.proxy.s3 import (  # noqa: F401
    acl,
    attributes,
    bucket,
    bucket_encryption,
    cors,
    encryption,
    lifecycle,
    listing,
    lock,
    multipart,
    obj,
    ownership,
    policy,
    postform,
    tagging,
    torrent,
    usage,
    versions,
)
