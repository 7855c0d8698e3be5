"""swiftlite/image/render.py on animations: every frame through the steps, as WebP or APNG;
JPEG gets the first frame; an animation past its limits is 422."""

from __future__ import annotations

import io

import pytest
from PIL import Image, ImageSequence

from swiftlite.image.grammar import parse
from swiftlite.image.limits import ImageRefused, Limits
from swiftlite.image.render import render

COLORS = [(250, 0, 0), (0, 250, 0), (0, 0, 250)]


def animated_gif(size=(80, 40), durations=(100, 200, 300), loop=0) -> bytes:
    frames = [Image.new("RGB", size, c) for c in COLORS[:len(durations)]]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:],
                   duration=list(durations), loop=loop)
    return buf.getvalue()


def frames_of(body: bytes) -> list[tuple[tuple[int, int], tuple, int]]:
    im = Image.open(io.BytesIO(body))
    out = []
    for f in ImageSequence.Iterator(im):
        rgb = f.convert("RGB")
        out.append((rgb.size, rgb.getpixel((rgb.width // 2, rgb.height // 2)),
                    f.info.get("duration")))
    return out


@pytest.mark.parametrize("fmt", ["webp", "png"])
def test_an_animation_stays_one(fmt):
    got = render(animated_gif(), parse(f"resize:width:20/format:{fmt}"), Limits())
    assert got.format == fmt and (got.width, got.height) == (20, 10)
    frames = frames_of(got.body)
    assert [f[0] for f in frames] == [(20, 10)] * 3
    for (_, pixel, duration), color, want in zip(frames, COLORS, (100, 200, 300),
                                                 strict=True):
        assert max(abs(a - b) for a, b in zip(pixel, color, strict=True)) < 40
        assert duration == want


def test_a_gif_becomes_an_animated_png_by_default():
    got = render(animated_gif(), parse("resize:fit:40:40"), Limits())
    assert got.format == "png" and len(frames_of(got.body)) == 3


def test_jpeg_gets_the_first_frame():
    got = render(animated_gif(), parse("resize:width:20/format:jpeg"), Limits())
    frames = frames_of(got.body)
    assert len(frames) == 1 and frames[0][1][0] > 200  # red


def test_an_animation_past_its_limits_is_422():
    with pytest.raises(ImageRefused) as exc:
        render(animated_gif(), parse("format:webp"), Limits(max_frames=2))
    assert exc.value.status == 422 and "Animation too large" in exc.value.reason
    with pytest.raises(ImageRefused) as exc:
        render(animated_gif(), parse("format:webp"), Limits(max_animation_pixels=5000))
    assert exc.value.status == 422
