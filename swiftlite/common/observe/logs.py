"""Logging: one line per request, errors with tracebacks, all tagged with the request id."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time as _time

from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import BaseRequest, StreamResponse

from swiftlite.common.http import HTTPError, txid
from swiftlite.common.observe import metrics

FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s"


def setup_logging(name: str, level: str = "INFO", log_file: str | None = None) -> logging.Logger:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler: logging.Handler
    # Client bytes that are not UTF-8 (header values, paths) reach messages as surrogates:
    # escaped, never a UnicodeEncodeError and a lost line.
    handler = logging.FileHandler(log_file, errors="backslashreplace") if log_file \
        else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet_client_faults()
    return logging.getLogger(name)


def quiet_client_faults() -> None:
    """Every server process drops aiohttp.server's records of a client's own faults (see
    _UnparsableRequests); idempotent."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _UnparsableRequests) for f in server_log.filters):
        server_log.addFilter(_UnparsableRequests())


class _UnparsableRequests(logging.Filter):
    """aiohttp answers a request its parser refuses (a header line too long, a bad
    Content-Length, both Content-Length and Transfer-Encoding) with a 400 and the access
    line, then logs the parser's exception as an ERROR with a traceback: the client's bytes
    were wrong, not our code. So it does for a body that breaks while aiohttp reads the rest
    of it after the answer (lenient_parser's MalformedBody, an HTTPError: an answer, never
    a fault of ours). Only those records are dropped; whatever else aiohttp.server logs (a
    handler's exception, a response that could not be sent) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, (HttpProcessingError, HTTPError))


class _AccessSink:
    """Access lines, written once per event-loop iteration: a busy server issues one
    write() for many requests instead of one per request, and skips building a LogRecord.
    Lines look exactly like FORMAT's. Falls back to the logger for non-stream handlers."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.scheduled = False
        self._sec = -1
        self._stamp = ""
        self.pid = os.getpid()

    def stamp(self, now: float) -> str:
        sec = int(now)
        if sec != self._sec:
            self._sec = sec
            self._stamp = _time.strftime("%Y-%m-%d %H:%M:%S", _time.localtime(sec))
        return f"{self._stamp},{int((now - sec) * 1000):03d}"

    def add(self, logger: logging.Logger, message: str) -> None:
        handlers = _stream_handlers(logger)
        if handlers is None:
            logger.info("%s", message)
            return
        self.lines.append(f"{self.stamp(_time.time())} {logger.name}[{self.pid}] INFO "
                          f"{message}\n")
        if not self.scheduled:
            self.scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush, handlers)
            except RuntimeError:  # no loop: write now
                self.flush(handlers)

    def flush(self, handlers: list[logging.StreamHandler]) -> None:
        self.scheduled = False
        data, self.lines = "".join(self.lines), []
        for h in handlers:
            with h.lock:  # type: ignore[union-attr]
                h.stream.write(data)
                h.flush()


def _stream_handlers(logger: logging.Logger) -> list[logging.StreamHandler] | None:
    """The handlers an INFO line of `logger` reaches, if all are plain streams; else None."""
    if not logger.isEnabledFor(logging.INFO):
        return []
    out: list[logging.StreamHandler] = []
    lg: logging.Logger | None = logger
    while lg is not None:
        for h in lg.handlers:
            if type(h) not in (logging.StreamHandler, logging.FileHandler) or h.filters \
                    or h.level > logging.INFO:
                return None
            out.append(h)
        if not lg.propagate:
            break
        lg = lg.parent
    return out


_SINK = _AccessSink()
os.register_at_fork(after_in_child=lambda: setattr(_SINK, "pid", os.getpid()))


class RequestLogger(AbstractAccessLogger):
    """The per-request line: method, path, status, bytes sent, duration, request id."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        metrics.observe_request(request.method, request.path, response.status, time,
                                request.content.total_bytes, response.body_length)
        _SINK.add(self.logger, f"{request.remote or '-'} {request.method} {request.raw_path} "
                               f"{response.status} {response.body_length} {time:.4f} "
                               f"{txid(request)}")
