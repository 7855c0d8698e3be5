"""Logging: one line per request, errors with tracebacks, all tagged with the request id."""

from __future__ import annotations

import logging
import sys

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from swiftlite.common.http import txid

FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s"


def setup_logging(name: str, level: str = "INFO", log_file: str | None = None) -> logging.Logger:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler: logging.Handler
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())
    return logging.getLogger(name)


class RequestLogger(AbstractAccessLogger):
    """The per-request line: method, path, status, bytes sent, duration, request id."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s %s %d %s %.4f %s",
            request.remote or "-",
            request.method,
            request.raw_path,
            response.status,
            response.body_length,
            time,
            txid(request),  # type: ignore[arg-type]
        )
