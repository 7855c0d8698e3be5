"""Object replication protocol: the receiving end on the object server, and the state rules.

Three routes on the object server, all with method MERGE: aiohttp's C parser (llhttp) knows
it, while it refuses extension methods such as Swift's REPLICATE before any handler runs; the
object server's own routes never use it. The backend signature covers the method and path.

- ``MERGE /{dev}/{part}/digests``: Swift's REPLICATE. Answers the partition's suffix digests,
  msgpack ``{suffix: digest}`` (``digests.get_digests_packed``: no suffix dir is listed).
  ``MERGE /{dev}/{part}/digests/{suffix}-{suffix}...`` first re-derives those suffixes'
  digests from disk (healing drift) and answers just them.
- ``MERGE /{dev}/{part}/states``: body msgpack ``[suffix, ...]``; answers msgpack
  ``{suffix: {hash: state}}`` (``digests.object_states``; one thread hop for all suffixes).
- ``MERGE /{dev}/{part}/fetch``: body msgpack ``[[hash, file], ...]``; answers the files
  it holds of those, in the frames ``sync`` takes (a reconstructor's source archives).
- ``MERGE /{dev}/{part}/sync``: a streamed body of frames, each
  ``u32 BE header length || msgpack header || raw file bytes`` with header
  ``{"hash": str, "file": "<timestamp>.<data|ts|meta>", "size": int}``. Each file is written
  exactly like a PUT (tmp, fsync, rename, dir fsync, obsolete files removed, digest journal
  delta) by ``DataWriter.commit_raw``, which refuses a file not newer than what is stored.
  A .data whose body does not match its own ETag is refused, so corruption never spreads.
  A file carrying X-Delete-At joins the device's expiring queue as a PUT's does.
  Answers msgpack ``{"stored": n, "stale": n, "bad": n}``.

A state (see ``digests``) is ``"<ts>.data|<ts>.meta"``, ``"<ts>.ts"``...: ``files_to_send``
decides which of our current files a peer is missing, ``covered`` whether a peer holds
everything we hold (so a handoff copy may go).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import msgpack
from aiohttp import web

from swiftlite.common import policies
from swiftlite.common.clients.client import quote_path
from swiftlite.common.config import Section
from swiftlite.common.devices import DeviceChecker
from swiftlite.common.http import HTTPError, error
from swiftlite.common.threadpool import run_blocking
from swiftlite.common.timestamp import Timestamp, TimestampError
from swiftlite.obj.engine import bodysum, digests, fileformat, hashdir, writing

log = logging.getLogger("swiftlite.object.sync")

FRAME_HEAD = struct.Struct(">I")
MAX_HEADER = 64 * 1024
WHOLE_FILE = 4 * 1024 * 1024  # files up to this are received in one thread hop
CHUNK = 1024 * 1024
SYNC_METHOD = "MERGE"
_HASH_RE = re.compile(r"[0-9a-f]{32}")
_FILE_RE = re.compile(r"[0-9]{10}\.[0-9]{5}(_[0-9a-f]{1,16})?\.(data|ts|meta)")
_SUFFIX_RE = re.compile(r"[0-9a-f]{3}")
_SUFFIXES_RE = re.compile(r"[0-9a-f]{3}(-[0-9a-f]{3})*")
_ROUTE_RE = re.compile(r"/([^/]+)/([0-9]{1,10})/(states|sync|fetch|digests)(?:/([^/]*))?")


def digests_path(device: str, part: int, suffixes: list[str] | None = None) -> str:
    """The path (quoted) of a digests request: all of them, or `suffixes` re-derived."""
    path = quote_path(device, part, "digests")
    if suffixes:
        path += "/" + "-".join(sorted(suffixes))
    return path


# ---- states --------------------------------------------------------------------------------

def split_state(state: str) -> tuple[str | None, str | None]:
    """(main file .data/.ts or None, .meta file or None) of a state string."""
    main = meta = None
    for name in state.split("|") if state else []:
        if name.endswith(".meta"):
            meta = name
        else:
            main = name
    return main, meta


def file_stem(name: str | None) -> str:
    return name.rsplit(".", 1)[0] if name else ""


def main_key(name: str | None) -> tuple[str, bool]:
    return (file_stem(name), bool(name and name.endswith(".ts")))  # a .ts wins a tie


def files_to_send(local: str, remote: str | None) -> list[str]:
    """Our current file names the peer lacks (or holds only older versions of)."""
    lmain, lmeta = split_state(local)
    rmain, rmeta = split_state(remote or "")
    out = []
    if lmain and main_key(lmain) > main_key(rmain):
        out.append(lmain)
    effective = max(main_key(lmain), main_key(rmain))
    if (lmeta and file_stem(lmeta) > file_stem(rmeta) and file_stem(lmeta) > effective[0]
            and not effective[1]):
        out.append(lmeta)
    return out


def covered(local: str, remote: str | None) -> bool:
    return not files_to_send(local, remote)


# ---- local disk operations (blocking) --------------------------------------------------------

def remove_if_unchanged(device_path: str, part: int | str, hexhash: str, state: str) -> bool:
    """Delete an object's hash dir if its state is still `state`; keeps the digest exact."""
    hdir = fileformat.hash_dir(device_path, part, hexhash)
    with hashdir.locked_hash_dir(device_path, part, hexhash) as held:
        if held is None:
            return False
        current = fileformat.state_of(held.names)
        if current != state:
            return False
        # Rename first so a writer waiting on the flock sees the dir gone and retries.
        gone = os.path.join(device_path, hashdir.TMP, f"rm-{hexhash}-{os.urandom(4).hex()}")
        os.makedirs(os.path.dirname(gone), exist_ok=True)
        os.rename(hdir, gone)
        assert held.journal is not None
        held.journal.record(hexhash[-3:], hexhash, current, "")
    shutil.rmtree(gone, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(hdir))  # the suffix dir, once empty
    except OSError:
        pass
    return True


def tombstone_expired(state: str, reclaim_age: float, now: float | None = None) -> bool:
    main, meta = split_state(state)
    if not main or not main.endswith(".ts") or meta:
        return False
    try:
        ts = float(Timestamp.parse(file_stem(main).split("_")[0]))
    except (TimestampError, ValueError):
        return False
    return ts < (now if now is not None else time.time()) - reclaim_age


def states_reclaiming(device_path: str, part: int | str, suffixes: list[str],
                      reclaim_age: float) -> tuple[dict[str, dict[str, str]], int]:
    """{suffix: {hash: state}} for the listed suffixes, dropping tombstones past reclaim_age."""
    out: dict[str, dict[str, str]] = {}
    reclaimed = 0
    now = time.time()
    for s in suffixes:
        states = digests.object_states(device_path, part, s)
        for h, st in list(states.items()):
            if tombstone_expired(st, reclaim_age, now) and \
                    remove_if_unchanged(device_path, part, h, st):
                del states[h]
                reclaimed += 1
        out[s] = states
    return out, reclaimed


def read_files(device_path: str, part: int | str,
               wanted: list[tuple[str, str]]) -> list[tuple[str, str, bytes | int]]:
    """[(hash, file, bytes or size-if-large)] for the wanted (hash, file) pairs still present."""
    out: list[tuple[str, str, bytes | int]] = []
    for h, name in wanted:
        path = os.path.join(fileformat.hash_dir(device_path, part, h), name)
        try:
            size = os.path.getsize(path)
            if size > WHOLE_FILE:
                out.append((h, name, size))
                continue
            with open(path, "rb") as f:
                out.append((h, name, f.read()))
        except FileNotFoundError:
            continue  # superseded since the listing; the next pass sends the newer file
    return out


def frame(hexhash: str, name: str, size: int) -> bytes:
    head = msgpack.packb({"hash": hexhash, "file": name, "size": size})
    return FRAME_HEAD.pack(len(head)) + head


class BadFrame(ValueError):
    pass


async def read_frame_head(content: Any) -> tuple[str, str, int] | None:
    """(hash, file, size) of the next frame of a stream (either end of the protocol), None
    at its end; BadFrame for a malformed header, IncompleteReadError for a cut stream."""
    try:
        raw = await content.readexactly(FRAME_HEAD.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None  # EOF between frames
    (hlen,) = FRAME_HEAD.unpack(raw)
    if hlen > MAX_HEADER:
        raise BadFrame("frame header too large")
    try:
        head = msgpack.unpackb(await content.readexactly(hlen), raw=False)
        h, name, size = head["hash"], head["file"], int(head["size"])
    except asyncio.IncompleteReadError:
        raise
    except Exception:
        raise BadFrame("bad frame header") from None
    if not _HASH_RE.fullmatch(h) or not _FILE_RE.fullmatch(name) or size < 0:
        raise BadFrame("bad frame header")
    return h, name, size


async def file_frame(path: str, hexhash: str, name: str) -> AsyncIterator[bytes]:
    """One file as a frame, read in CHUNK pieces through the thread pool: the frame's head,
    then its bytes (nothing if the file is gone: superseded since it was listed)."""
    try:
        fd = await run_blocking(os.open, path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        yield frame(hexhash, name, size)
        off = 0
        while off < size:
            chunk = await run_blocking(os.pread, fd, min(CHUNK, size - off), off)
            if not chunk:
                raise OSError(f"{path} shrank while sending")
            yield chunk
            off += len(chunk)
    finally:
        os.close(fd)


# ---- receiving end ---------------------------------------------------------------------------

def _check_data(name: str, data: bytes) -> dict[str, str] | None:
    """The metadata of a whole file if it is consistent (trailer parses; a .data's body
    matches its ETag and length), else None."""
    try:
        res = fileformat.parse_tail(data, len(data))
    except fileformat.CorruptFile:
        return None
    if not isinstance(res, tuple):
        return None
    md, body_len = res
    if not name.endswith(".data"):
        return md
    if str(body_len) != md.get("Content-Length", str(body_len)):
        return None
    if not bodysum.all_ok(bodysum.Summer().feed([memoryview(data)[:body_len]]), md):
        return None
    return md


def store_whole(device_path: str, part: int, hexhash: str, name: str, data: bytes,
                fsync: bool) -> str:
    md = _check_data(name, data)
    if md is None:
        return "bad"
    w = writing.DataWriter(device_path, part, hexhash, fsync=fsync)
    try:
        w.write([data], hash_body=False)
        w.commit_raw(name, md)  # md: the expiring queue needs no second read
    except hashdir.Conflict:
        return "stale"
    return "stored"


class SyncReceiver:
    def __init__(self, conf: Section) -> None:
        self.devices = DeviceChecker(conf.get_str("devices", "/srv/node"),
                                     conf.get_bool("mount_check", False))
        self.fsync = conf.get_bool("fsync", True)

    async def _target(self, request: web.Request, dev: str, part: str) -> tuple[str, int]:
        """The device's path and the partition, of the policy the request names."""
        if not part.isdigit() or int(part) >= 2**32:
            raise HTTPError(400, "Invalid partition")
        try:
            index = policies.header_index(request.headers)
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        return await self.devices.check(dev), fileformat.policy_part(part, index)

    async def digests(self, request: web.Request, dev: str, part_s: str,
                      sufs: str | None) -> web.Response:
        dev_path, part = await self._target(request, dev, part_s)
        if sufs is not None and not _SUFFIXES_RE.fullmatch(sufs):
            raise HTTPError(400, "Invalid suffix list")
        if sufs:
            result = await run_blocking(_rehash, dev_path, part, sufs.split("-"))
            body = msgpack.packb(result, use_bin_type=True)
        else:
            body = await run_blocking(_digests, dev_path, part)
        return web.Response(status=200, body=body, content_type="application/x-msgpack")

    async def states(self, request: web.Request, dev: str, part_s: str) -> web.Response:
        dev_path, part = await self._target(request, dev, part_s)
        try:
            sufs = msgpack.unpackb(await request.read(), raw=False)
        except Exception:
            return error(400, "body must be a msgpack list of suffixes")
        if not isinstance(sufs, list) or not all(
                isinstance(s, str) and _SUFFIX_RE.fullmatch(s) for s in sufs):
            return error(400, "body must be a msgpack list of suffixes")

        def list_states() -> dict[str, dict[str, str]]:
            return {s: digests.object_states(dev_path, part, s) for s in sufs}

        result = await run_blocking(list_states)
        return web.Response(body=msgpack.packb(result), content_type="application/x-msgpack")

    async def sync(self, request: web.Request, dev: str, part_s: str) -> web.Response:
        dev_path, part = await self._target(request, dev, part_s)
        counts = {"stored": 0, "stale": 0, "bad": 0}
        content = request.content
        while True:
            try:
                head = await read_frame_head(content)
            except asyncio.IncompleteReadError:
                return error(499, "sync stream ended early")
            except BadFrame as exc:
                return error(400, str(exc))
            if head is None:
                break  # EOF between frames: the end of the stream
            h, name, size = head
            try:
                if size <= WHOLE_FILE:
                    data = await content.readexactly(size)
                    outcome = await run_blocking(store_whole, dev_path, part, h, name, data,
                                                 self.fsync)
                else:
                    outcome = await self._store_streamed(content, dev_path, part, h, name, size)
            except asyncio.IncompleteReadError:
                return error(499, "sync stream ended early")
            except OSError as exc:
                if hashdir.is_enospc(exc):
                    return error(507, "Insufficient Storage")
                raise
            counts[outcome] += 1
        return web.Response(body=msgpack.packb(counts), content_type="application/x-msgpack")

    async def fetch(self, request: web.Request, dev: str, part_s: str) -> web.StreamResponse:
        """The wanted files we hold, as frames (a reconstructor's source archives)."""
        dev_path, part = await self._target(request, dev, part_s)
        try:
            wanted = msgpack.unpackb(await request.read(), raw=False)
            ok = isinstance(wanted, list) and all(
                isinstance(w, list) and len(w) == 2 and _HASH_RE.fullmatch(str(w[0]))
                and _FILE_RE.fullmatch(str(w[1])) for w in wanted)
        except Exception:
            ok = False
        if not ok:
            return error(400, "body must be a msgpack list of [hash, file]")
        if not os.path.isdir(dev_path):
            raise hashdir.DeviceMissing(dev_path)
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        for h, name in wanted:
            path = os.path.join(fileformat.hash_dir(dev_path, part, h), name)
            async for piece in file_frame(path, h, name):
                await resp.write(piece)
        await resp.write_eof()
        return resp

    async def _store_streamed(self, content: Any, dev_path: str, part: int, h: str, name: str,
                              size: int) -> str:
        w = writing.DataWriter(dev_path, part, h, fsync=self.fsync)
        try:
            left = size
            while left:
                chunk = await content.readexactly(min(CHUNK, left))
                left -= len(chunk)
                await run_blocking(w.write, [chunk], False)
            try:
                await run_blocking(w.commit_raw, name)
            except hashdir.Conflict:
                return "stale"
            return "stored"
        finally:
            if not w.done:  # also waits out a write still in a pool thread
                await run_blocking(w.abort)


def register_sync_routes(app: web.Application, conf: Section) -> None:
    """Serve the replication routes on the object server's app.

    A middleware rather than routes, so it works wherever the call sits relative to the
    server's catch-all route; it costs other requests one string compare.
    """
    rx = SyncReceiver(conf)
    handlers = {"states": rx.states, "sync": rx.sync, "fetch": rx.fetch}

    @web.middleware
    async def sync_routes(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == SYNC_METHOD:
            m = _ROUTE_RE.fullmatch(request.path)
            if m:
                dev, part, route, tail = m.groups()
                try:
                    if route == "digests":
                        return await rx.digests(request, dev, part, tail)
                    if tail is None:
                        return await handlers[route](request, dev, part)
                except hashdir.DeviceMissing:
                    return error(507, "Insufficient Storage")
        return await handler(request)

    app.middlewares.append(sync_routes)


def _digests(dev_path: str, part: int) -> bytes:
    if not os.path.isdir(dev_path):
        raise hashdir.DeviceMissing(dev_path)
    return digests.get_digests_packed(dev_path, part)


def _rehash(dev_path: str, part: int, sufs: list[str]) -> dict[str, bytes]:
    if not os.path.isdir(dev_path):
        raise hashdir.DeviceMissing(dev_path)
    return digests.rehash_suffixes(dev_path, part, sufs)
