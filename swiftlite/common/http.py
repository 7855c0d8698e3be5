"""HTTP helpers shared by the proxy and the storage servers: paths, errors, request ids."""

from __future__ import annotations

import os
import re
import time
from urllib.parse import parse_qsl, quote, unquote_to_bytes

from aiohttp import web

# Request-scoped keys (typed keys where this aiohttp has them; plain strings before 3.14).
TXID = web.RequestKey("swiftlite.txid", str) if hasattr(web, "RequestKey") else "swiftlite.txid"


_txid_state = ["", 0]  # random prefix, counter


def _new_txid_prefix() -> None:
    _txid_state[0], _txid_state[1] = os.urandom(7).hex(), 0


_new_txid_prefix()
os.register_at_fork(after_in_child=_new_txid_prefix)  # workers must not share a sequence


def new_txid(extra: str | None = None) -> str:
    """Swift's shape (tx + 21 hex + - + 10 hex of the time); a per-process random prefix and
    a counter instead of a uuid4 (one getrandom syscall) per request. `extra` (a client's
    X-Trans-Id-Extra) is appended as Swift does: its first 32 characters, percent-quoted."""
    st = _txid_state
    st[1] = (st[1] + 1) & 0xFFFFFFF
    tx = f"tx{st[0]}{st[1]:07x}-{int(time.time()):010x}"
    if extra:
        tx += "-" + quote(extra[:32].encode("utf-8", "surrogateescape"), safe="")
    return tx


# A request id others give us goes verbatim into log lines and response headers: only
# characters that cannot start a new log line, split a field or inject markup, bounded.
_SAFE_TXID = re.compile(r"[A-Za-z0-9_.~%-]{1,160}")


def header_names_pattern(names: tuple[str, ...] | list[str] = (),
                         prefixes: tuple[str, ...] | list[str] = ()) -> re.Pattern[str]:
    """A pattern that finds, in a message's header names joined one per line
    (`"\n".join(headers)`: a name holds no line break), any of `names` whole or any name
    starting with one of `prefixes`, in any case: one search per message where a lookup per
    name, or a call or two per header, was the cost."""
    alternatives = [*(re.escape(n) + "$" for n in dict.fromkeys(names)),
                    *(re.escape(p) for p in dict.fromkeys(prefixes))]
    return re.compile("^(?:" + "|".join(alternatives) + ")", re.IGNORECASE | re.MULTILINE)


def safe_txid(value: str | None) -> str | None:
    return value if value and _SAFE_TXID.fullmatch(value) else None


def request_txid(headers) -> str:
    """The id of a request: the X-Trans-Id it came with if harmless (a proxy passes its own
    on to storage servers), else a new one."""
    return safe_txid(headers.get("X-Trans-Id")) or new_txid(headers.get("X-Trans-Id-Extra"))


def txid(request: web.Request) -> str:
    try:
        return request[TXID]  # the server sets it on every request it serves
    except KeyError:
        return safe_txid(request.headers.get("X-Trans-Id")) or "-"


ERROR_CONTENT_TYPE = "text/html; charset=UTF-8"


def error_body(reason: str) -> bytes:
    # A reason may quote client bytes that are not UTF-8 (surrogates): escaped, not a 500.
    return reason.encode("utf-8", "backslashreplace")


def error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    """A short error body: the reason a client (or operator) can act on, typed and framed as
    Swift's are (clients compare these bodies byte for byte): `error_body`, typed
    ERROR_CONTENT_TYPE."""
    return web.Response(status=status, body=error_body(reason), headers=headers,
                        content_type="text/html", charset="UTF-8")


# Swift's default HTML bodies, which some clients and tests compare byte for byte.
SWIFT_CONFLICT = ("<html><h1>Conflict</h1><p>There was a conflict when trying to complete "
                  "your request.</p></html>")


class HTTPError(Exception):
    """Raised from deep in a handler; the middleware turns it into `error(status, reason)`.

    `close`: the connection cannot carry another request (its framing is lost), so the
    answer says `Connection: close` and the server closes it after answering."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None,
                 close: bool = False):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers
        self.close = close

    def response(self) -> web.Response:
        resp = error(self.status, self.reason, self.headers)
        if self.close:
            resp.force_close()
        return resp


def method_not_allowed(allowed: str) -> HTTPError:
    """A 405, which always says what is allowed (RFC 9110), as Swift's controllers do."""
    return HTTPError(405, "Method Not Allowed", {"Allow": allowed})


def decode_path(raw_path: str) -> str:
    """Percent-decode a raw request path; invalid UTF-8 is a 400, not a crash later."""
    path = raw_path.split("?", 1)[0]
    try:
        return unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPError(400, "Invalid UTF8 in path") from None


def split_path(request: web.Request, minsegs: int, maxsegs: int,
               rest_with_last: bool = True) -> list[str | None]:
    """Split "/a/b/c..." into `maxsegs` parts; the last takes the remainder when asked.

    Missing trailing segments come back as None. Fewer than `minsegs` is a 400.
    """
    path = decode_path(request.raw_path)
    if not path.startswith("/"):
        raise HTTPError(400, "Invalid path")
    segs = path[1:].split("/", maxsegs - 1 if rest_with_last else -1)
    if not rest_with_last and len(segs) > maxsegs:
        raise HTTPError(400, "Invalid path")
    count = len(segs)
    if segs and segs[-1] == "" and count > minsegs and not (rest_with_last and count == maxsegs):
        segs.pop()
        count -= 1
    if count < minsegs or any(not s for s in segs[:minsegs]):
        raise HTTPError(400, "Invalid path")
    # A middle segment may not be empty ("/a//o" is not an object in container "").
    if any(not s for s in segs[: max(0, min(count, maxsegs) - 1)]):
        raise HTTPError(400, "Invalid path")
    out: list[str | None] = list(segs)
    out.extend([None] * (maxsegs - count))
    return out


def query_str(request: web.Request, name: str) -> str | None:
    """A query parameter, decoded strictly (bad UTF-8 is a 400; a NUL is fine, as in Swift:
    clients use "marker=name%00" as an inclusive bound)."""
    # request.query decodes bad UTF-8 to U+FFFD silently, so parse the raw string strictly.
    try:
        value = next((v for k, v in parse_qsl(request.rel_url.raw_query_string,
                                               keep_blank_values=True, errors="strict")
                      if k == name), None)
    except UnicodeDecodeError:
        raise HTTPError(400, f"Invalid UTF8 in query parameter {name}") from None
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPError(400, f"Invalid UTF8 in query parameter {name}") from None
    return value


def is_success(status: int) -> bool:
    return 200 <= status < 300


def csv_items(value: str) -> list[str]:
    """A comma-separated header's items (CORS headers, for Swift's and S3's front ends)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def add_vary(headers, value: str) -> None:
    """Add `value` to an answer's Vary header."""
    headers["Vary"] = f"{headers['Vary']}, {value}" if headers.get("Vary") else value
