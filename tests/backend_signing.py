"""The test process as a member of the cluster: one backend secret, requests signed.

Imported first by tests/conftest.py. Storage servers refuse unsigned requests, and many tests
talk to them directly (aiohttp, http.client, urllib) or start them from hand-written configs.
So the secret goes into the environment (every server, daemon and `swiftlite up` started by a
test inherits it; a config's own backend_secret still wins), and the test process's HTTP
clients sign each request to a storage path unless it already carries a signature (tests of
bad signatures set their own; tests of unsigned requests use a raw socket). Requests to the
proxy's public API go unsigned, as a real client's do (its gatekeeper strips X-Backend-*).
"""

from __future__ import annotations

import http.client
import os
import secrets

import aiohttp

from swiftlite.common import signing

os.environ.setdefault(signing.ENV, secrets.token_urlsafe(32))
SIGNER = signing.configure({})
_HEADER = signing.HEADER.encode().lower()
_PUBLIC = ("/v1/", "/auth", "/info")


def _wanted(target: str) -> bool:
    return not target.startswith(_PUBLIC)


async def _sign_aiohttp(req: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType):
    if signing.HEADER not in req.headers and _wanted(req.url.raw_path):
        req.headers[signing.HEADER] = SIGNER.sign(req.method, req.url.raw_path_qs,
                                                  req.headers.get("X-Timestamp"))
    return await handler(req)


_session_init = aiohttp.ClientSession.__init__


def _signing_session_init(self, *args, middlewares=(), **kwargs) -> None:
    _session_init(self, *args, middlewares=(*middlewares, _sign_aiohttp), **kwargs)


_endheaders = http.client.HTTPConnection.endheaders


def _signing_endheaders(self, *args, **kwargs):
    # _buffer holds the request line and header lines put so far (bytes).
    method, target, ts = "", "", None
    for i, line in enumerate(self._buffer):
        if i == 0:
            method, target = line.decode("latin-1").split(" ")[:2]
            continue
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == _HEADER:
            break
        if name == b"x-timestamp":
            ts = value.strip().decode("latin-1")
    else:
        if method and _wanted(target):
            self.putheader(signing.HEADER, SIGNER.sign(method, target, ts))
    return _endheaders(self, *args, **kwargs)


def install() -> None:
    aiohttp.ClientSession.__init__ = _signing_session_init  # type: ignore[method-assign]
    http.client.HTTPConnection.endheaders = _signing_endheaders  # type: ignore[method-assign]


def raw_signature(method: str, target: str, x_timestamp: str | None = None) -> str:
    """A header line signing a request written by hand on a socket."""
    return f"{signing.HEADER}: {SIGNER.sign(method, target, x_timestamp)}\r\n"
