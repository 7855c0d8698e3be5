"""The request parser of every server: aiohttp's, bent where Swift's clients need it.

aiohttp's C parser (llhttp, strict) is fast and used for every request it accepts. Where it
refuses one that Swift serves, the request is parsed again by aiohttp's pure-Python parser
(several times slower), adapted here, and the connection returns to the C parser once that
request is read:

- Raw UTF-8 in the request line: curl sends a UTF-8 object name unencoded. The path
  arrives surrogate-escaped and is checked as UTF-8 by the servers.
- UTF-8 in a header name: Python's http.client (swiftclient, the `swift` CLI) sends
  `X-Object-Meta-👍` as raw UTF-8 bytes. A name may hold any byte >= 0x80 besides the
  token characters of RFC 9110; control characters, spaces, a ':' or DEL are still refused.
  Metadata names are then checked as UTF-8 and against the limits like any other.
- A method llhttp does not know, lower-case ones included: it reaches the servers exactly as
  sent (aiohttp's Python parser would upper-case it) and they answer 405, as Swift does;
  `put` is never taken for `PUT`.
- A request that arrived together with bytes that are not a request (a PUT body sent
  without Content-Length, or more body than it declared): the client gets that request's
  answer (Swift's 411), not a bare 400 for the stray bytes.

Every server uses this parser (installed by common/server.py's make_app).
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import http_exceptions, http_parser, web_protocol
from multidict import CIMultiDict, CIMultiDictProxy

# RFC 9110 token characters, and any byte >= 0x80 (UTF-8 names).
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z\x80-\xff]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # RFC 9110 5.5: CTLs but HTAB


class _Utf8NameHeaders(http_parser.HeadersParser):
    """aiohttp's header rules for requests (no line folding, no control characters in
    values, singletons once), except that a name may hold bytes >= 0x80."""

    def parse_headers(self, lines: list[bytes]) -> tuple[CIMultiDictProxy[str], tuple]:
        headers: CIMultiDict[str] = CIMultiDict()
        raw = []
        for line in lines:
            if not line:
                break
            bname, colon, bvalue = line.partition(b":")
            if not colon or not _NAME.fullmatch(bname):
                raise http_exceptions.InvalidHeader(bname if colon else line)
            bvalue = bvalue.strip(b" \t")
            value = bvalue.decode("utf-8", "surrogateescape")
            if _BAD_VALUE.search(value):
                raise http_exceptions.InvalidHeader(bvalue)
            name = bname.decode("utf-8", "surrogateescape")
            if name in headers and name.lower() in http_parser.SINGLETON_HEADERS:
                raise http_exceptions.BadHttpMessage(f"Duplicate '{name}' header found.")
            headers.add(name, value)
            raw.append((bname, bvalue))
        return CIMultiDictProxy(headers), tuple(raw)


class _Slow(http_parser.HttpRequestParserPy):  # type: ignore[misc,valid-type]
    """aiohttp's Python request parser with the changes above. It reaches into the parser's
    attributes (`_headers_parser`, its state between requests): tested against the aiohttp
    version pyproject.toml allows, in tests/unit/test_lenient_parser.py."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_parser = _Utf8NameHeaders(self.max_line_size, self.max_headers,
                                                self.max_field_size)

    def parse_message(self, lines: list[bytes]) -> Any:
        msg = super().parse_message(lines)
        # The token check passed: the method is ASCII. Keep it as sent, not upper-cased.
        sent = lines[0].split(b" ", 1)[0].decode("ascii")
        return msg if sent == msg.method else msg._replace(method=sent)

    def idle(self) -> bool:
        """Between requests, holding no bytes: another parser may take the next one."""
        return (self._payload_parser is None and not self._lines and not self._tail
                and not self._upgraded)


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
            result = self._impl.feed_data(data, *args, **kwargs)
        except http_exceptions.BadHttpMessage as exc:
            if isinstance(self._impl, _Slow):
                raise
            try:
                return self._first_then_garbage(data, exc, args, kwargs)
            except http_exceptions.BadHttpMessage:
                pass
            # Raw UTF-8 in the URL or a header name, a method llhttp does not know or a
            # lower-case one (the servers answer 405): the fast parser kept nothing of this
            # data (it raised), so the slow one parses it all.
            slow = _Slow(*self._args, **self._kwargs)
            try:
                result = slow.feed_data(data, *args, **kwargs)
            except http_exceptions.BadHttpMessage:
                raise exc from None
            self._impl = slow
        if isinstance(self._impl, _Slow) and _Fast is not _Slow and self._impl.idle():
            # That request is read: the next one on the connection gets the C parser again
            # (a proxy's pooled connection to a storage server carries many).
            self._impl = _Fast(*self._args, **self._kwargs)
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
