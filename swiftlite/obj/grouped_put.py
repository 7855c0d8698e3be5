"""A PUT of one body to several devices of one object server (common/replica_groups.py):
read and hashed once, written to every device concurrently, each device's outcome reported
on its own. `server` is the ObjectServer."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from aiohttp import web

from swiftlite.common import policies
from swiftlite.common.http import HTTPError, error, txid
from swiftlite.common.replica_groups import ALSO_DEVICES, ALSO_STATUSES, MAX_BODY, parse_also
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.container_updates import listing_update, parse_targets
from swiftlite.obj.engine import bodysum, durability, hashdir, writing

log = logging.getLogger("swiftlite.object")
_REASONS = {409: "Conflict", 412: "Precondition Failed", 500: "Internal Server Error",
            507: "Insufficient Storage", 400: "Bad Request"}


def if_match(request: web.Request) -> tuple[str, str] | None:
    """A conditional PUT's `X-Backend-If-Match` ETag (judged on `X-Backend-Etag-Is-At`'s
    metadata when the object has it), as DataWriter takes it."""
    etag = request.headers.get("X-Backend-If-Match")
    if etag is None:
        return None
    return etag, request.headers.get("X-Backend-Etag-Is-At", "")


async def put_grouped(server: Any, request: web.Request, dev_path: str, part: int,
                       names: tuple[str, str, str], ts: Timestamp, cl: int | None,
                       metadata: dict[str, str], hexhash: str,
                       also: str) -> web.Response:
    """One body for several devices of this server (see common.replica_groups): read
    and hashed once, written to every device concurrently, each device's outcome
    reported on its own."""
    try:
        members = parse_also(also)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    named = [os.path.basename(dev_path), *(d for d, _ in members)]
    if len(set(named)) < len(named):
        raise HTTPError(400, f"a device named twice in {ALSO_DEVICES}")
    if cl is None or cl > MAX_BODY:
        raise HTTPError(400, f"{ALSO_DEVICES} needs a Content-Length up to {MAX_BODY}")
    chunks = await read_all(request, cl)
    expected = request.headers.get("ETag")
    refuse = request.headers.get("If-None-Match") == "*"
    tx = txid(request)
    devices: list[tuple[str | None, int, Any]] = []  # (device path, status, headers)
    for device, hdrs in [(None, request.headers), *members]:
        try:
            devices.append((dev_path if device is None else await server.device_path(device),
                            0, hdrs))
        except HTTPError as exc:
            devices.append((None, exc.status, hdrs))
    writers = {i: writing.DataWriter(dp, part, hexhash, fsync=server.fsync,
                                     refuse_existing=refuse, if_match=if_match(request))
               for i, (dp, _, _) in enumerate(devices) if dp is not None}
    outcomes: dict[int, Any] = {}
    try:
        if durability.MODE == "batch":  # one committer job: hash, write, batch flushes
            idx = list(writers)
            etag, res = await server.committer.put([writers[i] for i in idx], chunks,
                                                 metadata, ts.internal, expected)
            outcomes = dict(zip(idx, res, strict=True))
        else:
            sums = bodysum.Summer().feed(chunks)
            etag = sums.etag
            if sums.refuses(expected):
                raise writing.ETagMismatch(etag)

            async def one(w: writing.DataWriter) -> Any:
                try:
                    return await run_blocking(w.put, chunks, metadata, ts.internal, None,
                                              sums)
                except Exception as exc:
                    return exc
            res = await asyncio.gather(*(one(w) for w in writers.values()))
            outcomes = dict(zip(writers, res, strict=True))
    except writing.ETagMismatch:
        return error(422, "Unprocessable Entity: ETag mismatch")
    finally:
        for w in writers.values():
            if not w.done:
                await run_blocking(w.abort)

    def status_of(i: int) -> tuple[int, dict[str, str]]:
        dp, status, _ = devices[i]
        if dp is None:
            return status, {}
        out = outcomes.get(i)
        if isinstance(out, hashdir.CommitResult):
            server._maybe_fold(dp, part, out.journal_size)
            return 201, {}
        if isinstance(out, hashdir.Conflict):
            return 409, {"X-Backend-Timestamp": out.stored}
        if isinstance(out, writing.Exists):
            return 412, {}
        if isinstance(out, hashdir.DeviceMissing) or (
                isinstance(out, BaseException) and hashdir.is_enospc(out)):
            return 507, {}
        log.error("grouped PUT to %s failed, txid=%s", dp, tx,
                  exc_info=out if isinstance(out, BaseException) else None)
        return 500, {}

    results = [status_of(i) for i in range(len(devices))]
    await server.updater.update_devices("PUT", *names, listing_update(
        ts, metadata, str(cl), etag),
        [(devices[i][0], parse_targets(devices[i][2]))  # type: ignore[misc]
         for i, (st, _) in enumerate(results) if st == 201], tx,
        policies.header_index(request.headers))
    (status, extra), rest = results[0], results[1:]
    headers = {"ETag": etag, ALSO_STATUSES: ",".join(str(st) for st, _ in rest), **extra}
    if status == 201:
        return web.Response(status=201, headers=headers)
    return error(status, _REASONS.get(status, "Error"), headers)

async def read_all(request: web.Request, cl: int) -> list[bytes]:
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = await request.content.readany()
        except HTTPError:  # a malformed body: the client's 400
            raise
        except Exception:  # reset, payload error
            raise HTTPError(499, "Client disconnected") from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total < cl:
        raise HTTPError(499, "Client disconnected")
    return chunks

