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

A request body whose framing is broken (a chunk size that is not hex or does not fit 64 bits,
chunk data not followed by CRLF) fails at once: reading the body raises `MalformedBody` (a
400 that closes the connection), nothing more is read from the connection, and it closes
after the answer. aiohttp alone would leave the handler waiting for the rest of the body.

Every server uses this parser (installed by common/runtime/server.py's make_app).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import http_exceptions, http_parser
from aiohttp.streams import EMPTY_PAYLOAD
from multidict import CIMultiDict, CIMultiDictProxy

from swiftlite.common.http import HTTPError
from swiftlite.common.runtime import aiohttp_seams

_NOTHING: tuple[tuple, bool, bytes] = ((), False, b"")
# RFC 9110 token characters, and any byte >= 0x80 (UTF-8 names).
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z\x80-\xff]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # RFC 9110 5.5: CTLs but HTAB
_CHUNK_LIMIT = 1 << 64  # llhttp refuses a chunk size that does not fit 64 bits
_UNSAFE = re.compile(r"[^ -~]|[<>&\"']")


class MalformedBody(HTTPError):
    """What reading a request body raises once its framing turned out broken."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(400, f"Bad Request: malformed body ({_reason(cause)})", close=True)


def _reason(exc: BaseException) -> str:
    """One short line: llhttp's messages go on with the bytes and a pointer to the fault.
    The Python parser's may quote the client's bytes, which go into an HTML body: only
    printable ASCII that is no markup is kept."""
    text = str(getattr(exc, "message", None) or exc).split(":\n", 1)[0]
    return _UNSAFE.sub("?", " ".join(text.split()))[:200]


class _ReportsMalformed:
    """A body's stream as aiohttp's Python payload parser sees it: the exception it sets
    when the framing breaks reaches the reader as MalformedBody."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def set_exception(self, exc: BaseException, *cause: Any) -> None:
        self._stream.set_exception(exc if isinstance(exc, MalformedBody) else MalformedBody(exc))

    def exception(self) -> BaseException | None:
        return getattr(self._stream, "out", self._stream).exception()  # a DeflateBuffer's

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


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
    attributes (`_headers_parser`, `_payload_parser` and its state): tested against the
    aiohttp version pyproject.toml allows, in tests/unit/test_lenient_parser.py."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_parser = _Utf8NameHeaders(self.max_line_size, self.max_headers,
                                                self.max_field_size)

    def parse_message(self, lines: list[bytes]) -> Any:
        msg = super().parse_message(lines)
        # The token check passed: the method is ASCII. Keep it as sent, not upper-cased.
        sent = lines[0].split(b" ", 1)[0].decode("ascii")
        return msg if sent == msg.method else msg._replace(method=sent)

    def feed_data(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        before = self._payload_parser
        result = super().feed_data(data, *args, **kwargs)
        if before is not None and before.payload.exception() is not None:
            # It gave up on the body without raising (a chunk-size line too long, say) and
            # went on as if the body had ended: the same failure as any other.
            raise http_exceptions.TransferEncodingError("the body's framing is broken")
        body = self._payload_parser
        if body is not None:
            # Bodies come after their head, fed apart (LenientRequestParser._reparse): a
            # reader waiting on this one when it breaks must see MalformedBody too.
            if not isinstance(body.payload, _ReportsMalformed):
                body.payload = _ReportsMalformed(body.payload)
            if getattr(body, "_chunk_size", 0) >= _CHUNK_LIMIT:
                raise http_exceptions.TransferEncodingError("chunk size does not fit 64 bits")
        return result

    def idle(self) -> bool:
        """Between requests, holding no bytes: another parser may take the next one."""
        return (self._payload_parser is None and not self._lines and not self._tail
                and not self._upgraded)


_Fast: Any = getattr(http_parser, "HttpRequestParserC", None) or _Slow
_PARSERS = (_Fast, _Slow) if _Fast is not _Slow else (_Slow,)


class LenientRequestParser:
    """One connection's parser: the C parser, the Python one for requests it refuses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._protocol = args[0] if args else kwargs.get("protocol")
        self._impl = _Fast(*args, **kwargs)
        self._slow = False  # self._impl is the Python parser, for one request
        self._held = b""  # stray bytes after a request that has no body
        self._head = b""  # bytes of a request head not complete yet, as far as known
        self._body: Any = None  # the payload of the last request, while it is arriving
        self._failed = False

    def feed_data(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        # On every request of every server: kept lean (a plain GET is the common case).
        if self._held or self._failed:
            if self._failed:
                return _NOTHING  # the connection closes after its answer
            data, self._held = self._held + data, b""
        body = self._body
        in_body = body is not None and not body.is_eof()
        try:
            result = self._impl.feed_data(data, *args, **kwargs)
        except http_exceptions.BadHttpMessage as exc:
            if in_body and not body.is_eof():  # the body being received broke
                self._fail_body(exc)
                return _NOTHING
            data, self._head = self._head + data, b""
            result = self._reparse(data, exc, args, kwargs)
        else:
            messages = result[0]
            if messages:
                payload = messages[-1][1]  # as _note, inline
                self._body = None if payload is EMPTY_PAYLOAD else payload
                if self._head:
                    self._head = b""  # a following head starts somewhere in `data`
            elif not in_body:
                self._head += data
        if self._slow and self._impl.idle():
            self._impl, self._slow = _Fast(*self._args, **self._kwargs), False
        return result

    def _reparse(self, data: bytes, exc: Exception, args: Any, kwargs: Any) -> Any:
        """The C parser refused `data`, which starts a request, and lost whatever requests
        it had read from it. Parse the head alone, with the C parser or else the Python one;
        then what follows, apart: a break there fails that request's body (its handler
        answers 400) rather than losing the request."""
        end = data.find(b"\r\n\r\n")
        head, rest = (data, b"") if end < 0 else (data[:end + 4], data[end + 4:])
        for cls in _PARSERS:
            parser = cls(*self._args, **self._kwargs)
            try:
                result = parser.feed_data(head, *args, **kwargs)
            except http_exceptions.BadHttpMessage:
                continue
            break
        else:
            raise exc from None
        self._impl, self._slow = parser, parser.__class__ is not _Fast
        if end < 0:
            self._head = head
            return result
        self._note(result[0])
        if not rest:
            return result
        try:
            more = parser.feed_data(rest, *args, **kwargs)
        except http_exceptions.BadHttpMessage as rest_exc:
            if self._body_open():
                self._fail_body(rest_exc)
            else:
                # Bytes that are no request after one that has no more body (a body sent
                # without Content-Length, or more than it declared): that request is answered
                # (a 411, say), and the bytes past its body are held, to fail as a request of
                # their own if one ever comes.
                self._impl = parser.__class__(*self._args, **self._kwargs)
                self._held = rest[_declared_length(result[0]):]
            return result
        if more[0]:
            self._note(more[0])
        return [*result[0], *more[0]], more[1], more[2]

    def _note(self, messages: Any) -> None:
        """The payload of the last request read, unless it has none."""
        payload = messages[-1][1]
        self._body = None if payload is EMPTY_PAYLOAD else payload

    def _body_open(self) -> bool:
        return self._body is not None and not self._body.is_eof()

    def _fail_body(self, exc: BaseException) -> None:
        body, self._body = self._body, None
        self._failed = True
        # The exception first: a read waiting for data must raise, never see a clean end.
        body.set_exception(exc if isinstance(exc, MalformedBody) else MalformedBody(exc))
        body.feed_eof()  # nothing more comes: aiohttp does not linger on it after the answer
        if self._protocol is not None:
            # Once data_received has queued what this data held (a request now waiting for
            # its handler is still answered).
            asyncio.get_running_loop().call_soon(_end_connection, self._protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._impl, name)


def _end_connection(protocol: Any) -> None:
    """No request after this one: close the connection after its answer, or now if it was
    answered already and the connection waits for the next (aiohttp's own idle test)."""
    if aiohttp_seams.waiting_for_request(protocol):
        protocol.force_close()
    else:
        protocol.close()


def _declared_length(messages: Any) -> int:
    """The Content-Length of the one request parsed (0 when none: its length is unknown)."""
    if len(messages) != 1:
        return 0
    value = messages[0][0].headers.get("Content-Length", "0")
    return int(value) if value.isascii() and value.isdigit() else 0


def install() -> None:
    """Make aiohttp's server connections (in this process) use the lenient parser."""
    aiohttp_seams.use_request_parser(LenientRequestParser)
