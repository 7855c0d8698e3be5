"""Raw UTF-8 in request paths, as Swift accepts it.

aiohttp's C parser (llhttp, strict) refuses any non-ASCII byte in the request line with its
own 400, but clients such as curl send a UTF-8 object name unencoded. The pure-Python parser
accepts it (the path arrives surrogate-escaped and is checked as UTF-8 by the proxy) but is
several times slower, so a connection uses the C parser until it meets such a request, then
re-parses that data with the Python one and keeps it.

It also keeps a request that arrived together with bytes that are not a request (a PUT body
sent without Content-Length): the client gets that request's answer (Swift's 411), not a
bare 400 for the stray bytes.

Methods are case-sensitive: llhttp refuses a lower-case one, and aiohttp's Python parser would
upper-case it, so that `put` would be served as `PUT` (past any check for "PUT"). Here it
keeps the method as sent, and the servers answer 405 to one they do not serve, as Swift does.
Every server uses this parser (installed by common/server.py's make_app).
"""

from __future__ import annotations

from typing import Any

from aiohttp import http_exceptions, http_parser, web_protocol


class _Slow(http_parser.HttpRequestParserPy):  # type: ignore[misc,valid-type]
    """aiohttp's Python request parser, keeping the method as sent."""

    def parse_message(self, lines: list[bytes]) -> Any:
        msg = super().parse_message(lines)
        # The token check passed: the method is ASCII. Keep it as sent, not upper-cased.
        sent = lines[0].split(b" ", 1)[0].decode("ascii")
        return msg if sent == msg.method else msg._replace(method=sent)


_Fast: Any = getattr(http_parser, "HttpRequestParserC", None) or _Slow


class LenientRequestParser:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._impl = _Fast(*args, **kwargs)
        self._held = b""

    def feed_data(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        if self._held:
            data, self._held = self._held + data, b""
        try:
            return self._impl.feed_data(data, *args, **kwargs)
        except http_exceptions.BadHttpMessage as exc:
            if isinstance(self._impl, _Slow):
                raise
            try:
                return self._first_then_garbage(data, exc, args, kwargs)
            except http_exceptions.BadHttpMessage:
                pass
            # Raw UTF-8 in the URL, a method llhttp does not know or a lower-case one (the
            # servers answer 405): the fast parser kept nothing of this data (it raised), so
            # the slow one parses it all.
            slow = _Slow(*self._args, **self._kwargs)
            try:
                result = slow.feed_data(data, *args, **kwargs)
            except http_exceptions.BadHttpMessage:
                raise exc from None
            self._impl = slow
            return result

    def _first_then_garbage(self, data: bytes, exc: Exception, args: Any, kwargs: Any) -> Any:
        """A complete request followed by bytes that are no request (a body sent without
        Content-Length, or more body than it declared): the parser raised for both, losing
        the request. Answer the request (a 411, say), and hold the rest: it fails as the next
        request, if one ever comes."""
        head = data.find(b"\r\n\r\n") + 4
        if head < 4 or head >= len(data):
            raise exc
        fresh = _Fast(*self._args, **self._kwargs)
        try:
            result = fresh.feed_data(data[:head], *args, **kwargs)
            # The body it declared is its own (held with the rest, it left the request
            # waiting for bytes that had come already).
            end = head + _declared_length(result[0])
            if end > len(data):  # the parser raised before the body's end: not this case
                raise exc
            if end > head:
                fresh.feed_data(data[head:end], *args, **kwargs)
        except http_exceptions.BadHttpMessage:
            raise exc from None
        self._impl = fresh
        self._held = data[end:]
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._impl, name)


def _declared_length(messages: Any) -> int:
    """The Content-Length of the one request parsed (0 when none: its length is unknown)."""
    if len(messages) != 1:
        return 0
    value = messages[0][0].headers.get("Content-Length", "0")
    return int(value) if value.isascii() and value.isdigit() else 0


def install() -> None:
    """Make aiohttp's server connections (in this process) use the lenient parser."""
    web_protocol.HttpRequestParser = LenientRequestParser  # type: ignore[misc]
