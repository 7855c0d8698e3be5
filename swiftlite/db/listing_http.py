"""A listing over HTTP: the query a GET (or HEAD) asks for, and the response it gets.

Kept apart from `listing` (parameters, walk, formats), which the brokers use with no HTTP
stack loaded.
"""

from __future__ import annotations

from aiohttp import web

from swiftlite.common.config import TRUE_VALUES
from swiftlite.common.http import HTTPError, query_str
from swiftlite.db.listing import FORMAT_TYPES, ListingParams, NotAcceptable, accept_type


def parse_format(request: web.Request) -> tuple[str, str]:
    """(format, media type) from ?format= (an unknown one means plain, as in Swift) or the
    Accept header (406 when nothing fits). HEAD answers with the same Content-Type."""
    fmt = (query_str(request, "format") or "").lower()
    if fmt:
        fmt = fmt if fmt in FORMAT_TYPES else "plain"
        return fmt, FORMAT_TYPES[fmt]
    try:
        ctype, fmt = accept_type(request.headers.get("Accept"))
    except NotAcceptable as exc:
        raise HTTPError(406, str(exc)) from None
    return fmt, ctype


def parse_params(request: web.Request, max_limit: int) -> ListingParams:
    """Validate the listing query as Swift does: bad UTF-8 is a 400, a limit over the
    maximum a 412, and a limit that is not a number is ignored."""
    raw_limit = query_str(request, "limit")
    limit = max_limit
    if raw_limit and raw_limit.isascii() and raw_limit.isdigit():
        limit = int(raw_limit)
        if limit > max_limit:
            raise HTTPError(412, f"Maximum limit is {max_limit}")
    fmt, ctype = parse_format(request)
    reverse = (query_str(request, "reverse") or "").lower() in TRUE_VALUES
    prefix = query_str(request, "prefix") or None
    delimiter = query_str(request, "delimiter") or None
    path = query_str(request, "path")
    if path is not None:
        prefix = path.rstrip("/") + "/" if path else None
        delimiter = "/"
        path = prefix or ""
    return ListingParams(limit=limit, marker=query_str(request, "marker") or None,
                         end_marker=query_str(request, "end_marker") or None,
                         prefix=prefix, delimiter=delimiter, reverse=reverse,
                         out_format=fmt, path=path, ctype=ctype)


def response(body: bytes, ctype: str, headers: dict[str, str]) -> web.Response:
    """The listing response; an empty plain listing is a 204, as in Swift. Every answer
    names its type with charset=utf-8, the 204 too (Swift's clients look at it)."""
    headers["Content-Type"] = f"{ctype}; charset=utf-8"
    if not body and ctype == "text/plain":
        return web.Response(status=204, headers=headers)
    return web.Response(status=200, body=body, headers=headers)
