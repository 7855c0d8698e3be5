"""Raw UTF-8 in request paths, as Swift accepts it.

aiohttp's C parser (llhttp, strict) refuses any non-ASCII byte in the request line with its
own 400, but clients such as curl send a UTF-8 object name unencoded. The pure-Python parser
accepts it (the path arrives surrogate-escaped and is checked as UTF-8 by the proxy) but is
several times slower, so a connection uses the C parser until it meets such a request, then
re-parses that data with the Python one and keeps it.
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

    def feed_data(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._impl.feed_data(data, *args, **kwargs)
        except http_exceptions.BadHttpMessage as exc:
            if isinstance(self._impl, _Slow) or "url" not in str(exc).lower():
                raise
            # The fast parser kept nothing of this data (it raised): parse it all again.
            self._impl = _Slow(*self._args, **self._kwargs)
            return self._impl.feed_data(data, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._impl, name)


def install() -> None:
    """Make aiohttp's server connections (in this process) use the lenient parser."""
    if _Fast is not _Slow:
        web_protocol.HttpRequestParser = LenientRequestParser  # type: ignore[misc]
