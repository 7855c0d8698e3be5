"""The short cut for plain reads: an object GET or HEAD that no feature needs to see.

Most of an image service's requests are plain reads: GET or HEAD of an object, with no query
string, Range or condition. Walking the whole pipeline for one cost about a fifth of the
proxy's CPU per 64 KiB GET (17 features, each parsing and checking what it does not act on),
and most of the time of an answer from the hot-object cache.

So a plain read goes through only the features that act on it, in pipeline order, then the
core, then their checks of the answer in reverse order, as the full chain would:

- A feature with `plain_reads = PASS` never changes such a request or its answer (bulk acts
  on query strings, copy on COPY and PUT, quotas on writes, ...): it is skipped.
- A feature with `plain_reads = HOOKS` does its part in `admit_plain` (the gatekeeper strips
  reserved headers, tempauth says who is asking and installs itself as the authorizer) and
  `accept_plain` (the gatekeeper strips sysmeta from the answer, catch_errors adds the
  request id). Either may decline: object versioning for a versioned container, staticweb
  for a web-listed one, and, on the answer, a symlink's. What a feature can decide without
  code it declares instead, and the short cut looks in one pass for all of them, at no call
  per feature: request headers that make a read its own (`plain_refused_by`: CORS's Origin,
  tempauth's account ACL, S3's Authorization) and answer headers that make the answer its own
  (`plain_answer_marks`: an SLO's or DLO's manifest, an object S3 encrypted).
- A feature that says nothing (`None`) turns the short cut off for the whole pipeline.

A declined read (or one a hook refuses with an HTTP error) is answered by the full pipeline
from the start, as if the short cut had not been tried: the request keys a hook set are
undone, and an answer already read is closed. Except when the feature that declined says
`replays_declined` (SLO and DLO, which decline a manifest): its 2xx answer, not yet read, is
kept for the full pipeline's core to return for this very request (`replaying` wraps the
core, which itself knows nothing of it), so a manifest is fetched once, not twice. An HTTP
error the core raises (a 403, a 503 after the replicas failed) is the answer, as on the full
path, where no feature catches it before catch_errors: a failed read is never tried twice.
The core judges the caller on every read, as always: the short cut skips code, never a
verdict. `plain_read_shortcut = false` turns it off.
"""

from __future__ import annotations

import re

from aiohttp import web

from swiftlite.common.http import HTTPError, header_names_pattern
from swiftlite.common.observe import metrics
from swiftlite.common.ranges import RANGE_AND_CONDITIONS
from swiftlite.common.runtime.aiohttp_seams import request_state
from swiftlite.proxy.pipeline import HOOKS, Handler, Middleware
from swiftlite.proxy.request import api_path
from swiftlite.proxy.response import BodyResponse

READS = ("GET", "HEAD")
# [method, raw path and query, answer]: the core's answer to a declined read, kept for the
# full pipeline. A list, shared by the clones of the request (aiohttp copies their keys), so
# it is handed out once.
PRIMED = "swiftlite.primed_answer"
# A read with any of these is not plain: features treat ranges and conditions in their own
# ways (an SLO's ETag, a link's zero bytes), so such a read takes the full pipeline.
NOT_PLAIN = RANGE_AND_CONDITIONS


class PlainReads:
    def __init__(self, admitters: list[Middleware],
                 acceptors: list[tuple[str | None, Middleware]], not_plain: re.Pattern[str],
                 core: Handler, full: Handler) -> None:
        self.admitters = admitters  # pipeline order
        # Reverse order, the way an answer goes back up: (None, feature) calls its
        # accept_plain; (header, feature) declines for it when the answer has that header.
        self.acceptors = acceptors
        self.not_plain = not_plain  # finds a request header that makes a read not plain
        self.core = core  # the core itself, not `replaying` it: nothing is primed yet
        self.full = full

    @classmethod
    def build(cls, features: list[Middleware], core: Handler,
              full: Handler) -> PlainReads | None:
        """The short cut for this pipeline (`features` outermost first), or None when a
        feature does not say how it treats plain reads."""
        if any(mw.plain_reads is None for mw in features):
            return None
        hooked = [mw for mw in features if mw.plain_reads == HOOKS]
        # Only hooks a feature has are called (the base ones change nothing), and what a
        # feature declares is checked inline, at no call per feature.
        admitters = [mw for mw in hooked if mw.admits_plain()]
        acceptors: list[tuple[str | None, Middleware]] = []
        for mw in reversed(hooked):
            acceptors += [(mark, mw) for mark in mw.plain_answer_marks]
            if mw.accepts_plain():
                acceptors.append((None, mw))
        not_plain = header_names_pattern(
            [*NOT_PLAIN, *(h for mw in hooked for h in mw.plain_refused_by)],
            [p for mw in hooked for p in mw.plain_refused_by_prefix])
        return cls(admitters, acceptors, not_plain, core, full)

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.method in READS and not request.rel_url.raw_query_string and \
                self.not_plain.search("\n".join(request.headers)) is None:
            resp = await self._shortcut(request)
            if resp is not None:
                return resp
            if PRIMED in request:
                try:
                    return await self.full(request)
                finally:
                    unused = take_primed(request)
                    if unused is not None:
                        unused.close()
        return await self.full(request)

    async def _shortcut(self, request: web.Request) -> web.StreamResponse | None:
        try:
            path = api_path(request)
        except HTTPError:
            metrics.tally("plain_reads", "declined")
            return None  # the full pipeline gives each feature's own answer
        if path is None or path.obj is None:
            return None  # not an object (an S3 request, say): nothing to take back
        state = request_state(request)
        saved = state.copy()
        kept = None
        try:
            sub: web.Request | None = request
            for mw in self.admitters:
                sub = await mw.admit_plain(sub, path)
                if sub is None:
                    break
        except HTTPError:
            sub = None  # refused: the full pipeline gives each feature's own answer
        if sub is not None:
            try:
                resp = await self.core(sub)
            except HTTPError as exc:
                # What catch_errors makes of it on the full path: no feature in between
                # catches the core's errors. Never asked twice: a read that failed (a 503
                # after every replica timed out) must not cost its timeouts again.
                resp = exc.response()
            answer = resp.headers
            for mark, mw in self.acceptors:
                if mark is None:
                    if mw.accept_plain(sub, path, resp):
                        continue
                elif mark not in answer:
                    continue
                if isinstance(resp, BodyResponse):
                    if mw.replays_declined and sub is request and 200 <= resp.status < 300:
                        kept = resp
                    else:
                        resp.close()
                break
            else:
                metrics.tally("plain_reads", "shortcut")
                return resp
        state.clear()
        state.update(saved)
        if kept is not None:
            state[PRIMED] = [request.method, request.rel_url.raw_path_qs, kept]
        metrics.tally("plain_reads", "declined")
        return None


def replaying(core: Handler) -> Handler:
    """The core, answering a request whose answer the short cut already read (and a feature
    declined) with that answer instead of reading it again: the short cut's replay, kept
    here so that the core knows nothing of it."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if PRIMED in request:
            primed = take_primed(request)
            if primed is not None:
                return primed
        return await core(request)

    handle.__wrapped__ = core  # type: ignore[attr-defined]
    return handle


def take_primed(request: web.Request) -> BodyResponse | None:
    """The core's answer the short cut read for this request and a feature declined, once,
    and only to the request it answers (not to a sub-request for another path)."""
    primed = request.get(PRIMED)
    if primed is None or primed[2] is None or primed[0] != request.method \
            or primed[1] != request.rel_url.raw_path_qs:
        return None
    resp, primed[2] = primed[2], None
    return resp
