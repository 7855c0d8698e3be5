"""The S3 front end: S3's REST API over the same accounts, containers and objects.

A bucket is a container of its owner's account (bucket names are global: registry.py), an
object is an object. The `s3api` middleware (middleware.py) tells S3 requests apart
(SigV4/SigV2 header or presigned query, or anonymous), checks the signature with the user's
tempauth password or an admin-made key pair bound to that user (credentials.py, keys.py), has
access.py decide whether the caller may do what it asks, and answers each operation with
Swift-form sub-requests sent down the rest of the pipeline as that user
(request.AUTHENTICATED; as the bucket's owner when an S3 ACL or policy let a non-owner in), so
quotas, versioning and large objects apply to S3 as to Swift. One module per concern: errors,
xml, sigv4, sigv2, credentials, keys, registry, access, acl, ownership, bucket, listing, obj,
multipart.
"""
