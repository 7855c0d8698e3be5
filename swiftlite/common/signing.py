"""Backend request signatures: storage servers answer only members of the cluster.

Every request a proxy or a storage node sends to a storage server carries

    X-Backend-Signature: <issue time, unix seconds>:<hex HMAC-SHA256>

over (method, request target incl. query, X-Timestamp or "", issue time), keyed with the
per-cluster `backend_secret` (the [DEFAULT] section of every config, or the environment
variable SWIFTLITE_BACKEND_SECRET). A signature is good for `backend_signature_window` seconds
(default 60) either side of the receiver's clock. The body is not covered (it streams); a
signature lifted off the wire only replays the same method, path and X-Timestamp within the
window, so keep backend traffic on a private network (see the README).

The process-wide signer is set once at startup (`configure`); fastclient pools and aiohttp
sessions made by `client.make_session` pick it up when they are created.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from typing import Any

HEADER = "X-Backend-Signature"
ENV = "SWIFTLITE_BACKEND_SECRET"
MIN_SECRET_LEN = 32
DEFAULT_WINDOW = 60.0
# Strings published in samples and docs (ours and Swift's): a cluster keyed with one is open.
_WELL_KNOWN = ("change-me", "changeme", "change_me", "secret", "password", "swiftlite",
               "example", "replace-me", "your-", "xxxx")


class SecretError(ValueError):
    """No usable secret: the server must not start."""


def check_secret(secret: str, name: str = "backend_secret") -> str:
    """`secret` if it is long and not a published sample, else SecretError saying why."""
    s = secret.strip()
    gen = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if not s:
        raise SecretError(f"{name} is not set; generate one with: {gen}")
    if len(s) < MIN_SECRET_LEN:
        raise SecretError(f"{name} is too short ({len(s)} characters, need at least "
                          f"{MIN_SECRET_LEN}); generate one with: {gen}")
    if is_placeholder(s) or len(set(s)) < 8:
        raise SecretError(f"{name} looks like a sample or placeholder value; "
                          f"generate one with: {gen}")
    return s


def is_placeholder(value: str) -> bool:
    """Whether `value` holds a string published in samples (REPLACE-ME, changeme, ...)."""
    low = value.lower()
    return any(w in low for w in _WELL_KNOWN)


class Signer:
    """Signs and checks backend requests with one secret; the keyed HMAC is built once."""

    __slots__ = ("_mac", "window")

    def __init__(self, secret: str, window: float = DEFAULT_WINDOW) -> None:
        # Keying HMAC hashes the key pads; copy() of a keyed object skips that per request.
        self._mac = hmac.new(check_secret(secret).encode(), digestmod=hashlib.sha256)
        self.window = window

    def _digest(self, method: str, target: str, x_timestamp: str, issued: str) -> str:
        mac = self._mac.copy()
        mac.update(f"{method}\n{target}\n{x_timestamp}\n{issued}".encode(
            "utf-8", "surrogateescape"))
        return mac.hexdigest()

    def sign(self, method: str, target: str, x_timestamp: str | None = None,
             now: float | None = None) -> str:
        """The header value for a request to `target` (path and query as sent on the wire)."""
        issued = str(int(time.time() if now is None else now))
        return issued + ":" + self._digest(method, target, x_timestamp or "", issued)

    def verify(self, method: str, target: str, x_timestamp: str | None, value: str | None,
               now: float | None = None) -> bool:
        if not value:
            return False
        issued, sep, digest = value.partition(":")
        if not sep or not issued.isdigit() or len(issued) > 12:
            return False
        skew = (time.time() if now is None else now) - int(issued)
        if not -self.window <= skew <= self.window:
            return False
        return hmac.compare_digest(
            digest, self._digest(method, target, x_timestamp or "", issued))


_current: Signer | None = None


def from_conf(conf: Mapping[str, Any]) -> Signer:
    """The signer `conf` (or, failing that, the environment) configures; SecretError if none."""
    secret = str(conf.get("backend_secret") or os.environ.get(ENV) or "")
    window = float(conf.get("backend_signature_window", DEFAULT_WINDOW))
    return Signer(secret, window)


def configure(conf: Mapping[str, Any]) -> Signer:
    """Set the process-wide signer from `conf`; SecretError (refuse to start) if unusable."""
    global _current
    _current = from_conf(conf)
    return _current


def current() -> Signer | None:
    """The process-wide signer; from SWIFTLITE_BACKEND_SECRET if `configure` was not called."""
    global _current
    if _current is None and os.environ.get(ENV):
        _current = from_conf({})
    return _current


def require() -> Signer:
    """The process-wide signer; SecretError (saying how to make a secret) if there is none."""
    signer = current()
    if signer is None:
        check_secret("")
        raise AssertionError("unreachable")
    return signer
