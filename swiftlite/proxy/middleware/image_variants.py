"""Image variants on GET: `?image=resize:fit:320:320/format:webp` on an object's URL answers a
resized, re-encoded copy of it (the grammar: swiftlite/image/grammar.py; README "Image
variants").

Authorization is exactly the original's: every variant request first sends a HEAD of the
original down the rest of the pipeline as the caller (its token, its Referer, its temp URL
signature, its S3 identity), and answers that HEAD's refusal if there is one. Only then is
the stored variant looked up (a hidden derived object, image_store.py, keyed by the
original's ETag and the canonical variant) or made: one GET of the original, again as the
caller, decoded in the process pool (swiftlite/image/pool.py), stored, and served.

- A temp URL covers a variant only when the `image` query was signed with the path
  (tempurl.py: the signed path is `/v1/a/c/o?image=<value as sent>`); a link signed for the
  bare path cannot ask for variants, and a variant link cannot fetch the original.
- Presets: `X-Container-Meta-Image-Preset-<name>: <variant>` makes `?image=<name>` that
  variant; `X-Container-Meta-Image-Free-Form: false` refuses (403) any variant spelled out in
  the query on that container unless a temp URL signed it, so strangers can ask only for its
  presets.
- `format:auto` picks AVIF or WebP from Accept (else the original's format); the answer says
  `Vary: Accept`, and each chosen format is its own stored variant.
- Concurrent first requests for one variant make it once (Flights); at most
  `image_account_concurrency` variants are made at once per account and proxy worker (429
  past `image_account_wait` seconds).
- Every refusal is a 4xx (400 grammar, 403 free-form off, 415 not an image or corrupt,
  422 past a limit, 429 busy); nothing about a variant is ever a 5xx.

Reads through S3 (`GET /bucket/key?image=...`) reach here as the S3 front end's Swift GET of
the object, which carries the query (s3/obj.py), signed by S3's own signature.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from swiftlite.common.http import HTTPError, error
from swiftlite.common.observe import metrics
from swiftlite.image.concurrency import AccountSlots, Flights
from swiftlite.image.formats import CONTENT_TYPES, auto_format, avif_available
from swiftlite.image.grammar import Variant, is_preset_name, parse
from swiftlite.image.limits import ImageRefused, Limits
from swiftlite.image.memo import VariantMemo
from swiftlite.image.pool import RenderPool
from swiftlite.image.render import Rendered
from swiftlite.proxy.middleware.image_store import VariantStore, variant_container, variant_names
from swiftlite.proxy.pipeline import DEFAULT_PIPELINE, PASS, Middleware
from swiftlite.proxy.request import ALLOW_RESERVED, ApiPath, answer_of, api_path, clone
from swiftlite.proxy.response import BodyResponse, bytes_response, close_answer

QUERY = "image"
PRESET_META = "x-container-meta-image-preset-"
FREE_FORM_META = "x-container-meta-image-free-form"
FALSE = ("false", "0", "no", "off", "f", "n")
# Headers of the caller's that would change the original's answer (a range, a condition on
# the original's ETag): the variant has its own ETag, judged here.
DROPPED = ("range", "if-range", "if-match", "if-none-match", "if-modified-since",
           "if-unmodified-since")
# What of an answer's headers a variant's answer carries (from a stored variant's, or made).
KEPT = ("content-type", "content-length", "etag", "last-modified")
# A PUT's reclaim: containers known to have no variants container, asked again after this
# many seconds; at most this many kept per worker.
NO_VARIANTS_TTL = 30.0
NO_VARIANTS_KEPT = 10_000


class ImageVariants(Middleware):
    name = "image"
    plain_reads = PASS  # acts on `?image=`, PUT and DELETE: a plain read has none
    wants_lane = True  # its own plain reads (the original's HEAD, a stored variant) take it

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.enabled = conf.get_bool("image_variants", True)
        self.limits = Limits(
            max_source_pixels=conf.get_int("image_max_source_pixels", 50_000_000),
            max_source_bytes=conf.get_size("image_max_source_bytes", 64 * 1024 * 1024),
            max_output_side=conf.get_int("image_max_output_side", 4096),
            max_frames=conf.get_int("image_max_frames", 500),
            max_animation_pixels=conf.get_int("image_max_animation_pixels", 200_000_000))
        self.pool = RenderPool(conf.get_int("image_workers", 2),
                               conf.get_int("image_worker_memory_mib", 1024),
                               conf.get_int("image_cpu_seconds", 30))
        self.slots = AccountSlots(conf.get_int("image_account_concurrency", 4),
                                  conf.get_float("image_account_wait", 10.0))
        self.store = VariantStore(app, conf.get_int("image_cache_ttl", 0))
        self._no_variants: dict[tuple[str, str], float] = {}
        self.flights = Flights()
        self.memo = VariantMemo(conf.get_size("image_memory_cache", 32 * 1024 * 1024),
                                conf.get_size("image_memory_cache_max_object", 256 * 1024))
        self.avif = avif_available()
        # Whether a temp URL's signature is judged (by tempurl, after this feature) at all:
        # without it a `temp_url_sig` in the query proves nothing.
        names = conf.get_str("pipeline", DEFAULT_PIPELINE).split()
        self.tempurl_after = "tempurl" in names and "image" in names and \
            names.index("tempurl") > names.index("image")

    def info(self) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        return {"formats": [f for f in CONTENT_TYPES if f != "avif" or self.avif] + ["auto"],
                "max_source_pixels": self.limits.max_source_pixels,
                "max_output_side": self.limits.max_output_side}

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if request.method in ("DELETE", "PUT") and self.enabled:
            return await self._changed(request)
        if not self.enabled or request.method not in ("GET", "HEAD") or \
                "image=" not in request.rel_url.raw_query_string:
            return await self.app(request)
        text = request.query.get(QUERY)
        path = api_path(request)
        if text is None or path is None or path.obj is None:
            return await self.app(request)
        try:
            return await self._variant(request, path, text)
        except ImageRefused as exc:
            metrics.image_variant("refused")
            return error(exc.status, exc.reason)

    async def _changed(self, request: web.Request) -> web.StreamResponse:
        """A deleted original's stored variants go too, and an overwritten one's variants
        of its older bytes, in the background. A DELETE costs one info lookup (is there a
        variants container?) when there is none; a PUT, on the hot path, asks at most once
        every NO_VARIANTS_TTL seconds per container and worker (a miss only leaves old
        variants to the next variant made of the new bytes, which reclaims them too)."""
        path = api_path(request)
        if path is None or path.obj is None or path.container is None or \
                request.get(ALLOW_RESERVED):
            return await self.app(request)
        container = variant_container(path)
        key = (path.account, container)
        put = request.method == "PUT"
        if put and self._no_variants.get(key, 0.0) > time.monotonic():
            return await self.app(request)
        # The reclaim's sub-requests are made from a copy taken before the body is read
        # (aiohttp clones no request whose body was read).
        base = clone(request, method="GET") if put else request
        resp = await self.app(request)
        if resp.status // 100 != 2:
            return resp
        info = await self.proxy.container_info(base, path.account, container)
        if info.status // 100 != 2:
            if put:
                if len(self._no_variants) >= NO_VARIANTS_KEPT:
                    self._no_variants.clear()
                self._no_variants[key] = time.monotonic() + NO_VARIANTS_TTL
            return resp
        keep = resp.headers.get("ETag", "").strip('"') if put else None
        if not put or keep:
            self.store.reclaim_later(base, path, container, keep)
        return resp

    # ---- one variant request ----------------------------------------------------------------

    async def _variant(self, request: web.Request, path: ApiPath,
                       text: str) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in DROPPED)
        if set(request.query) == {QUERY}:
            # Nothing else in the query (no temp URL, no version): the original's HEAD is a
            # plain read, which takes the short cut past the features that leave it alone
            # (plain_reads.py), as any client's would. It is half of a stored variant's cost.
            bare = URL.build(path=request.rel_url.raw_path, encoded=True)
            head = await answer_of(self.lane, clone(request, method="HEAD", headers=headers,
                                                    rel_url=bare))
        else:
            head = await answer_of(self.app, clone(request, method="HEAD", headers=headers))
        close_answer(head)
        if head.status // 100 != 2:
            return self._refusal(head)
        etag = head.headers.get("ETag", "").strip('"')
        size = head.headers.get("Content-Length", "")
        if size.isdigit() and int(size) > self.limits.max_source_bytes:
            raise ImageRefused(422, f"Source object too large (at most "
                                    f"{self.limits.max_source_bytes} bytes)")
        variant = await self._resolve(request, path, text)
        vary = variant.format == "auto"
        if vary:
            variant = variant.with_format(
                auto_format(request.headers.get("Accept", ""), self.avif))
        canonical = variant.canonical()
        names = variant_names(path, etag, canonical)
        key = (path.account, names)
        held = self.memo.get(key)
        if held is not None:
            metrics.image_variant("cached")
            return self._answer(request, bytes_response(200, CIMultiDict(held[0]), held[1]),
                                canonical, vary)
        # Through the plain-read short cut (`lane`, set by the stack): the hot-object cache
        # serves a popular variant there too.
        stored = await self.store.read(self.lane, request, path, names)
        if stored is not None:
            metrics.image_variant("cached")
            if self.memo.fits(stored.content_length or 0):
                stored = self._remember(key, stored.headers, await stored.read())
            return self._answer(request, stored, canonical, vary)
        rendered, led = await self.flights.run(
            key, lambda: self._make(request, path, headers, variant))
        metrics.image_variant("computed" if led else "joined")
        made = self._made(rendered)
        return self._answer(request, self._remember(key, made.headers, rendered.body),
                            canonical, vary)

    def _remember(self, key: tuple, headers: Any, body: bytes) -> BodyResponse:
        """A variant's bytes as an answer, kept in memory for the next request of `key`."""
        kept = {k: v for k, v in headers.items() if k.lower() in KEPT}
        self.memo.put(key, kept, body)
        return bytes_response(200, CIMultiDict(kept), body)

    async def _resolve(self, request: web.Request, path: ApiPath, text: str) -> Variant:
        """The variant a query names: a preset of the container's, or spelled out (when the
        container allows that)."""
        assert path.container is not None
        info = await self.proxy.container_info(request, path.account, path.container)
        meta = {k.lower(): v for k, v in info.meta.items()}
        if is_preset_name(text):
            preset = meta.get(PRESET_META + text.lower())
            if not preset:
                raise ImageRefused(400, f"No image preset {text!r} on this container")
            return self._checked(parse(preset, self.avif))
        # A temp URL's signature covers the variant (tempurl.py), and was checked by the
        # original's HEAD before this: a signed variant is one the key holder chose.
        signed = self.tempurl_after and "temp_url_sig" in request.query
        if meta.get(FREE_FORM_META, "").strip().lower() in FALSE and not signed:
            raise ImageRefused(403, "Free-form image variants are off for this container: "
                                    "ask for one of its presets, or a signed variant")
        return self._checked(parse(text, self.avif))

    def _checked(self, variant: Variant) -> Variant:
        variant.check(self.limits)
        return variant

    async def _make(self, request: web.Request, path: ApiPath, headers: CIMultiDict[str],
                    variant: Variant) -> Rendered:
        """Read the original (as the caller), make the variant, store it."""
        async with self.slots.slot(path.account):
            orig = await answer_of(self.app, clone(request, method="GET", headers=headers))
            if orig.status // 100 != 2 or not isinstance(orig, BodyResponse):
                close_answer(orig)
                # The original's own answer (gone since the HEAD, or a backend failure).
                raise ImageRefused(orig.status if orig.status // 100 != 2 else 415,
                                   "The original could not be read")
            # The ETag of the bytes read (the original may have changed since the HEAD): the
            # stored variant is filed under the bytes it was made from.
            etag = orig.headers.get("ETag", "").strip('"')
            data = await self._read_limited(orig)
            started = time.monotonic()
            rendered = await self.pool.render(data, variant, self.limits)
            metrics.image_computed(time.monotonic() - started)
        canonical = variant.canonical()
        names = variant_names(path, etag, canonical)
        # A variant expires with its original (the object-expirer removes both).
        await self.store.write(request, path, names, rendered, etag, canonical,
                               orig.headers.get("X-Delete-At"))
        self._no_variants.pop((path.account, names[0]), None)
        self.store.reclaim_later(request, path, names[0], etag)
        return rendered

    async def _read_limited(self, resp: BodyResponse) -> bytes:
        chunks, total = [], 0
        async for chunk in resp.chunks():
            total += len(chunk)
            if total > self.limits.max_source_bytes:
                resp.close()
                raise ImageRefused(422, "Source object too large")
            chunks.append(chunk)
        return b"".join(chunks)

    # ---- answers ----------------------------------------------------------------------------

    @staticmethod
    def _made(rendered: Rendered) -> BodyResponse:
        return bytes_response(200, CIMultiDict({
            "Content-Type": CONTENT_TYPES[rendered.format],
            "ETag": hashlib.md5(rendered.body).hexdigest()}), rendered.body)

    @staticmethod
    def _answer(request: web.Request, resp: BodyResponse, canonical: str,
                vary: bool) -> web.StreamResponse:
        for k in [k for k in resp.headers if k.lower() not in KEPT]:
            del resp.headers[k]
        resp.headers["X-Image-Variant"] = canonical
        if vary:
            resp.headers["Vary"] = "Accept"
        etag = resp.headers.get("ETag", "")
        wanted = request.headers.get("If-None-Match", "")
        if etag and wanted and (wanted.strip() == "*" or etag in
                                [t.strip().strip('"') for t in wanted.split(",")]):
            resp.close()
            out = web.Response(status=304, headers={"ETag": etag})
            if vary:
                out.headers["Vary"] = "Accept"
            return out
        return resp

    @staticmethod
    def _refusal(head: web.StreamResponse) -> web.Response:
        """The original's refusal (401, 403, 404...) as the variant's answer, with a body."""
        headers = {k: head.headers[k] for k in ("WWW-Authenticate", "Location")
                   if k in head.headers}
        reason = head.reason or "Error"
        return HTTPError(head.status, reason, headers).response()
