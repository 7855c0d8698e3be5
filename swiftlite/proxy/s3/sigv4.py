"""AWS Signature Version 4: header auth and presigned (query) auth.

A SigV4 request signs a canonical form of itself: method, URI-encoded path, sorted
URI-encoded query, the named headers (lowercase, trimmed), their names, and the payload's
SHA-256 (or `UNSIGNED-PAYLOAD`, or a `STREAMING-*` marker whose chunks carry their own
signatures, chained from this one: payload.py). The string to sign binds that to the time and
the credential scope `date/region/service/aws4_request`; the key is an HMAC chain from the
secret over the scope. Times more than 15 minutes from ours are refused (header auth), as are
presigned URLs past X-Amz-Expires (at most 7 days). Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from calendar import timegm
from email.utils import mktime_tz, parsedate_tz
from urllib.parse import quote, unquote

from swiftlite.common.hmacs import HmacSha256, hmac_sha256
from swiftlite.proxy.s3.errors import S3Error, access_denied

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
MAX_SKEW = 15 * 60
MAX_EXPIRES = 7 * 24 * 3600
_keys: dict[tuple[str, str, str, str], bytes] = {}
_macs: dict[bytes, HmacSha256] = {}


def auth_error(message: str) -> S3Error:
    return S3Error("AuthorizationHeaderMalformed", 400, message)


def query_error(message: str) -> S3Error:
    return S3Error("AuthorizationQueryParametersError", 400, message)


def expiry_error(message: str) -> S3Error:
    return S3Error("AuthorizationQueryParametersError", 403, message)


def signature_mismatch(access_key: str) -> S3Error:
    return S3Error("SignatureDoesNotMatch", 403, "The request signature we calculated does "
                   "not match the signature you provided. Check your key and signing "
                   "method.", AWSAccessKeyId=access_key)


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    cache_key = (secret, date, region, service)
    key = _keys.get(cache_key)
    if key is None:
        key = ("AWS4" + secret).encode()
        for part in (date, region, service, "aws4_request"):
            key = hmac_sha256(key, part.encode())
        if len(_keys) > 4096:
            _keys.clear()
        _keys[cache_key] = key
    return key


def keyed(key: bytes) -> HmacSha256:
    """The HMAC of a signing key, keyed once (hmacs.py: why not hmac.digest)."""
    mac = _macs.get(key)
    if mac is None:
        if len(_macs) > 4096:
            _macs.clear()
        mac = _macs[key] = HmacSha256(key)
    return mac


def _enc(value: str, safe: str = "-_.~") -> str:
    return quote(value, safe=safe)


def parse_query(raw: str) -> list[tuple[str, str]]:
    pairs = []
    for item in raw.split("&"):
        if item:
            k, _, v = item.partition("=")
            pairs.append((unquote(k), unquote(v)))
    return pairs


def canonical_query(pairs: list[tuple[str, str]], skip: str | None = None) -> str:
    if not pairs:
        return ""
    return "&".join(f"{k}={v}" for k, v in sorted(
        (_enc(k), _enc(v)) for k, v in pairs if k != skip))


_PLAIN_PATH = re.compile(r"[A-Za-z0-9/_.~-]*")


def canonical_paths(raw_path: str) -> list[str]:
    """The path as S3 would encode it, and the path as sent when that differs."""
    path = raw_path.split("?", 1)[0] or "/"
    if _PLAIN_PATH.fullmatch(path):
        return [path]  # nothing to encode or decode (most keys)
    try:
        ours = _enc(unquote(path, errors="strict"), "-_.~/")
    except UnicodeDecodeError:
        return [path]
    return [ours] if ours == path else [ours, path]


# `AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`, as SDKs write it (the
# general parse below gives the same fields for it; anything else takes that parse).
_USUAL_HEADER = re.compile(ALGORITHM + r" Credential=([^,\s=]+), ?SignedHeaders=([^,\s=]+), ?"
                           r"Signature=([^,\s=]+)")
_STAMP = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z")
_stamps: dict[str, int | None] = {}


def _amz_time(value: str) -> int | None:
    """`20240102T030405Z` as a POSIX time (None if malformed); a busy proxy sees the same few
    stamps over and over, so they are remembered (time.strptime costs ~0.1 ms)."""
    when = _stamps.get(value, -1)
    if when != -1:
        return when
    m = _STAMP.fullmatch(value)
    when = None
    if m is not None:
        y, mo, d, h, mi, s = map(int, m.groups())
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61:
            when = timegm((y, mo, d, h, mi, s, 0, 0, 0))
    if len(_stamps) > 1024:
        _stamps.clear()
    _stamps[value] = when
    return when


class V4:
    """One SigV4-signed request, parsed: who claims to send it, and how to check that."""

    def __init__(self, method: str, raw_path: str, headers, pairs: list[tuple[str, str]],
                 now: float | None = None) -> None:
        self.method = method
        self.raw_path = raw_path
        self.headers = headers
        self.pairs = pairs
        now = time.time() if now is None else now
        query = dict(pairs)
        self.presigned = "X-Amz-Signature" in query or "X-Amz-Algorithm" in query
        if self.presigned:
            self._from_query(query, now)
        else:
            self._from_header(headers.get("Authorization", ""), now)

    def _scope(self, credential: str, err) -> None:
        parts = credential.split("/")
        if len(parts) < 5 or parts[-1] != "aws4_request":
            raise err("the Credential is mal-formed; expecting "
                      "\"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".")
        self.access_key = "/".join(parts[:-4])
        self.date, self.region, self.service = parts[-4], parts[-3], parts[-2]
        if not self.access_key:
            raise err("the Credential is mal-formed")
        if self.service != "s3":
            raise err(f"the Credential's service {self.service!r} is not s3")
        self.scope = "/".join(parts[-4:])

    def _from_header(self, value: str, now: float) -> None:
        if not value.startswith(ALGORITHM + " "):
            raise auth_error("Unsupported authorization type")
        usual = _USUAL_HEADER.fullmatch(value)
        if usual is not None:  # what every SDK sends: no loop over the items
            cred, signed, sig = usual.groups()
            fields = {"Credential": cred, "SignedHeaders": signed, "Signature": sig}
        else:
            fields = {}
            for item in value[len(ALGORITHM) + 1:].split(","):
                k, sep, v = item.strip().partition("=")
                if sep:
                    fields[k] = v
        for need in ("Credential", "SignedHeaders", "Signature"):
            if need not in fields:
                raise auth_error(f"The authorization header is malformed; missing {need}.")
        self._scope(fields["Credential"], auth_error)
        self.signed_headers = fields["SignedHeaders"].lower().split(";")
        self.signature = fields["Signature"]
        stamp = self.headers.get("X-Amz-Date")
        if stamp is not None:
            when = _amz_time(stamp)
        else:
            parsed = parsedate_tz(self.headers.get("Date", ""))
            when = mktime_tz(parsed) if parsed else None
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when)) if when else ""
        if when is None:
            raise access_denied("AWS authentication requires a valid Date or x-amz-date "
                                "header")
        self.amz_date = stamp
        if abs(now - when) > MAX_SKEW:
            raise S3Error("RequestTimeTooSkewed", 403, "The difference between the request "
                          "time and the current time is too large.",
                          RequestTime=stamp, ServerTime=time.strftime(
                              "%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                          MaxAllowedSkewMilliseconds=MAX_SKEW * 1000)
        if stamp[:8] != self.date:
            raise auth_error("The authorization header's date does not match the request's")
        payload = self.headers.get("X-Amz-Content-SHA256")
        if payload is None:
            raise invalid_request("Missing required header for this request: "
                                  "x-amz-content-sha256")
        self.payload_hash = payload

    def _from_query(self, query: dict[str, str], now: float) -> None:
        for need in ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                     "X-Amz-SignedHeaders", "X-Amz-Signature"):
            if need not in query:
                raise query_error(f"Query-string authentication version 4 requires the "
                                  f"X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, "
                                  f"X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires "
                                  f"parameters; {need} is missing.")
        if query["X-Amz-Algorithm"] != ALGORITHM:
            raise query_error("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
        self._scope(query["X-Amz-Credential"], query_error)
        when = _amz_time(query["X-Amz-Date"])
        if when is None:
            raise query_error("X-Amz-Date must be in the ISO8601 Long Format "
                              "\"yyyyMMdd'T'HHmmss'Z'\"")
        expires = query["X-Amz-Expires"]
        # Out of range, a presigned URL is refused as one past its expiry is (403), as the
        # s3-tests expect; the code still says why.
        if not expires.isdigit():
            raise expiry_error("X-Amz-Expires must be non-negative")
        if int(expires) > MAX_EXPIRES:
            raise expiry_error("X-Amz-Expires must be less than a week (in seconds) that "
                               "is; the maximum expires is 604800 seconds")
        if when - MAX_SKEW > now:
            raise access_denied("Request is not valid yet")
        if now > when + int(expires):
            raise access_denied("Request has expired")
        self.amz_date = query["X-Amz-Date"]
        self.signed_headers = query["X-Amz-SignedHeaders"].lower().split(";")
        self.signature = query["X-Amz-Signature"]
        self.payload_hash = self.headers.get("X-Amz-Content-SHA256", UNSIGNED)

    def _canonical_headers(self) -> str:
        out = []
        getall = getattr(self.headers, "getall", None)
        for name in self.signed_headers:
            values = getall(name, None) if getall is not None else [self.headers.get(name)]
            if not values or values[0] is None:
                if name == "host":
                    values = [""]
                else:
                    raise access_denied(f"Signed header {name!r} is missing")
            # Values trimmed, inner runs of spaces made one, repeats joined with commas.
            value = " ".join(values[0].split()) if len(values) == 1 else \
                ",".join(" ".join(v.split()) for v in values)
            out.append(f"{name}:{value}\n")
        return "".join(out)

    def verify(self, secret: str) -> bytes:
        """Raise unless the signature is `secret`'s; the signing key, for chunk signatures."""
        if "host" not in self.signed_headers:
            raise access_denied("The host header must be signed")
        key = signing_key(secret, self.date, self.region, self.service)
        headers = self._canonical_headers()
        signed = ";".join(self.signed_headers)
        query = canonical_query(self.pairs, "X-Amz-Signature" if self.presigned else None)
        for path in canonical_paths(self.raw_path):
            creq = "\n".join((self.method, path, query, headers, signed, self.payload_hash))
            sts = "\n".join((ALGORITHM, self.amz_date, self.scope,
                             hashlib.sha256(creq.encode("utf-8", "surrogateescape"))
                             .hexdigest()))
            want = keyed(key).hexdigest(sts.encode())
            if hmac.compare_digest(want.encode(),
                                   self.signature.encode("utf-8", "surrogateescape")):
                return key
        raise signature_mismatch(self.access_key)

    def chunk_signature(self, key: bytes, previous: str, data_sha256: str) -> str:
        sts = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", self.amz_date, self.scope, previous,
                         EMPTY_SHA256, data_sha256))
        return keyed(key).hexdigest(sts.encode())


def invalid_request(message: str) -> S3Error:
    return S3Error("InvalidRequest", 400, message)
