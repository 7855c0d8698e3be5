"""The wire form of "this name lives in a shard": what a container server answers to an
object update for a name it no longer holds, and what object servers read back.

- A single-object PUT/DELETE: 301 with `X-Backend-Redirect` (the shard's quoted
  "account/container") and its bounds in `X-Backend-Redirect-Lower`/`-Upper` (quoted;
  the range is lower < name <= upper, '' unbounded).
- A MERGE batch: 202 with `X-Backend-Redirects: 1` and a msgpack body holding, per section
  of the request (one when it had none), the rows sent elsewhere as
  `[[shard name, lower, upper, [rows...]], ...]`. The other rows were committed.

Shard containers sit in a reserved account (names start with NUL), so names are quoted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

REDIRECT = "X-Backend-Redirect"
REDIRECT_LOWER = "X-Backend-Redirect-Lower"
REDIRECT_UPPER = "X-Backend-Redirect-Upper"
REDIRECTS = "X-Backend-Redirects"
# Set on the sharder's copies of rows: they are the shard's to keep whatever their names.
CLEAVING = "X-Backend-Cleaving"


def redirect_headers(shard: str, lower: str, upper: str) -> dict[str, str]:
    return {REDIRECT: quote(shard, safe=""), REDIRECT_LOWER: quote(lower, safe=""),
            REDIRECT_UPPER: quote(upper, safe="")}


def parse_redirect(headers: Mapping[str, str]) -> tuple[str, str, str, str] | None:
    """(shard account, shard container, lower, upper) of a 301, or None."""
    raw = headers.get(REDIRECT)
    if not raw:
        return None
    account, sep, container = unquote(raw).partition("/")
    if not sep or not account or not container:
        return None
    return (account, container, unquote(headers.get(REDIRECT_LOWER, "")),
            unquote(headers.get(REDIRECT_UPPER, "")))


def parse_groups(body: Any) -> list[list[tuple[str, str, str, str, list[dict[str, Any]]]]]:
    """A batch answer's redirected rows, per section; ValueError when malformed."""
    if not isinstance(body, list):
        raise ValueError("redirect body must be a list")
    out = []
    for section in body:
        groups = []
        for name, lower, upper, rows in section:
            account, sep, container = str(name).partition("/")
            if not sep or not isinstance(rows, list):
                raise ValueError("bad redirect group")
            groups.append((account, container, str(lower), str(upper), rows))
        out.append(groups)
    return out
