"""Object system metadata names shared by the proxy's features and the object servers.

Object sysmeta (`X-Object-Sysmeta-*`) is pipeline features' own state: an object server
stores it with the .data of a PUT, keeps it through POSTs and returns it on GET/HEAD; the
proxy's gatekeeper keeps it from clients both ways.
"""

OBJECT_SYSMETA = "x-object-sysmeta-"
# What a container listing shows instead of the stored body's size and ETag: an SLO lists its
# segments' total as its bytes (sent as a `swift_bytes=N` content-type parameter, so the
# container's and account's usage still count the manifest's own size: the segments are
# counted where they are stored, once), and its manifest's MD5 with the SLO's own ETag as a
# parameter ("<md5>; slo_etag=<etag>", which listings turn into a key of its own).
LISTING_BYTES = "X-Object-Sysmeta-Container-Update-Listing-Bytes"
OVERRIDE_ETAG = "X-Object-Sysmeta-Container-Update-Override-Etag"
# An object S3 encrypted (s3/encryption.py): its bytes are ciphertext, never copied as they are.
S3_SSE = "X-Object-Sysmeta-S3api-Sse"
