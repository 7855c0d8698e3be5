"""Raw UTF-8 in request paths, as Swift accepts it.

aiohttp's C parser (llhttp, strict) refuses any non-ASCII byte in the request line with its
own 400, but clients such as curl send a UTF-8 object name unencoded. The pure-Python parser
accepts it (the path arrives surrogate-escaped and is checked as UTF-8 by the proxy) but is
several times slower, so a connection uses the C parser until it meets such a request, then
re-parses that data with the Python one and keeps it.

It also keeps a request that arrived together with bytes that are not a request (a PUT body
sent without Content-Length): the client gets that request's answer (Swift's 411), not a
bare 400 for the stray bytes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import http_exceptions, http_parser, web_protocol

_Fast = http_parser.HttpRequestParser
_Slow = http_parser.HttpRequestParserPy


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
            # Raw UTF-8 in the URL, a method llhttp does not know (Swift answers 405): the
            # fast parser kept nothing of this data (it raised), so the slow one parses it all.
            slow = _Slow(*self._args, **self._kwargs)
            try:
                result = slow.feed_data(data, *args, **kwargs)
            except http_exceptions.BadHttpMessage:
                raise exc from None
            self._impl = slow
            return result

    def _first_then_garbage(self, data: bytes, exc: Exception, args: Any, kwargs: Any) -> Any:
        """A complete request followed by bytes that are no request (a body sent without
        Content-Length): the parser raised for both, losing the request. Answer the request
        (a 411, say), and hold the rest: it fails as the next request, if one ever comes."""
        end = data.find(b"\r\n\r\n")
        if end < 0 or end + 4 >= len(data):
            raise exc
        fresh = _Fast(*self._args, **self._kwargs)
        try:
            result = fresh.feed_data(data[:end + 4], *args, **kwargs)
        except http_exceptions.BadHttpMessage:
            raise exc from None
        self._impl = fresh
        self._held = data[end + 4:]
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._impl, name)


def install() -> None:
    """Make aiohttp's server connections (in this process) use the lenient parser."""
    if _Fast is not _Slow:
        web_protocol.HttpRequestParser = LenientRequestParser  # type: ignore[misc]
