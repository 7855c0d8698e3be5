"""Reports of multi-step requests (bulk delete, archive extraction, SLO manifest uploads and
deletes): Swift's plain text, JSON or XML summary, chosen by the Accept header, streamed after
whitespace "heartbeats" so clients and load balancers wait for long jobs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

from aiohttp import web

from swiftlite.common.constraints import MAX_CONTAINER_NAME_LENGTH, MAX_OBJECT_NAME_LENGTH
from swiftlite.common.http import HTTPError
from swiftlite.proxy.request import BODY

log = logging.getLogger("swiftlite.proxy")

# Answer formats, in Swift's order of preference (no Accept header: the first).
FORMATS = ("text/plain", "application/json", "application/xml", "text/xml")
XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'
# Longest useful line of a bulk-delete body, and the cut-off for names in reports.
MAX_PATH_LENGTH = MAX_OBJECT_NAME_LENGTH + MAX_CONTAINER_NAME_LENGTH + 2
# Swift's wording where it differs from http.HTTPStatus.
PHRASES = {413: "Request Entity Too Large", 414: "Request URI Too Long",
           416: "Requested Range Not Satisfiable", 499: "Client Disconnect",
           500: "Internal Error"}


def status_line(code: int) -> str:
    try:
        phrase = PHRASES.get(code) or HTTPStatus(code).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{code} {phrase}"


class Outcome(Exception):
    """Ends a bulk job early; its status and body become the report's."""

    def __init__(self, status: int, body: str = "") -> None:
        super().__init__(body)
        self.status = status
        self.body = body


# ---- the Accept header, judged as Swift's swob does --------------------------------------

_TOKEN = r"[^()<>@,;:\\\"/\[\]?={}\x00-\x20\x7f]+"
_PARAM = rf'\s*;\s*{_TOKEN}\s*=\s*(?:{_TOKEN}|"(?:[^"\\]|\\.)*")'
_MEDIA_RANGE = re.compile(rf"^\s*({_TOKEN})/({_TOKEN})((?:{_PARAM})*\s*)$")


def best_format(accept: str | None) -> str | None:
    """The format to answer in; None when nothing fits or the header cannot be parsed (the
    report then says 406). As in Swift, q only orders the ranges (q=0 still matches), and a
    range without wildcards goes before one with them at the same q."""
    if not accept:
        return FORMATS[0]
    ranges = []
    for part in accept.split(","):
        m = _MEDIA_RANGE.match(part)
        if m is None:
            return None
        typ, sub, params = m.groups()
        q, seen_q = 1.0, False
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip() != "q":
                continue
            if seen_q:
                return None
            seen_q = True
            try:
                q = float(value.strip())
            except ValueError:
                return None
        ranges.append((q, "*" not in (typ, sub), typ, sub))
    ranges.sort(key=lambda r: (r[0], r[1]), reverse=True)  # stable: ties keep their order
    for _q, _exact, typ, sub in ranges:
        for fmt in FORMATS:
            ftyp, fsub = fmt.split("/")
            if typ in ("*", ftyp) and sub in ("*", fsub):
                return fmt
    return None


# ---- the report ------------------------------------------------------------------------------

class Report:
    """What a bulk job did so far: the counts and "Response *" fields, and the failures."""

    def __init__(self, root: str, fields: dict[str, Any]) -> None:
        self.root = root  # the XML document element: "delete" or "extract"
        self.fields = fields
        self.errors: list[list[str]] = []
        self.failure_status = 400  # 502 once a sub-request failed with a 5xx

    def fail(self, name: bytes | str, status: int) -> None:
        if status // 100 == 5:
            self.failure_status = 502
        self.errors.append([quoted(name), status_line(status)])

    def fail_reason(self, name: bytes | str, reason: str) -> None:
        """A failure described in words ("Etag Mismatch") rather than by a status."""
        self.errors.append([quoted(name), reason])

    def render(self, fmt: str | None) -> bytes:
        if fmt == "application/json":
            return json.dumps({**self.fields, "Errors": self.errors}).encode("ascii")
        keys = sorted(self.fields)
        if fmt is not None and fmt.endswith("/xml"):
            out = [f"<{self.root}>\n"]
            for key in keys:
                tag = key.replace(" ", "_").lower()
                out.append(f"<{tag}>{escape(str(self.fields[key]))}</{tag}>\n")
            out.append("<errors>\n")
            out.extend(f"<object><name>{escape(name)}</name><status>{escape(status)}"
                       "</status></object>\n" for name, status in self.errors)
            out.append(f"</errors>\n</{self.root}>\n")
        else:
            out = [f"{key}: {self.fields[key]}\n" for key in keys]
            out.append("Errors:\n")
            out.extend(f"{name}, {status}\n" for name, status in self.errors)
        return "".join(out).encode("utf-8")


def quoted(name: bytes | str) -> str:
    """A name as reports show it: its UTF-8 (or raw) bytes, cut to MAX_PATH_LENGTH, quoted."""
    raw = name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")
    return quote(raw[:MAX_PATH_LENGTH], safe="/")


# ---- the request body ------------------------------------------------------------------------

class Body:
    """The client's body (or a sub-request's given one) read in pieces, each within the
    proxy's client_timeout; a stalled or vanished client ends the job."""

    def __init__(self, request: web.Request, timeout: float) -> None:
        given = request.get(BODY)
        self.content = request.content if given is None else None
        self.given: Any = given
        self.pending = b""
        self.timeout = timeout

    async def read(self, size: int) -> bytes:
        if self.content is not None:
            try:
                async with asyncio.timeout(self.timeout):
                    return await self.content.read(size)
            except TimeoutError:
                raise Outcome(408) from None
            except HTTPError as exc:  # a malformed body
                raise Outcome(exc.status, exc.reason) from None
            except (ConnectionError, OSError):
                raise Outcome(499) from None
        if not self.pending and self.given is not None:
            if isinstance(self.given, bytes):
                self.pending, self.given = self.given, None
            else:
                self.pending = await anext(self.given, b"")
                if not self.pending:
                    self.given = None
        data, self.pending = self.pending[:size], self.pending[size:]
        return data


def length_known(request: web.Request) -> bool:
    return request.content_length is not None or request.get(BODY) is not None or \
        "chunked" in request.headers.get("Transfer-Encoding", "").lower()


# ---- the streamed answer ---------------------------------------------------------------------

async def report_stream(report: Report, job: Callable[[str | None], Awaitable[None]],
                        fmt: str | None, every: float,
                        eager: bool = False) -> AsyncIterator[bytes]:
    """Runs the job as the body is sent: whitespace every `every` seconds while it works, then
    the report (an Outcome raised by the job sets its status and body). `eager` sends the
    first space at once and always separates the report with a blank line, as Swift's SLO
    heartbeat does; otherwise an XML report's declaration is its first heartbeat."""
    xml = fmt is not None and fmt.endswith("/xml")
    beat = b" " if eager or not xml else XML_DECLARATION
    lead = b""
    if eager:
        yield beat
        lead = b"\r\n\r\n"
    task = asyncio.ensure_future(job(fmt))
    try:
        while True:
            done, _ = await asyncio.wait((task,), timeout=every)
            if done:
                break
            yield beat
            beat, lead = b" ", b"\r\n\r\n"
        try:
            task.result()
        except Outcome as exc:
            report.fields["Response Status"] = status_line(exc.status)
            report.fields["Response Body"] = exc.body
        except Exception:
            log.exception("%s job failed", report.root)
            report.fields["Response Status"] = status_line(500)
    finally:
        task.cancel()  # the client went away: stop working for it
    yield lead + report.render(fmt)
