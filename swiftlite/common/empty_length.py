"""`Content-Length: 0` on 204 answers, as Swift sends them.

aiohttp drops Content-Length from every 204 (RFC 9110 says a server must not send it), but
Swift has always sent `Content-Length: 0` there, and its clients and functional suite look
for it on account and container HEADs and empty listings.
"""

from __future__ import annotations

from aiohttp import web_response


def _remove_content_length(method: str, code: int) -> bool:
    return code == 304 or 100 <= code < 200 or (200 <= code < 300 and method == "CONNECT")


def install() -> None:
    """Keep Content-Length on 204 answers of this process's aiohttp servers."""
    web_response.should_remove_content_length = _remove_content_length  # type: ignore[attr-defined]
