"""The process pool (swiftlite/image/pool.py): variants made off the event loop, refusals
carried across the process boundary, and a job past its CPU budget killed (422), after
which the pool serves again."""

from __future__ import annotations

import asyncio
import io
import time

import pytest
from PIL import Image

from swiftlite.image.grammar import parse
from swiftlite.image.limits import ImageRefused, Limits
from swiftlite.image.pool import RenderPool


def _png(size=(32, 32)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(buf, "PNG")
    return buf.getvalue()


async def test_pool_renders_and_refuses():
    pool = RenderPool(1, memory_mib=1024, cpu_seconds=30)
    try:
        out = await pool.render(_png(), parse("resize:fit:8:8/format:webp"), Limits())
        assert (out.format, out.width, out.height) == ("webp", 8, 8)
        with pytest.raises(ImageRefused) as exc:
            await pool.render(b"not an image", parse("resize:fit:8:8"), Limits())
        assert exc.value.status == 415
    finally:
        pool.close()


async def test_cpu_budget_kills_a_slow_job_then_recovers():
    # A noisy 3 MP image made 16 MP and encoded as PNG: seconds of CPU, past a 1 s budget.
    noise = Image.effect_noise((2000, 1500), 80).convert("RGB")
    buf = io.BytesIO()
    noise.save(buf, "JPEG", quality=95)
    pool = RenderPool(1, memory_mib=0, cpu_seconds=1)
    try:
        started = time.monotonic()
        with pytest.raises(ImageRefused) as exc:
            await pool.render(buf.getvalue(), parse("resize:fill:4096:4096/format:png"),
                              Limits(max_source_pixels=20_000_000))
        assert exc.value.status == 422 and time.monotonic() - started < 30
        out = await pool.render(_png(), parse("resize:fit:4:4"), Limits())  # a fresh pool
        assert out.width == 4
    finally:
        pool.close()


async def test_a_job_past_its_budget_does_not_fail_the_jobs_beside_it():
    """One worker, a slow job and three quick ones queued behind it: the slow one breaks
    the executor (422), the quick ones are made all the same, each once more alone."""
    noise = Image.effect_noise((2000, 1500), 80).convert("RGB")
    buf = io.BytesIO()
    noise.save(buf, "JPEG", quality=95)
    pool = RenderPool(1, memory_mib=0, cpu_seconds=1)
    try:
        slow = asyncio.ensure_future(pool.render(
            buf.getvalue(), parse("resize:fill:4096:4096/format:png"),
            Limits(max_source_pixels=20_000_000)))
        quick = [asyncio.ensure_future(pool.render(_png(), parse(f"resize:fit:{n}:{n}"),
                                                   Limits())) for n in (4, 5, 6)]
        with pytest.raises(ImageRefused) as exc:
            await slow
        assert exc.value.status == 422
        assert [(await q).width for q in quick] == [4, 5, 6]
    finally:
        pool.close()
