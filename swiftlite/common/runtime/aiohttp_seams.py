"""Every place the servers rely on aiohttp beyond its public API, in one module.

Each function below reads or writes one private attribute, or replaces one module global,
of the aiohttp versions pyproject.toml allows (pinned from above for this reason);
tests/unit/test_aiohttp_seams.py checks each against the installed aiohttp, so an upgrade
that moves one fails there, by name, not somewhere in a server. The request parser built on
aiohttp's (`lenient_parser`) is checked by its own tests the same way.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web_protocol, web_response


def _keep_204_length(method: str, code: int) -> bool:
    return code == 304 or 100 <= code < 200 or (200 <= code < 300 and method == "CONNECT")


def keep_content_length_on_204() -> None:
    """`Content-Length: 0` on 204 answers, as Swift sends them: aiohttp drops the header
    from every 204 (RFC 9110 says a server must not send it), but Swift's clients and
    functional suite look for it on account and container HEADs and empty listings."""
    web_response.should_remove_content_length = _keep_204_length  # type: ignore[attr-defined]


def use_request_parser(parser: type) -> None:
    """Make `parser` the request parser of every aiohttp server of this process."""
    web_protocol.HttpRequestParser = parser  # type: ignore[misc]


def connections(server: Any) -> list[Any]:
    """A web server's open connections (request handlers), oldest first."""
    return server._connections


def in_request(handler: Any) -> bool:
    """Whether a connection is in the middle of a request (else idle between requests);
    unknown counts as idle."""
    return getattr(handler, "_request_in_progress", False)


def answer_next_with(handler: Any, answer: Any) -> None:
    """Make `answer` the handler of this one connection's next requests (and only its)."""
    handler._request_handler = answer


def waiting_for_request(protocol: Any) -> bool:
    """Whether a connection has answered its requests and waits for the next (aiohttp's own
    idle test)."""
    waiter = getattr(protocol, "_waiter", None)
    return waiter is not None and not waiter.done()


def reading_paused(protocol: Any) -> bool:
    """Whether aiohttp stopped reading from a connection because the handler has not
    consumed what arrived (the wait is then ours, not the client's); unknown: False."""
    return getattr(protocol, "_reading_paused", False)


def request_state(request: Any) -> dict[Any, Any]:
    """The dict behind a request's MutableMapping face (`request[key]`), which `clone()`
    copies. Reading it directly costs one dict lookup where `request.get(key)` costs two
    Python calls (and a raised KeyError when the key is absent): the plain-read path asks for
    a handful of keys per request. Writes made here skip aiohttp's advice to use
    `web.RequestKey` keys (ours are strings, private by their `swiftlite.` prefix)."""
    return request._state
