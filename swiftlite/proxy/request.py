"""What the pipeline knows about a request: its parsed /v1 path, who sent it, overrides.

Keys live on the aiohttp request; `request.clone()` copies them, so a sub-request made by a
middleware carries the caller's identity unless the middleware replaces it.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple
from urllib.parse import quote, unquote, unquote_to_bytes

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from swiftlite.common import constraints
from swiftlite.common.http import HTTPError
from swiftlite.common.runtime.aiohttp_seams import request_state

# Set by the auth middleware: the Identity of a valid token (absent: anonymous) and the
# object that decides what that identity may do (absent: nothing is allowed).
IDENTITY = "swiftlite.identity"
AUTHORIZER = "swiftlite.authorizer"
# Set by a front end that authenticated the caller itself (S3's signatures): the Identity
# the auth middleware takes in place of a token's. A request key, so no client can set it.
AUTHENTICATED = "swiftlite.authenticated"
# A sub-request's body (bytes or an async iterator of chunks) instead of the client's.
BODY = "swiftlite.body"
# Memo of api_path(): (raw_path, ApiPath).
_PATH = "swiftlite.path"
# Headers a feature wants sent with the object servers' GET/HEAD of this request (say, an
# SLO's X-Backend-Etag-Is-At): a request key, so no client header can ever set them.
BACKEND_GET_HEADERS = "swiftlite.backend_get_headers"
# The same for an object PUT (say, S3's If-Match, judged by the object servers).
BACKEND_PUT_HEADERS = "swiftlite.backend_put_headers"
# Set on sub-requests a middleware makes for itself (no client body, no feature re-entry).
INTERNAL = "swiftlite.internal"
# Set by a feature on its own sub-requests that address the reserved namespace (names
# starting with NUL, see common/reserved.py): a request key, so no client can ever set it.
ALLOW_RESERVED = "swiftlite.allow_reserved"
# The X-Timestamp a feature chose for the write a sub-request makes (a version's id is its
# timestamp), instead of a fresh one.
TIMESTAMP = "swiftlite.timestamp"

API_VERSIONS = ("v1", "v1.0")
# Raw paths already parsed (not for the reserved namespace) -> ApiPath or None: a parse is a
# pure function of the path, and decoding and checking every name again was about 5% of a
# proxy serving cached objects, whose clients ask for the same hot paths over and over.
MAX_PARSED = 16384
MAX_KEPT_PATH = 512
_parsed: dict[str, ApiPath | None] = {}
_UNSEEN = object()


class ApiPath(NamedTuple):
    """A parsed /v1 path. Immutable (the parse cache hands one object to many requests), and
    a tuple rather than a frozen dataclass: built in one call, not one per field."""

    version: str
    account: str
    container: str | None = None
    obj: str | None = None

    @property
    def kind(self) -> str:
        return "object" if self.obj is not None else \
            "container" if self.container is not None else "account"


def unauthorized(account: str, reason: str = "Unauthorized") -> HTTPError:
    """401 with Swift's challenge; the realm is the quoted account, so a hostile name cannot
    split the header."""
    return HTTPError(401, reason,
                     {"WWW-Authenticate": f'Swift realm="{quote(account, safe="")}"'})


def _bad_utf8() -> HTTPError:
    return HTTPError(412, "Invalid UTF8 or contains NULL")


def decode_raw_path(raw_path: str, reserved: bool = False) -> str:
    """Percent-decoded path; invalid UTF-8 or NUL is Swift's 412 (a NUL is let through
    for `reserved`: the checks of each name decide)."""
    text = raw_path.split("?", 1)[0]
    if "%" in text or not text.isascii():  # else nothing to decode (most paths)
        try:
            # Raw non-ASCII bytes in the request line reach us surrogate-escaped.
            raw = text.encode("utf-8", "surrogateescape")
            text = unquote_to_bytes(raw).decode("utf-8")
        except UnicodeError:
            raise _bad_utf8() from None
    if "\x00" in text and not reserved:
        raise _bad_utf8()
    return text


def api_path(request: web.Request) -> ApiPath | None:
    """The /v1/account[/container[/object]] a request addresses; None for other paths.

    Raises Swift's 412 for bad UTF-8, NUL or a version-only path and 400 for bad names."""
    # Every feature asks: parsed once per request (a sub-request has its own path, so the
    # memo says which path it is for), and once per path while it stays in _parsed.
    state = request_state(request)
    raw_path = request.raw_path
    memo = state.get(_PATH)
    if memo is not None and memo[0] == raw_path:
        return memo[1]
    reserved = bool(state.get(ALLOW_RESERVED))
    # Only short paths without a query are kept: bounded memory whatever clients send.
    if not reserved and len(raw_path) <= MAX_KEPT_PATH and "?" not in raw_path:
        parsed = _parsed.get(raw_path, _UNSEEN)
        if parsed is _UNSEEN:
            parsed = _parse(raw_path, False)
            if len(_parsed) >= MAX_PARSED:
                _parsed.clear()
            _parsed[raw_path] = parsed
    else:
        parsed = _parse(raw_path, reserved)
    state[_PATH] = (raw_path, parsed)
    return parsed


# A path of ASCII names with nothing to decode or refuse on sight (no "%", "?", NUL, empty
# account, non-ASCII byte): most paths. _parse reads it in one match; the rest take the long
# way, which decodes and checks each name.
_PLAIN_PATH = re.compile(r"/(v1(?:\.0)?)/([^/%?\x00\x80-\U0010ffff]+)"
                         r"(?:/([^/%?\x00\x80-\U0010ffff]*)(?:/([^%?\x00\x80-\U0010ffff]*))?)?")


def _parse(raw_path: str, reserved: bool) -> ApiPath | None:
    plain = _PLAIN_PATH.fullmatch(raw_path)
    if plain is not None:
        version, acct, cont, name = plain.groups()
        # The checks check_account/container/object make, for ASCII names without NUL.
        if len(acct) <= constraints.MAX_ACCOUNT_NAME_LENGTH and (cont is None or (
                len(cont) <= constraints.MAX_CONTAINER_NAME_LENGTH and
                cont != "." and cont != "..")) and (not name or (
                len(name) <= constraints.MAX_OBJECT_NAME_LENGTH and
                "/./" not in f"/{name}/" and "/../" not in f"/{name}/")):
            if cont == "":
                if name is None:
                    return ApiPath(version, acct)  # "/v1/a/" is the account
            elif name == "":
                return ApiPath(version, acct, cont)  # "/v1/a/c/" is the container
            else:
                return ApiPath(version, acct, cont, name)
    return _parse_names(raw_path, reserved)


def _parse_names(raw_path: str, reserved: bool) -> ApiPath | None:
    first = raw_path.split("/", 2)[1] if raw_path.startswith("/") else ""
    if first not in API_VERSIONS and ("%" not in first or
                                      unquote(first, errors="replace") not in API_VERSIONS):
        return None  # not Swift's (an S3 path, say): its own front end judges its bytes
    path = decode_raw_path(raw_path, reserved)
    segs = path.split("/", 4)
    if len(segs) < 2 or segs[1] not in API_VERSIONS:
        parsed = None
    else:
        if len(segs) < 3 or (not segs[2] and len(segs) == 3):
            raise HTTPError(412, "Bad URL")  # "/v1", "/v1/": no account
        acct = segs[2]
        cont = segs[3] if len(segs) > 3 else None
        name = segs[4] if len(segs) > 4 else None
        if cont == "" and name is None:
            cont = None  # "/v1/a/" is the account
        elif name == "":
            name = None  # "/v1/a/c/" is the container
        if acct == "" or cont == "":
            raise HTTPError(404, "Not Found")  # "/v1//c/o", "/v1/a//o": nothing is there
        for check, value in ((constraints.check_account, acct),
                             (constraints.check_container, cont),
                             (constraints.check_object, name)):
            if value is not None:
                bad = check(value, reserved)
                if bad:
                    raise HTTPError(400, bad)
        parsed = ApiPath(segs[1], acct, cont, name)
    return parsed


def clone(request: web.Request, **changes: Any) -> web.Request:
    """`request.clone()`, but header bytes that are not UTF-8 (which aiohttp cannot re-encode)
    are the client's 400, not a 500."""
    try:
        return request.clone(**changes)
    except UnicodeEncodeError:
        raise HTTPError(400, "Invalid UTF8 in a header") from None


async def answer_of(app: Any, sub: web.Request) -> web.StreamResponse:
    """A feature's sub-request sent down the pipeline, a refusal raised below (HTTPError)
    as its answer: the feature looks at one status whichever way the answer came."""
    try:
        return await app(sub)
    except HTTPError as exc:
        return exc.response()


# What a feature's sub-request carries of its caller's request when it acts as the caller:
# the credentials, and the Referer that container ACLs may grant on.
CALLER_HEADERS = ("X-Auth-Token", "X-Storage-Token", "X-Service-Token", "Referer")


def caller_headers(request: web.Request, extra: tuple[str, ...] = ()) -> CIMultiDict[str]:
    """The caller's CALLER_HEADERS (and `extra` ones) that `request` has."""
    h = request.headers
    return CIMultiDict((k, h[k]) for k in CALLER_HEADERS + extra if k in h)


async def send_sub(app: Any, request: web.Request, method: str, path: str,
                   headers: Any = None, body: Any = None, query: str = "",
                   reserved: bool = False,
                   state: dict[str, Any] | None = None) -> web.StreamResponse:
    """A feature's sub-request to `path` (already quoted) down the rest of the pipeline
    (`app`) as the caller, and its answer (answer_of). `headers` default to the caller's
    credentials; `reserved` lets it into the reserved namespace; `state` is set on it."""
    sub = sub_request(request, method, path,
                      caller_headers(request) if headers is None else headers, body, query)
    if reserved:
        sub[ALLOW_RESERVED] = True
    if state:
        for key, value in state.items():
            sub[key] = value
    return await answer_of(app, sub)


def sub_request(request: web.Request, method: str, path: str,
                headers: Any = None, body: Any = None, query: str = "") -> web.Request:
    """A request a middleware sends down the pipeline: `path` is the already-quoted path."""
    url = URL.build(path=path, query_string=query, encoded=True)
    sub = clone(request, method=method, rel_url=url,
                        headers=headers if headers is not None else request.headers)
    state = request_state(sub)
    state[INTERNAL] = True
    state[BODY] = body if body is not None else b""
    return sub
