"""A failed flush is never acknowledged: an object server whose Nth group flush fails (EIO,
injected through the durability layer's SWIFTLITE_FAIL_FLUSHES) answers 5xx, never 201, for
every write that flush may have covered, and keeps serving the writes after it."""

from __future__ import annotations

import asyncio
import hashlib
import os

import aiohttp

from swiftlite.common.timestamp import Timestamp
from swiftlite.obj.engine import durability
from tests.helpers import ServerProcess, async_wait_for, free_port

PART = 1


def _tmp_bytes(dev: str) -> int:
    tdir = os.path.join(dev, "tmp")
    return sum(os.path.getsize(os.path.join(tdir, n)) for n in os.listdir(tdir))


async def test_writes_a_failed_flush_covered_are_never_acknowledged(tmp_path, monkeypatch):
    devices = tmp_path / "devices"
    dev = str(devices / "sda")
    os.makedirs(os.path.join(dev, "tmp"))
    conf = tmp_path / "object-server.conf"
    conf.write_text(f"[DEFAULT]\ndevices = {devices}\n[object-server]\n"
                    "workers = 1\nwrite_batch_size = 16k\n")
    # Flush 1 (a small PUT's data flush) and flush 5 (the burst's first) fail.
    monkeypatch.setenv(durability.FAIL_ENV, "1,5")
    port = free_port()
    base = f"http://127.0.0.1:{port}/sda/{PART}/a/c"
    proc = ServerProcess("object", str(conf), port).start()
    tick = [Timestamp.now().ticks]

    def ts() -> str:
        tick[0] += 1
        return Timestamp(tick[0]).internal

    async def put(s: aiohttp.ClientSession, name: str, body, **headers: str) -> int:
        async with s.put(f"{base}/{name}", data=body,
                         headers={"X-Timestamp": ts(), "Content-Type": "image/jpeg",
                                  **headers}) as r:
            await r.read()
            return r.status

    async def status_of_get(s: aiohttp.ClientSession, name: str) -> tuple[int, bytes]:
        async with s.get(f"{base}/{name}") as r:
            return r.status, await r.read()

    try:
        async with aiohttp.ClientSession() as s:
            # A streamed PUT writes its first part to tmp/ before any flush...
            head, tail = os.urandom(64 << 10), os.urandom(64 << 10)
            go_on = asyncio.Event()

            async def body():
                yield head
                await go_on.wait()
                yield tail

            big = asyncio.ensure_future(put(s, "big", body()))
            await async_wait_for(lambda: _tmp_bytes(dev) >= len(head), 20,
                                 what="the streamed PUT's first part on disk")
            # ...then another PUT's flush fails (flush 1): its pages, and the streamed
            # PUT's already written ones, may not be on disk.
            assert await put(s, "small", b"s" * 1000) >= 500
            go_on.set()
            # The streamed PUT's own flush succeeds, but the failed one came after its
            # first write: it must not be acknowledged either.
            big_status = await asyncio.wait_for(big, 20)
            assert big_status >= 500, f"a write the failed flush covered got {big_status}"
            for name in ("small", "big"):
                assert (await status_of_get(s, name))[0] == 404

            # The server carries on: the next writes (flushes 2-4) are durable and answered.
            assert await put(s, "after", b"a" * 500) == 201
            assert await status_of_get(s, "after") == (200, b"a" * 500)

            # A burst shares batches; the first batch's data flush (flush 5) fails. Every
            # write it covered is a 5xx and stays invisible; every 201 is readable.
            names = [f"burst{i}" for i in range(24)]
            bodies = {n: os.urandom(2000) for n in names}
            statuses = await asyncio.gather(*(
                put(s, n, bodies[n], ETag=hashlib.md5(bodies[n]).hexdigest())
                for n in names))
            failed = [n for n, st in zip(names, statuses, strict=True) if st != 201]
            assert failed, "the injected failure answered nothing with an error"
            for n, st in zip(names, statuses, strict=True):
                got = await status_of_get(s, n)
                if st == 201:
                    assert got == (200, bodies[n])
                else:
                    assert st >= 500 and got[0] == 404, (n, st, got[0])
        log = proc.log_text()
        assert "injected: flush 1" in log and "injected: flush 5" in log
        assert os.listdir(os.path.join(dev, "tmp")) == []
    finally:
        proc.stop()
