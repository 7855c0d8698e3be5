"""The proxy's request stack: the pipeline's middleware chain (pipeline.chain) with the
plain-read short cuts (plain_reads.PlainReads) laid in front of it and of each feature that
asks for one. Kept apart from both so that neither module imports the other's user."""

from __future__ import annotations

from swiftlite.common.config import Section
from swiftlite.proxy.core_api import ProxyCore
from swiftlite.proxy.pipeline import Handler, Middleware, chain
from swiftlite.proxy.plain_reads import PlainReads, replaying


def build(proxy: ProxyCore, conf: Section, core: Handler) -> tuple[Handler, list[Middleware]]:
    """The handler a request enters by and the pipeline's middleware, in order."""
    handler, built = chain(proxy, conf, replaying(core))
    if conf.get_bool("plain_read_shortcut", True):
        # The short cuts call the core itself: they read before any answer is primed.
        lane = PlainReads.build(built, core, handler)
        if lane is not None:
            handler = lane
        for i, mw in enumerate(built):
            if mw.wants_lane:
                mw.lane = PlainReads.build(built[i + 1:], core, mw.app) or mw.app
    return handler, built
