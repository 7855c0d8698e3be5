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

# Object sysmeta a feature may change after the PUT: a POST carrying any of it is a *patch*
# (the object servers change those keys only, an empty value removing one, and keep the
# user metadata and the rest as they are), and any other POST keeps it as it is. Everything
# else in object sysmeta is fixed at PUT. S3 keeps tags, retention and legal holds here.
MUTABLE_SYSMETA = "x-object-sysmeta-mutable-"
# Retention of one object (a version): until then (epoch seconds) it cannot be deleted, by
# anyone in COMPLIANCE mode, and in GOVERNANCE mode only by a request that bypasses it
# (BYPASS_GOVERNANCE, which only the cluster's own features send); a legal hold (`ON`)
# blocks deletion until it is lifted.
RETENTION_MODE = "X-Object-Sysmeta-Mutable-Retention-Mode"
RETAIN_UNTIL = "X-Object-Sysmeta-Mutable-Retain-Until"
LEGAL_HOLD = "X-Object-Sysmeta-Mutable-Legal-Hold"
BYPASS_GOVERNANCE = "X-Backend-Bypass-Governance-Retention"
# On a container whose versions may be under retention: object versioning cannot be turned
# off there (proxy/middleware/object_versioning.py), so no version leaves its protection.
VERSIONS_LOCKED = "X-Container-Sysmeta-Versions-Locked"


def is_patch(headers) -> bool:
    """Whether a POST's headers make it a patch of mutable sysmeta."""
    return any(k.lower().startswith(MUTABLE_SYSMETA) for k in headers)


def retention_refusal(headers, bypass_governance: bool, now: float) -> str | None:
    """Why an object with these headers may not be deleted now; None: it may."""
    if (headers.get(LEGAL_HOLD) or "").upper() == "ON":
        return "The object is under a legal hold"
    until = headers.get(RETAIN_UNTIL)
    if not until:
        return None
    try:
        if float(until) <= now:
            return None
    except ValueError:
        return None
    mode = (headers.get(RETENTION_MODE) or "").upper()
    if mode == "GOVERNANCE" and bypass_governance:
        return None
    return f"The object is under {mode or 'COMPLIANCE'} retention"
