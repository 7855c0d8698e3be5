"""The S3 front end: S3's REST API over the same accounts, containers and objects.

A bucket is a container of the requester's account, an object is an object. The `s3api`
middleware (middleware.py) tells S3 requests apart (SigV4/SigV2 header or presigned query),
checks the signature with the user's tempauth password or an admin-made key pair bound to
that user (credentials.py, keys.py), and answers each
operation with Swift-form sub-requests sent down the rest of the pipeline as that user
(request.AUTHENTICATED), so ACLs, quotas, versioning and large objects apply to S3 as to
Swift. One module per concern: errors, xml, sigv4, sigv2, credentials, keys, bucket, listing,
obj, multipart.
"""
