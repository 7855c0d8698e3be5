"""Bulk operations, as Swift's `bulk` middleware: many deletes, or a whole archive of uploads,
in one request.

`POST` or `DELETE` with `?bulk-delete` on an account (or any deeper path: only its account
counts) deletes the newline-separated, URL-encoded `/container/object` and `/container` paths
of its `text/plain` body: at most `max_deletes_per_request` of them, objects first, then
containers, `delete_concurrency` at a time; after `max_failed_deletes` failures it stops.

`PUT` with `?extract-archive=tar|tar.gz|tar.bz2` on an account, a container or a
container/prefix stores every regular file of the archive as an object below that path (on an
account, a file's first path component names its container, created when missing; files at
the top level are skipped). The archive streams through `tarfile` in a worker thread fed from
the event loop, one member at a time, so memory stays bounded whatever its size. Entries with
a `..` component or an absolute name are refused (Swift stores them under literal names),
as are entries past the maximum object size; pax xattrs `user.mime_type` and `user.meta.*`
become Content-Type and X-Object-Meta-*.

Both answer 200 at once and then, as Swift does, a space every `yield_frequency` seconds
while working (so clients and load balancers do not time out), and finally a report in the
format the Accept header picks (plain text, JSON or XML): counts, "Response Status" (the real
outcome, e.g. "400 Bad Request"), "Response Body" and "Errors" ([quoted path, status] pairs).

Bulk sits before auth, as in Swift: every delete, HEAD, container PUT and object PUT is a
sub-request through the rest of the pipeline carrying the caller's tokens, so auth, ACLs and
quotas judge each one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import re
import tarfile
import threading
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from aiohttp import web
from multidict import CIMultiDict

from swiftlite.common.http import HTTPError
from swiftlite.proxy.middleware.reports import (
    MAX_PATH_LENGTH,
    Body,
    Outcome,
    Report,
    best_format,
    length_known,
    quoted,
    report_stream,
    status_line,
)
from swiftlite.proxy.pipeline import PASS, Middleware
from swiftlite.proxy.request import ApiPath, api_path, sub_request
from swiftlite.proxy.response import BodyResponse, after_first_chunk

log = logging.getLogger("swiftlite.proxy")

ARCHIVES = {"tar": "", "tar.gz": "gz", "tar.bz2": "bz2"}
# What identifies the caller on each sub-request.
AUTH_HEADERS = ("X-Auth-Token", "X-Storage-Token", "X-Service-Token")
READ_CHUNK = 65536
# tarfile reads pax and GNU long-name headers into memory whole: refuse absurd ones.
MAX_META_HEADER = 1024 * 1024
META_HEADER_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                     tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


# ---- the archive reader's thread -------------------------------------------------------------

class Worker:
    """One daemon thread running blocking calls in order for the event loop (the tar reader
    has state, so one thread per archive). Daemon: an archive abandoned mid-read never holds
    up the process's exit."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="bulk-extract", daemon=True).start()

    def _serve(self) -> None:
        while True:
            call = self.calls.get()
            if call is None:
                return
            fut, fn, args = call
            try:
                outcome: tuple[bool, Any] = (True, fn(*args))
            except BaseException as exc:  # handed to the awaiting coroutine
                outcome = (False, exc)
            try:
                self.loop.call_soon_threadsafe(_settle, fut, outcome)
            except RuntimeError:  # the loop is gone: nobody is waiting any more
                return

    def run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        fut = self.loop.create_future()
        self.calls.put((fut, fn, args))
        return fut

    def stop(self) -> None:
        self.calls.put(None)


def _settle(fut: asyncio.Future, outcome: tuple[bool, Any]) -> None:
    if fut.cancelled():
        return
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class BodyPipe:
    """The request body as the blocking file tarfile wants, in the worker thread: each read
    asks the event loop for the next bytes and waits for them."""

    def __init__(self, body: Body, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.body = body
        self.loop = loop
        self.timeout = timeout
        self.closed = False
        self.pending: concurrent.futures.Future | None = None
        self.lock = threading.Lock()  # close() and a read starting must not cross

    def read(self, size: int = -1) -> bytes:
        size = size if size and size > 0 else READ_CHUNK
        with self.lock:
            if self.closed:
                raise Outcome(499)
            fut = self.pending = asyncio.run_coroutine_threadsafe(self.body.read(size),
                                                                  self.loop)
        try:
            return fut.result(self.timeout)
        except TimeoutError:
            fut.cancel()
            raise Outcome(408) from None
        except concurrent.futures.CancelledError:
            raise Outcome(499) from None

    def close(self) -> None:
        """From the loop, when the job ends: a read still waiting for the client ends now
        (a vanished client's connection may never say so), and so does the thread."""
        with self.lock:
            self.closed = True
            fut, self.pending = self.pending, None
        if fut is not None:
            fut.cancel()


class GuardedTarInfo(tarfile.TarInfo):
    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in META_HEADER_TYPES and self.size > MAX_META_HEADER:
            raise tarfile.ReadError("extended header too large")
        return super()._proc_member(tar)  # type: ignore[misc]


def open_archive(pipe: BodyPipe, compression: str) -> tarfile.TarFile:
    return tarfile.open(mode="r|" + compression, fileobj=pipe, encoding="utf-8",
                        tarinfo=GuardedTarInfo)


def next_member(tar: tarfile.TarFile, small: int) -> tuple[tarfile.TarInfo | None, bytes | None]:
    """The next member, with its data when it is a regular file of at most `small` bytes."""
    member = tar.next()
    tar.members.clear()  # tarfile keeps every member it met: unbounded for a long stream
    if member is None or not member.isfile() or member.size > small:
        return member, None
    f = tar.extractfile(member)
    return member, f.read() if f is not None else b""


def _is_utf8(name: str) -> bool:
    """False for a name whose archive bytes were not UTF-8 (tarfile keeps them escaped)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def pax_header(key: str, value: str) -> str | None:
    """The object header a pax xattr record stands for (None: not user metadata)."""
    if any(c < " " or c == "\x7f" for c in value):
        return None
    for prefix in ("SCHILY.xattr.user.", "LIBARCHIVE.xattr.user."):
        if key.startswith(prefix):
            rest = key[len(prefix):]
            if rest == "mime_type":
                return "Content-Type"
            if rest.startswith("meta.") and _HEADER_NAME.fullmatch(rest[5:]):
                return "X-Object-Meta-" + rest[5:]
    return None


# ---- the middleware --------------------------------------------------------------------------

class Bulk(Middleware):
    name = "bulk"
    plain_reads = PASS  # acts on ?extract-archive and ?bulk-delete: a plain read has no query

    def __init__(self, app, proxy, conf) -> None:
        super().__init__(app, proxy, conf)
        self.max_containers_per_extraction = conf.get_int("max_containers_per_extraction",
                                                          10000)
        self.max_failed_extractions = conf.get_int("max_failed_extractions", 1000)
        self.max_deletes_per_request = conf.get_int("max_deletes_per_request", 10000)
        self.max_failed_deletes = conf.get_int("max_failed_deletes", 1000)
        self.yield_frequency = max(conf.get_float("yield_frequency", 10.0), 0.01)
        self.delete_concurrency = min(max(conf.get_int("delete_concurrency", 2), 1), 1000)
        self.delete_container_retry_count = conf.get_int("delete_container_retry_count", 0)
        self.extract_concurrency = min(max(conf.get_int("extract_concurrency", 8), 1), 64)
        # Each extraction reads its archive on a thread of its own: bound them, so a tenant
        # starting many cannot exhaust the process (later ones wait their turn).
        self.extractions = asyncio.Semaphore(max(conf.get_int("max_concurrent_extractions",
                                                              8), 1))
        self.retry_interval = 1.5  # seconds, raised to the retry's number (Swift's backoff)

    def info_entries(self) -> dict[str, Any]:
        return {
            "bulk_delete": {"max_deletes_per_request": self.max_deletes_per_request,
                            "max_failed_deletes": self.max_failed_deletes},
            "bulk_upload": {"max_containers_per_extraction": self.max_containers_per_extraction,
                            "max_failed_extractions": self.max_failed_extractions},
        }

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        query = request.query
        if method == "PUT" and "extract-archive" in query:
            path = api_path(request)
            if path is not None:
                compression = ARCHIVES.get(query["extract-archive"].lower().strip("."))
                if compression is None:
                    raise HTTPError(400, "Unsupported archive format")
                report = Report("extract", {"Response Status": status_line(201),
                                            "Response Body": "", "Number Files Created": 0})
                return await self.respond(request, report, lambda fmt: self.extract(
                    request, path, compression, report, fmt))
        if method in ("POST", "DELETE") and "bulk-delete" in query:
            path = api_path(request)
            if path is not None:
                report = Report("delete", {"Response Status": status_line(200),
                                           "Response Body": "", "Number Deleted": 0,
                                           "Number Not Found": 0})
                return await self.respond(request, report, lambda fmt: self.delete(
                    request, path, report, fmt))
        return await self.app(request)

    # ---- the streamed answer -----------------------------------------------------------------

    async def respond(self, request: web.Request, report: Report,
                      job: Callable[[str | None], Awaitable[None]]) -> BodyResponse:
        fmt = best_format(request.headers.get("Accept"))
        headers = {"Content-Type": fmt} if fmt else {}
        return await after_first_chunk(200, headers, report_stream(report, job, fmt,
                                                                   self.yield_frequency))

    # ---- sub-requests --------------------------------------------------------------------------

    def sub_headers(self, request: web.Request) -> CIMultiDict[str]:
        return CIMultiDict((k, request.headers[k]) for k in AUTH_HEADERS
                           if k in request.headers)

    async def send(self, request: web.Request, method: str, path: str,
                   headers: CIMultiDict[str] | None = None, body: Any = None) -> int:
        """One sub-request through the rest of the pipeline; its status."""
        try:
            # (inside: header values that are not UTF-8, from an archive's xattrs, are
            # this file's 400, raised by sub_request)
            sub = sub_request(request, method, path,
                              headers if headers is not None else self.sub_headers(request),
                              body)
            resp = await self.app(sub)
        except HTTPError as exc:
            return exc.status
        if isinstance(resp, BodyResponse):
            resp.close()
        return resp.status

    # ---- bulk delete -----------------------------------------------------------------------------

    async def delete(self, request: web.Request, path: ApiPath, report: Report,
                     fmt: str | None) -> None:
        if fmt is None:
            raise Outcome(406)
        ctype = request.headers.get("Content-Type")
        if ctype and not ctype.startswith("text/plain"):
            raise Outcome(406)  # only newline-separated names are understood
        lines = await self.read_names(request)
        prefix = f"/{path.version}/{quote(path.account)}/"
        objects: list[tuple[bytes, str | None]] = []
        containers: list[tuple[bytes, str | None]] = []
        for line in lines:
            if not line:
                continue
            raw = unquote_to_bytes(line)
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                name = None
            target: str | None = None
            if name is not None and "\x00" not in name:
                target = prefix + quote(name.lstrip("/"))
            # Objects first, so that a listed container is empty when its turn comes.
            group = objects if b"/" in raw.strip(b"/") else containers
            group.append((raw, target))
        for group in (objects, containers):
            await self.delete_group(request, group, report)
        if report.errors:
            report.fields["Response Status"] = status_line(report.failure_status)
        elif not (report.fields["Number Deleted"] or report.fields["Number Not Found"]):
            raise Outcome(400, "Invalid bulk delete.")

    async def read_names(self, request: web.Request) -> list[bytes]:
        """The body's lines, stripped (empty ones too: they count against the maximum)."""
        if not length_known(request):
            raise Outcome(411)
        body = Body(request, self.proxy.client_timeout)
        limit = self.max_deletes_per_request
        lines: list[bytes] = []
        pending = b""
        while True:
            data = await body.read(READ_CHUNK)
            *complete, pending = (pending + data).split(b"\n")
            if not data and pending.strip():
                complete.append(pending)  # the last line, without its newline
            lines.extend(line.strip() for line in complete)
            if len(lines) > limit:
                raise Outcome(413, f"Maximum Bulk Deletes: {limit} per request")
            if any(len(line) > 2 * MAX_PATH_LENGTH for line in (pending, *complete)):
                raise Outcome(400, "Invalid File Name")
            if not data:
                return lines

    async def delete_group(self, request: web.Request, items: list[tuple[bytes, str | None]],
                           report: Report) -> None:
        """Deletes `items`, delete_concurrency at a time; after max_failed_deletes failures
        no new one starts, those under way finish, and the job ends."""
        todo = iter(items)
        counts = report.fields

        async def worker() -> None:
            for raw, target in todo:  # one shared iterator: each item is taken once
                if len(report.errors) >= self.max_failed_deletes:
                    return
                if target is None:
                    report.fail(raw, 412)  # not UTF-8, or a NUL
                    continue
                status = await self.delete_one(request, target)
                if status // 100 == 2:
                    counts["Number Deleted"] += 1
                elif status == 404:
                    counts["Number Not Found"] += 1
                else:
                    report.fail(raw, status)

        await asyncio.gather(*(worker() for _ in range(self.delete_concurrency)))
        if len(report.errors) >= self.max_failed_deletes:
            raise Outcome(400, "Max delete failures exceeded")

    async def delete_one(self, request: web.Request, target: str) -> int:
        tries = 0
        while True:
            status = await self.send(request, "DELETE", target)
            # A container just emptied may still list its objects for a moment.
            if status != 409 or tries >= self.delete_container_retry_count:
                return status
            tries += 1
            await asyncio.sleep(self.retry_interval ** tries)

    # ---- extract archive ----------------------------------------------------------------------

    async def extract(self, request: web.Request, path: ApiPath, compression: str,
                      report: Report, fmt: str | None) -> None:
        if fmt is None:
            raise Outcome(406)
        if not length_known(request):
            raise Outcome(411)
        base = "/".join(p for p in (path.container, path.obj) if p).rstrip("/")
        loop = asyncio.get_running_loop()
        timeout = self.proxy.client_timeout
        pipe = BodyPipe(Body(request, timeout), loop, timeout)
        async with self.extractions:
            worker = Worker(loop)
            try:
                tar = await worker.run(open_archive, pipe, compression)
                await self.extract_members(request, path, base, tar, worker, report)
            except (tarfile.TarError, zlib.error, EOFError) as exc:
                raise Outcome(400, f"Invalid Tar File: {exc}") from None
            finally:
                pipe.close()
                worker.stop()
        if report.errors:
            report.fields["Response Status"] = status_line(report.failure_status)
        elif not report.fields["Number Files Created"]:
            raise Outcome(400, "Invalid Tar File: No Valid Files")

    async def extract_members(self, request: web.Request, path: ApiPath, base: str,
                              tar: tarfile.TarFile, worker: Worker, report: Report) -> None:
        small = self.proxy.put_buffer_size
        seen: set[str] = set()  # containers already checked (or created)
        created = 0
        # Small members are read whole and stored extract_concurrency at a time (each write
        # waits for a flush; several share one); a bigger one streams from the archive, so
        # nothing else reads it meanwhile.
        inflight: set[asyncio.Task] = set()
        refused: list[bool] = []  # set by a PUT answered 401: the caller is nobody

        async def settle(wanted: int) -> None:
            while len(inflight) > wanted:
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                inflight.difference_update(done)
                for task in done:
                    task.result()  # a bug in a PUT is the job's, not one file's

        async def store(dest: str, obj_path: str, headers: CIMultiDict[str], body: Any,
                        container_failure: list[str] | None) -> None:
            status = await self.send(request, "PUT", dest, headers, body)
            if status // 100 == 2:
                report.fields["Number Files Created"] += 1
                return
            if container_failure:
                report.errors.append(container_failure)
            report.fail(obj_path, status)
            if status == 401:
                refused.append(True)

        try:
            while not refused:
                member, data = await worker.run(next_member, tar, small)
                if member is None or len(report.errors) >= self.max_failed_extractions:
                    break
                if not member.isfile():
                    continue  # directories, links, devices: nothing to store
                name = member.name[2:] if member.name.startswith("./") else member.name
                obj_path = f"{base}/{name}" if base else name
                if name.startswith("/") or ".." in name.split("/"):
                    report.fail(obj_path, 400)  # never anywhere but below the target
                    continue
                if "/" not in obj_path:
                    continue  # a file at the account's top level has no container
                container, _, obj = obj_path.partition("/")
                bad = self.refusal(obj, obj_path, member.size)
                if bad:
                    report.fail(obj_path, bad)
                    continue
                cont_path = f"/{path.version}/{quote(path.account)}/{quote(container)}"
                container_failure: list[str] | None = None
                if container not in seen:
                    status = await self.ensure_container(request, cont_path)
                    if status == 201:
                        created += 1
                        if created > self.max_containers_per_extraction:
                            raise Outcome(400, f"More than {self.max_containers_per_extraction}"
                                               " containers to create from tar.")
                    elif status // 100 != 2:
                        if status == 401:
                            raise Outcome(401)
                        # The object PUT may still succeed (a write ACL without read access).
                        container_failure = [
                            quoted(f"/{path.version}/{path.account}/{container}"),
                            status_line(status)]
                    seen.add(container)
                put = store(f"{cont_path}/{quote(obj)}", obj_path,
                            self.put_headers(request, member),
                            data if data is not None else
                            self.member_chunks(tar, member, worker), container_failure)
                if data is None:
                    await put
                else:
                    await settle(self.extract_concurrency - 1)
                    inflight.add(asyncio.ensure_future(put))
            await settle(0)
        finally:
            if inflight:  # ended early (an error, the client left): let started PUTs finish
                await asyncio.wait(inflight)
        if refused:
            raise Outcome(401)

    def refusal(self, obj: str, obj_path: str, size: int) -> int | None:
        """The status refusing a member before any request, or None."""
        if not obj:
            return 400  # "container/": no object name
        if "\x00" in obj_path or not _is_utf8(obj_path):
            return 412
        if size > self.proxy.max_file_size:
            return 413
        return None

    async def ensure_container(self, request: web.Request, cont_path: str) -> int:
        """200 when it exists, 201 when it was created here, else the failing status."""
        status = await self.send(request, "HEAD", cont_path)
        if status // 100 == 2:
            return 200
        if status == 404:
            status = await self.send(request, "PUT", cont_path)
            if status // 100 == 2:
                return 201
        return status

    def put_headers(self, request: web.Request, member: tarfile.TarInfo) -> CIMultiDict[str]:
        headers = self.sub_headers(request)
        headers["Content-Length"] = str(member.size)
        for k, v in request.headers.items():
            lk = k.lower()
            if lk in ("x-delete-at", "x-delete-after") or lk.startswith("x-object-meta-"):
                headers[k] = v
        for key, value in member.pax_headers.items():
            header = pax_header(key, value)
            if header:
                headers[header] = value
        return headers

    @staticmethod
    async def member_chunks(tar: tarfile.TarFile, member: tarfile.TarInfo,
                            worker: Worker) -> AsyncIterator[bytes]:
        f = await worker.run(tar.extractfile, member)
        while f is not None:
            chunk = await worker.run(f.read, READ_CHUNK)
            if not chunk:
                return
            yield chunk
