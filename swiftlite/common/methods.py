"""Extension HTTP methods (REPLICATE) on aiohttp's fast C request parser.

aiohttp's C parser (llhttp) rejects methods it does not know, such as Swift's REPLICATE, with
a 400 before any handler runs. `install_method_aliases` makes the server rewrite such a method
at the start of a received chunk into a method llhttp knows (REPLICATE -> REPORT, a WebDAV
method nothing else here uses); the handler then treats the alias as the extension method.
A request line always starts a fresh chunk for our clients (one request at a time per
connection); a pipelined one that does not still gets the parser's 400, never a wrong answer.
"""

from __future__ import annotations

from aiohttp import web_protocol

ALIASES: dict[bytes, bytes] = {b"REPLICATE ": b"REPORT "}
_installed = False


def install_method_aliases() -> None:
    """Idempotent; affects every aiohttp server in this process (all of which ignore REPORT)."""
    global _installed
    if _installed:
        return
    base = web_protocol.HttpRequestParser

    class AliasingParser(base):  # type: ignore[misc, valid-type]
        def feed_data(self, data, *args, **kwargs):
            if data[:1].isupper():
                for name, alias in ALIASES.items():
                    if data.startswith(name):
                        data = alias + data[len(name):]
                        break
            return super().feed_data(data, *args, **kwargs)

    web_protocol.HttpRequestParser = AliasingParser  # type: ignore[misc]
    _installed = True
