"""The proxy's middleware pipeline, ordered by `pipeline = ...` in proxy-server.conf.

Each user-facing feature is one small module under `swiftlite/proxy/middleware/`: a
`Middleware` subclass wrapping the next handler. The last name, `proxy-server`, is the core
(accounts, containers, objects), which knows nothing of the features around it. A feature
advertises itself in `/info` only when it is in the pipeline (its `info()`), and reads its
options from `[filter:<name>]`, falling back to `[proxy-server]`.

Handlers take a request and return a response that is not yet sent: a middleware may look at
or change it (headers, status, even consume an object body through `BodyResponse`) before
aiohttp sends it. Sub-requests are `request.clone(...)` sent to `self.app` (or to
`proxy.pipeline` to go through every feature again).

Plain reads (an object GET or HEAD with no query string, Range or condition: what an image
service sends most) may take a short cut past features that leave them alone
(swiftlite/proxy/plain_reads.py). Each feature says how it treats one in `plain_reads`; one
that says nothing turns the short cut off, so a new feature is never skipped by mistake.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from aiohttp import web

from swiftlite.common.config import Section, load_sections
from swiftlite.proxy.core_api import ProxyCore

if TYPE_CHECKING:
    from swiftlite.proxy.request import ApiPath

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CORE = "proxy-server"
# One name a line, so features are added (in Swift's order) by one-line edits.
DEFAULT_PIPELINE = " ".join([
    "catch_errors",
    "cors",
    "gatekeeper",
    "s3api",
    "bulk",
    "image",  # after bulk: a bulk delete's deletes reclaim their originals' variants
    "tempurl",
    "formpost",
    "tempauth",
    "s3_keys",
    "staticweb",
    "copy",
    "ratelimit",
    "container_quotas",
    "account_quotas",
    "slo",
    "dlo",
    "versioned_writes",
    "object_versioning",
    "symlink",
    "proxy-server",
])

# The web console is off unless named (`swiftlite up` names it): a production proxy serves
# it only where its operator chose to, on a proxy of its own if they like.
CONSOLE_AFTER = "gatekeeper"


def with_console(pipeline: str = DEFAULT_PIPELINE) -> str:
    """`pipeline` with the console right after gatekeeper (before s3api, so /console/ is never
    taken for an anonymous S3 bucket)."""
    names = pipeline.split()
    if "console" in names:
        return pipeline
    at = names.index(CONSOLE_AFTER) + 1 if CONSOLE_AFTER in names else 1
    return " ".join([*names[:at], "console", *names[at:]])


# Pipeline name -> "module:class". A name not listed here is a configuration error.
REGISTRY: dict[str, str] = {
    "tempurl": "swiftlite.proxy.middleware.tempurl:TempUrl",
    "formpost": "swiftlite.proxy.middleware.formpost:FormPost",
    "catch_errors": "swiftlite.proxy.middleware.catch_errors:CatchErrors",
    "gatekeeper": "swiftlite.proxy.middleware.gatekeeper:Gatekeeper",
    "s3api": "swiftlite.proxy.s3.middleware:S3Api",
    "image": "swiftlite.proxy.middleware.image_variants:ImageVariants",
    "console": "swiftlite.proxy.console.middleware:Console",
    "tempauth": "swiftlite.proxy.middleware.tempauth:TempAuthMiddleware",
    "s3_keys": "swiftlite.proxy.s3.key_admin:S3Keys",
    "ratelimit": "swiftlite.proxy.middleware.ratelimit:RateLimit",
    "copy": "swiftlite.proxy.middleware.copy:Copy",
    "cors": "swiftlite.proxy.middleware.cors:Cors",
    "container_quotas": "swiftlite.proxy.middleware.quotas:ContainerQuotas",
    "account_quotas": "swiftlite.proxy.middleware.quotas:AccountQuotas",
    "slo": "swiftlite.proxy.middleware.slo:Slo",
    "dlo": "swiftlite.proxy.middleware.dlo:Dlo",
    "bulk": "swiftlite.proxy.middleware.bulk:Bulk",
    "symlink": "swiftlite.proxy.middleware.symlink:Symlink",
    "staticweb": "swiftlite.proxy.middleware.staticweb:StaticWeb",
    "versioned_writes": "swiftlite.proxy.middleware.versioned_writes:VersionedWrites",
    "object_versioning": "swiftlite.proxy.middleware.object_versioning:ObjectVersioning",
}


# `Middleware.plain_reads` values.
PASS = "pass"  # a plain read, and its answer, go by untouched: the short cut skips it
HOOKS = "hooks"  # `admit_plain` and `accept_plain` do for a plain read what __call__ would


class Middleware:
    """One pipeline feature. Subclasses set `name` and override `__call__` (and `info`)."""

    name: ClassVar[str] = ""
    # How this feature treats a plain read: PASS, HOOKS, or None (the default), which keeps
    # every request of the pipeline on the full path.
    plain_reads: ClassVar[str | None] = None
    # When its `accept_plain` declines a plain read, the core's answer is kept and handed to
    # the full pipeline's core for the same request instead of read again (plain_reads.py).
    # Only for a feature whose __call__ sends that request down unchanged first.
    replays_declined: ClassVar[bool] = False
    # A front end that sends requests of its own down the rest of the pipeline (s3api) says
    # True to get `lane`: that rest, with the plain-read short cut of the features after it.
    wants_lane: ClassVar[bool] = False
    # For a HOOKS feature, what it needs no call to decide (the short cut looks, in one pass
    # with every other feature's): request headers, by name or name prefix, that make a read
    # its own, never a plain one (CORS: Origin; the gatekeeper: sysmeta a client sent), and
    # answer headers that make the answer its own, as if its `accept_plain` had declined
    # (SLO: a manifest's mark).
    plain_refused_by: ClassVar[tuple[str, ...]] = ()
    plain_refused_by_prefix: ClassVar[tuple[str, ...]] = ()
    plain_answer_marks: ClassVar[tuple[str, ...]] = ()

    def __init__(self, app: Handler, proxy: ProxyCore, conf: Section) -> None:
        self.app = app
        self.proxy = proxy
        self.conf = conf
        self.lane: Handler = app

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        return await self.app(request)

    async def admit_plain(self, request: web.Request, path: ApiPath) -> web.Request | None:
        """For a plain read: the request as __call__ would pass it on, or None when this
        feature must see it (the full pipeline then answers). May raise as __call__ would."""
        return request

    def accept_plain(self, request: web.Request, path: ApiPath,
                     resp: web.StreamResponse) -> bool:
        """For the core's answer to a plain read: change it in place as __call__ would and
        say True, or say False when __call__ would do more (the full pipeline then answers,
        after this answer is closed)."""
        return True

    def admits_plain(self) -> bool:
        """Whether the short cut must call `admit_plain` (not when it is the base one)."""
        return type(self).admit_plain is not Middleware.admit_plain

    def accepts_plain(self) -> bool:
        """Whether the short cut must call `accept_plain` (not when it is the base one)."""
        return type(self).accept_plain is not Middleware.accept_plain

    def info(self) -> dict[str, Any] | None:
        """What `/info` says under this feature's name; None says nothing."""
        return {}

    def info_entries(self) -> dict[str, Any]:
        """`/info` keys this feature adds: `info()` under its name, unless it overrides this
        to say more (Swift's bulk advertises `bulk_delete` and `bulk_upload`)."""
        entry = self.info()
        return {} if entry is None else {self.name: entry}


def _filter_conf(proxy_conf: Section, name: str) -> Section:
    """`[filter:<name>]` over `[proxy-server]`: the feature's own options win."""
    conf = Section(proxy_conf)
    conf.name = name
    path = proxy_conf.get("__file__")
    if path and os.path.exists(path):
        own = load_sections(path).get(f"filter:{name}")
        if own:
            conf.update(own)
    return conf


def load_class(name: str) -> type[Middleware]:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown pipeline entry {name!r}; known: "
                         f"{', '.join(sorted(REGISTRY))}, {CORE}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def chain(proxy: ProxyCore, conf: Section, core: Handler) -> tuple[Handler, list[Middleware]]:
    """The handler chain from `pipeline` (outermost first) and its middleware, in order,
    without the plain-read short cuts (stack.build lays those in)."""
    names = conf.get_str("pipeline", DEFAULT_PIPELINE).split()
    if not names or names[-1] != CORE:
        raise ValueError(f"pipeline must end with {CORE}")
    if len(set(names)) != len(names):
        raise ValueError("pipeline names an entry twice")
    handler: Handler = core
    built: list[Middleware] = []
    for name in reversed(names[:-1]):
        mw = load_class(name)(handler, proxy, _filter_conf(conf, name))
        built.append(mw)
        handler = mw
    built.reverse()
    return handler, built
