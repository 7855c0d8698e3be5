"""The object server: PUT/GET/HEAD/POST/DELETE of objects.

Paths: ``/{device}/{partition}/{account}/{container}/{object}``; the replication routes
(partition digests, object states, file sync) are ``sync``'s. Disk work leaves the event
loop in as few hops as possible: a small PUT (its whole body read) is one job for the
committer thread, written and flushed in a batch with every other queued PUT (see
``batch_commit``); a large PUT is one thread-pool hop per ``write_batch_size``; a small GET
is one hop (list, open, read, MD5). The on-disk format is described in ``writing`` (what
each file carries), ``hashdir`` (how it is committed) and ``reading``, the suffix digests in
``digests``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable

from aiohttp import web

from swiftlite.common import constraints, policies
from swiftlite.common.config import Section, config_true
from swiftlite.common.devices import DeviceChecker, device_roots
from swiftlite.common.hashing import hash_path
from swiftlite.common.http import HTTPError, error, split_path, txid
from swiftlite.common.observe import recon
from swiftlite.common.replica_groups import ALSO_DEVICES
from swiftlite.common.runtime.server import ANY_PATH, make_app
from swiftlite.common.sysmeta import (
    MUTABLE_SYSMETA,
    OBJECT_SYSMETA,
)
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.obj import grouped_put, sync
from swiftlite.obj.container_updates import ContainerUpdater, listing_update, parse_targets
from swiftlite.obj.engine import (
    bodysum,
    digests,
    durability,
    ec_archive,
    fileformat,
    hashdir,
    page_cache,
    read_plan,
    reading,
    writing,
)
from swiftlite.obj.engine.batch_commit import LARGE_BODY, MAX_JOBS, BatchCommitter
from swiftlite.obj.engine.read_plan import DEFAULT_CT, PASSED_HEADERS

log = logging.getLogger("swiftlite.object")
_PART_RE = re.compile(r"[0-9]{1,10}")


def _utf8(name: str, value: str) -> str:
    """A stored header value must be UTF-8: aiohttp hands other bytes over as lone
    surrogates, which could be neither stored nor sent back (a 400, not a 500)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPError(400, f"{name} must be valid UTF-8") from None
    return value


def _open_expired(request: web.Request) -> bool:
    """X-Open-Expired: the proxy passes it only where `allow_open_expired` is on."""
    return config_true(request.headers.get("X-Open-Expired", ""))


class ObjectServer:
    def __init__(self, conf: Section) -> None:
        self.devices = conf.get_str("devices", "/srv/node")
        self.policies = policies.load(conf.get_str("swift_dir", "/etc/swiftlite"))
        self.device_roots = device_roots(conf)
        # Stat calls (isdir, or ismount with mount_check) in the thread pool, cached briefly.
        self.device_checker = DeviceChecker(self.devices, conf.get_bool("mount_check", False))
        self.max_object_size = conf.get_size("max_object_size", constraints.MAX_FILE_SIZE)
        self.batch = conf.get_size("write_batch_size", 1024 * 1024)
        self.read_chunk = conf.get_size("read_chunk_size", 1024 * 1024)
        self.fsync = conf.get_bool("fsync", True)
        self.fold_bytes = conf.get_size("journal_fold_bytes", digests.FOLD_BYTES)
        self.updater = ContainerUpdater(conf)
        # Bodies this big or bigger are written with O_DIRECT (swiftlite/obj/engine/direct_io.py).
        self.direct_body = conf.get_size("direct_io_body", LARGE_BODY)
        self.committer = BatchCommitter(conf.get_int("commit_batch_jobs", MAX_JOBS),
                                        conf.get_int("commit_threads", 1),
                                        conf.get_int("large_commit_threads", 2),
                                        conf.get_size("large_commit_body", LARGE_BODY),
                                        self.direct_body,
                                        conf.get_size("written_cache_size", page_cache.WINDOW)
                                        if conf.get_bool("drop_written_cache", True) else None,
                                        conf.get_bool("commit_pipeline", False))
        self._folding: set[tuple[str, int]] = set()

    # ---- plumbing ---------------------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        await self.updater.start()
        n = await run_blocking(self._clean_all_tmp)
        if n:
            log.info("removed %d stale temp files", n)

    def _clean_all_tmp(self) -> int:
        removed = 0
        # The DB devices too: a container server's saved account updates pass through tmp/.
        for root in self.device_roots:
            try:
                devs = os.listdir(root)
            except FileNotFoundError:
                continue
            removed += sum(hashdir.clean_tmp(os.path.join(root, d)) for d in devs)
        return removed

    async def on_cleanup(self, app: web.Application) -> None:
        await self.updater.close()

    async def device_path(self, device: str) -> str:
        """The device's path; HTTPError 400 for a bad name, 507 if missing or unmounted."""
        return await self.device_checker.check(device)

    @staticmethod
    def partition(value: str) -> int:
        if not _PART_RE.fullmatch(value) or int(value) >= 2**32:
            raise HTTPError(400, "Invalid partition")
        return int(value)

    @staticmethod
    def timestamp(request: web.Request) -> Timestamp:
        raw = request.headers.get("X-Timestamp")
        if not raw:
            raise HTTPError(400, "Missing X-Timestamp")
        try:
            return Timestamp.parse(raw)
        except TimestampError:
            raise HTTPError(400, f"Invalid X-Timestamp {raw!r}") from None

    async def object_path(self, request: web.Request) -> tuple[str, int, str, str, str]:
        dev, part, acc, cont, obj = split_path(request, 5, 5, True)
        assert dev and part and acc and cont and obj is not None
        # Only the cluster reaches this server: reserved names are fine here.
        for bad in (constraints.check_account(acc, True),
                    constraints.check_container(cont, True),
                    constraints.check_object(obj, True)):
            if bad:
                raise HTTPError(400, bad)
        dev_path = await self.device_path(dev)
        return dev_path, self.policy_partition(request, part), acc, cont, obj

    def is_ec(self, request: web.Request) -> bool:
        """Whether the request's policy (already checked by object_path) is erasure-coded."""
        policy = self.policies.get(policies.header_index(request.headers))
        return policy is not None and policy.is_ec

    def policy_partition(self, request: web.Request, part: str) -> int:
        """The URL's partition, of the policy X-Backend-Storage-Policy-Index names."""
        try:
            idx = policies.header_index(request.headers)
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        if self.policies.get(idx) is None:
            raise HTTPError(400, f"No storage policy with index {idx}")
        return fileformat.policy_part(self.partition(part), idx)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        handler = {"GET": self.GET, "HEAD": self.GET, "PUT": self.PUT, "POST": self.POST,
                   "DELETE": self.DELETE}.get(request.method)
        if handler is None:
            return error(405, "Method not allowed")
        try:
            return await handler(request)
        except hashdir.DeviceMissing:
            return error(507, "Insufficient Storage")
        except OSError as exc:
            if hashdir.is_enospc(exc):
                return error(507, "Insufficient Storage")
            raise

    def _maybe_fold(self, dev_path: str, part: int, journal_size: int) -> None:
        key = (dev_path, part)
        if journal_size <= self.fold_bytes or key in self._folding:
            return
        self._folding.add(key)

        async def run() -> None:
            try:
                await run_blocking(digests.fold, dev_path, part)
            except Exception:
                log.exception("folding digests of %s/%s", dev_path, part)
            finally:
                self._folding.discard(key)

        task = asyncio.ensure_future(run())
        self.updater.tasks.add(task)
        task.add_done_callback(self.updater.tasks.discard)

    # ---- writes -----------------------------------------------------------------------------

    @staticmethod
    def _delete_at(request: web.Request, ts: Timestamp) -> str | None:
        v = request.headers.get("X-Delete-At")
        if v is None:
            return None
        if not v.isdigit():
            raise HTTPError(400, "Non-integer X-Delete-At")
        if int(v) <= ts.seconds:
            raise HTTPError(400, "X-Delete-At in past")
        return v

    def _user_metadata(self, request: web.Request, ts: Timestamp) -> dict[str, str]:
        bad = constraints.check_metadata(request.headers, "object")
        if bad:
            raise HTTPError(400, bad)
        md = {k.title(): v for k, v in request.headers.items()
              if k.lower().startswith(fileformat.USER_META)}
        for h in PASSED_HEADERS:
            if h != "X-Delete-At" and h in request.headers:  # X-Delete-At: checked below
                md[h] = _utf8(h, request.headers[h])
        delete_at = self._delete_at(request, ts)
        if delete_at is not None:
            md["X-Delete-At"] = delete_at
        return md

    async def PUT(self, request: web.Request) -> web.Response:
        dev_path, part, acc, cont, obj = await self.object_path(request)
        ts = self.timestamp(request)
        try:
            cl = request.content_length
        except ValueError:
            raise HTTPError(400, "Invalid Content-Length") from None
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if cl is None and not chunked:
            return error(411, "Length Required")
        if cl is not None and cl > self.max_object_size:
            return error(413, "Request Entity Too Large")
        metadata = self._user_metadata(request, ts)
        for k, v in request.headers.items():
            if k.lower().startswith(OBJECT_SYSMETA):
                metadata[k.title()] = _utf8(k, v)
        metadata["name"] = f"/{acc}/{cont}/{obj}"
        metadata["Content-Type"] = _utf8("Content-Type", request.headers.get("Content-Type")
                                         or DEFAULT_CT)
        hexhash = hash_path(acc, cont, obj)
        also = request.headers.get(ALSO_DEVICES)
        # An EC policy's PUT is a fragment archive and its footer, kept pending until the
        # proxy's commit (obj/engine/ec_archive.py).
        splitter = ec_archive.FooterSplitter() if self.is_ec(request) else None
        if also is not None:
            if splitter is not None:
                raise HTTPError(400, f"{ALSO_DEVICES} with a fragment archive")
            return await grouped_put.put_grouped(self, request, dev_path, part,
                                                 (acc, cont, obj), ts, cl, metadata, hexhash,
                                                 also)
        writer = writing.DataWriter(dev_path, part, hexhash, fsync=self.fsync,
                                    refuse_existing=request.headers.get("If-None-Match") == "*",
                                    direct=self.direct_body > 0,
                                    if_match=grouped_put.if_match(request),
                                    ext="data" if splitter is None else ec_archive.PENDING)
        try:
            res = await self._receive(request, writer, cl, metadata, ts, splitter)
        except ec_archive.BadFooter as exc:
            return error(400, str(exc))
        except hashdir.Conflict as exc:
            return error(409, "Conflict", {"X-Backend-Timestamp": exc.stored})
        except writing.ETagMismatch:
            return error(422, "Unprocessable Entity: ETag mismatch")
        except writing.Exists:
            return error(412, "Precondition Failed")
        finally:
            if not writer.done:  # also waits out a write still in a pool thread
                await run_blocking(writer.abort)
        targets = parse_targets(request.headers)
        if targets and splitter is None:  # an archive is listed when made durable
            await self.updater.update(dev_path, "PUT", acc, cont, obj, listing_update(
                ts, res.metadata, res.metadata["Content-Length"], res.metadata["ETag"]),
                targets, txid(request),
                policies.header_index(request.headers))
        self._maybe_fold(dev_path, part, res.journal_size)
        return web.Response(status=201, headers={"ETag": res.metadata["ETag"]})

    async def _ec_commit(self, request: web.Request) -> web.Response:
        """The second phase of an EC PUT: its pending archive becomes the object's."""
        dev_path, part, acc, cont, obj = await self.object_path(request)
        ts = self.timestamp(request)
        try:
            res, md = await run_blocking(ec_archive.make_durable, dev_path, part,
                                         hash_path(acc, cont, obj), ts.internal, self.fsync)
        except ec_archive.PendingMissing:
            return error(404, "Not Found")
        except hashdir.Conflict as exc:
            return error(409, "Conflict", {"X-Backend-Timestamp": exc.stored})
        targets = parse_targets(request.headers)
        if targets and res is not None:
            await self.updater.update(dev_path, "PUT", acc, cont, obj, listing_update(
                ts, md, *ec_archive.listing_size_etag(md)), targets, txid(request),
                policies.header_index(request.headers))
        if res is not None:
            self._maybe_fold(dev_path, part, res.journal_size)
        return web.Response(status=201)

    async def _receive(self, request: web.Request, writer: writing.DataWriter, cl: int | None,
                       metadata: dict[str, str], ts: Timestamp,
                       splitter: ec_archive.FooterSplitter | None = None,
                       ) -> hashdir.CommitResult:
        """Stream the body to the writer, one thread hop per `batch` bytes, then commit.
        With `splitter`, the body ends with an EC footer: the archive's metadata, and its
        MD5 to check the archive against."""
        pending: list[bytes] = []
        pending_len = 0
        total = 0
        first = True
        while True:
            try:
                chunk = await request.content.readany()
            except HTTPError:  # a malformed body: the client's 400
                raise
            except Exception:  # reset, payload error, truncated chunked body
                raise HTTPError(499, "Client disconnected") from None
            if not chunk:
                break
            total += len(chunk)
            if total > self.max_object_size:
                raise HTTPError(413, "Request Entity Too Large")
            for piece in (chunk,) if splitter is None else splitter.feed(chunk):
                pending.append(piece)
                pending_len += len(piece)
            if pending_len >= self.batch or len(pending) >= 512:
                batch, pending, pending_len = pending, [], 0
                if first:
                    first = False
                    await run_blocking(self._first_write, writer, batch, ts.internal)
                else:
                    await run_blocking(writer.write, batch)
        if cl is not None and total < cl:
            raise HTTPError(499, "Client disconnected")
        if cl is not None and total > cl:
            raise HTTPError(400, "Body longer than Content-Length")
        expected = request.headers.get("ETag")
        if splitter is not None:
            rest, ec_metadata, expected = splitter.finish()
            pending += rest
            metadata.update(ec_metadata)
        if first and durability.MODE == "batch":  # the whole body in hand: commit in a batch
            _, (res,) = await self.committer.put([writer], pending, metadata, ts.internal,
                                                 expected)
            if isinstance(res, BaseException):
                raise res
            return res
        return await run_blocking(writer.put, pending, metadata, ts.internal, expected)

    @staticmethod
    def _first_write(writer: writing.DataWriter, batch: list[bytes], ts: str) -> None:
        writer.check_newer(ts)  # refuse a stale PUT before writing megabytes of it
        writer.write(batch)

    async def POST(self, request: web.Request) -> web.Response:
        if request.headers.get(ec_archive.COMMIT_HEADER):
            return await self._ec_commit(request)
        dev_path, part, acc, cont, obj = await self.object_path(request)
        ts = self.timestamp(request)
        metadata = self._user_metadata(request, ts)
        if request.headers.get("Content-Type"):
            metadata["Content-Type"] = _utf8("Content-Type", request.headers["Content-Type"])
        for k, v in request.headers.items():
            if k.lower().startswith(MUTABLE_SYSMETA):  # a patch (common/sysmeta.py)
                metadata[k.title()] = _utf8(k, v)
        hexhash = hash_path(acc, cont, obj)
        try:
            res = await run_blocking(writing.write_marker, dev_path, part, hexhash,
                                     ts.internal, "meta", metadata, self.fsync,
                                     _open_expired(request))
        except writing.NotFound as exc:
            hdrs = {"X-Backend-Timestamp": exc.tombstone} if exc.tombstone else None
            return error(404, "Not Found", hdrs)
        except hashdir.Conflict as exc:
            return error(409, "Conflict", {"X-Backend-Timestamp": exc.stored})
        targets = parse_targets(request.headers)
        if targets and "Content-Type" in metadata and res.metadata:
            # A new content type shows in listings, as the row of a write at the POST's time.
            old = res.metadata
            await self.updater.update(dev_path, "PUT", acc, cont, obj, listing_update(
                ts, old, *ec_archive.listing_size_etag(old), metadata["Content-Type"]),
                targets, txid(request),
                policies.header_index(request.headers))
        self._maybe_fold(dev_path, part, res.journal_size)
        return web.Response(status=202)

    async def DELETE(self, request: web.Request) -> web.Response:
        """A tombstone. X-If-Delete-At (the object-expirer's, as in Swift) makes it
        conditional: 404 when there is no object at all, 409 when the stored one is not
        older, 412 unless its current X-Delete-At is that time; nothing is written then.
        A matching one answers 204 even though the object had expired."""
        dev_path, part, acc, cont, obj = await self.object_path(request)
        ts = self.timestamp(request)
        if_delete_at = request.headers.get("X-If-Delete-At")
        if if_delete_at is not None:
            if_delete_at = if_delete_at.strip()
            if not (if_delete_at.isascii() and if_delete_at.isdigit()):
                return error(400, "Bad X-If-Delete-At header value")
        hexhash = hash_path(acc, cont, obj)
        try:
            res = await run_blocking(writing.write_marker, dev_path, part, hexhash,
                                     ts.internal, "ts", {"name": f"/{acc}/{cont}/{obj}"},
                                     self.fsync, False,
                                     None if if_delete_at is None else int(if_delete_at),
                                     request.headers.get(policies.IF_PRESENT_HEADER) == "true")
        except hashdir.Conflict as exc:
            return error(409, "Conflict", {"X-Backend-Timestamp": exc.stored})
        except writing.NotFound:
            return error(404, "Not Found")
        except writing.DeleteAtMismatch:
            return error(412, "X-If-Delete-At and X-Delete-At do not match")
        targets = parse_targets(request.headers)
        if targets:
            await self.updater.update(dev_path, "DELETE", acc, cont, obj,
                                      {"X-Timestamp": ts.internal}, targets, txid(request),
                                      policies.header_index(request.headers))
        self._maybe_fold(dev_path, part, res.journal_size)
        if res.existed or if_delete_at is not None:
            return web.Response(status=204)
        return error(404, "Not Found", {"X-Backend-Timestamp": ts.internal})

    # ---- reads ------------------------------------------------------------------------------

    async def GET(self, request: web.Request) -> web.StreamResponse:
        dev_path, part, acc, cont, obj = await self.object_path(request)
        hexhash = hash_path(acc, cont, obj)
        is_get = request.method == "GET"
        full = is_get and not request.headers.get("Range")
        pending = request.headers.get(ec_archive.PENDING_HEADER)
        if pending and self.is_ec(request):  # a version whose commit some nodes missed
            try:
                ts = Timestamp.parse(pending).internal
            except TimestampError:
                raise HTTPError(400, f"Invalid {ec_archive.PENDING_HEADER}") from None
            info = await run_blocking(ec_archive.open_pending, dev_path, part, hexhash, ts)
        else:
            info = await run_blocking(reading.open_object, dev_path, part, hexhash,
                                      self.read_chunk if is_get else 0, full)
        try:
            return await self._answer(request, info, dev_path, part, hexhash, is_get, full)
        finally:
            info.close()

    async def _answer(self, request: web.Request, info: reading.ObjectInfo, dev_path: str,
                      part: int, hexhash: str, is_get: bool, full: bool) -> web.StreamResponse:
        plan = read_plan.plan_read(request.headers, info, is_get, full)
        if plan.corrupt:
            await self._quarantine(dev_path, part, hexhash)
        if plan.reason is not None:
            return error(plan.status, plan.reason, plan.headers)
        if not is_get or plan.status not in (200, 206):
            if not is_get and plan.status == 200:
                plan.headers["Content-Length"] = str(plan.length)
            return web.Response(status=plan.status, headers=plan.headers)
        if all(isinstance(p, bytes) for p in plan.pieces):
            body = b"".join(p for p in plan.pieces if isinstance(p, bytes))
            return web.Response(status=plan.status, body=body, headers=plan.headers)
        resp = web.StreamResponse(status=plan.status, headers=plan.headers)
        resp.content_length = plan.length
        await resp.prepare(request)
        verifier = bodysum.Verifier(info.metadata) if plan.verify else None

        def read(off: int, length: int) -> Awaitable[bytes]:
            return run_blocking(reading.read_chunk, info.fd, off, length, verifier)

        for piece in plan.pieces:
            if isinstance(piece, bytes):
                await resp.write(piece)
                continue
            try:
                async for data in read_plan.span_chunks(read, *piece, self.read_chunk,
                                                        verifier):
                    await resp.write(data)
            except read_plan.CorruptCopy:
                await self._quarantine(dev_path, part, hexhash)
                if request.transport is not None:
                    request.transport.abort()
                raise ConnectionResetError("corrupt object: connection cut before the end") \
                    from None
        await resp.write_eof()
        return resp

    async def _quarantine(self, dev_path: str, part: int, hexhash: str) -> None:
        """Take a copy whose bytes do not match its ETag out of service; the replicator
        restores a good one."""
        log.error("ETag mismatch, quarantining %s/objects/%s/%s", dev_path, part, hexhash)
        await run_blocking(reading.quarantine, dev_path, part, hexhash)


OBJECT_SERVER = web.AppKey("object_server", object)


async def create_app(conf: Section) -> web.Application:
    durability.configure(conf.get_str("sync_mode", "batch"),
                         conf.get_float("sync_gather_ms", 2.0))
    server = ObjectServer(conf)
    app = make_app(backend=True)  # answers only signed requests from the cluster
    app[OBJECT_SERVER] = server
    recon.register(app, conf, "object")  # before the catch-all route
    app.router.add_route("*", ANY_PATH, server.dispatch)
    sync.register_sync_routes(app, conf)  # the replicator's MERGE digests/states/sync
    app.on_startup.append(server.on_startup)
    app.on_cleanup.append(server.on_cleanup)
    return app
