"""The `?image=` grammar (swiftlite/image/grammar.py), format:auto, and the renderer on small
images: canonical forms, refusals with their statuses, output sizes."""

from __future__ import annotations

import io
import time

import pytest
from PIL import Image

from swiftlite.image.formats import auto_format
from swiftlite.image.grammar import is_preset_name, parse
from swiftlite.image.limits import ImageRefused, Limits
from swiftlite.image.render import render
from tests.helpers import bomb_png


@pytest.mark.parametrize("text,canonical", [
    ("resize:fit:320:320/format:webp/quality:80", "resize:fit:320:320/format:webp/quality:80"),
    ("quality:080/RESIZE:fill:200:0200:N/format:jpg/strip:no",
     "resize:fill:200:200:north/format:jpeg/quality:80/strip:false"),
    ("resize:fill:20:10", "resize:fill:20:10:center"),
    ("crop:10:10", "crop:10:10:center"),
    ("crop:10:10:se/resize:width:5", "crop:10:10:southeast/resize:width:5"),
    ("resize:height:7/strip:true", "resize:height:7"),
    ("format:auto", "format:auto"),
])
def test_canonical(text, canonical):
    assert parse(text).canonical() == canonical
    assert parse(canonical).canonical() == canonical  # a fixed point


@pytest.mark.parametrize("text", [
    "", "resize:fit:320", "resize:fit:0:10", "resize:fit:-1:10", "resize:stretch:1:1",
    "bogus", "format:gif", "quality:0", "quality:101", "resize:fill:1:1:up", "a//b",
    "format:png/format:jpeg", "strip:maybe", "crop:1", "resize:width:1e3",
    "/".join(["crop:1:1"] * 5), "x" * 600,
])
def test_malformed_is_400(text):
    with pytest.raises(ImageRefused) as exc:
        parse(text)
    assert exc.value.status == 400


def test_avif_refused_where_missing():
    with pytest.raises(ImageRefused):
        parse("format:avif", avif=False)


def test_output_limit_is_422():
    with pytest.raises(ImageRefused) as exc:
        parse("resize:fit:5000:10").check(Limits(max_output_side=4096))
    assert exc.value.status == 422


def test_preset_names():
    assert is_preset_name("thumb") and is_preset_name("hero-2x")
    assert not is_preset_name("resize:fit:1:1") and not is_preset_name("a/b")


@pytest.mark.parametrize("accept,fmt", [
    ("image/avif,image/webp,*/*", "avif"),
    ("image/webp,image/*;q=0.8", "webp"),
    ("image/avif;q=0,image/webp", "webp"),
    ("image/*", None), ("", None),
])
def test_auto_format(accept, fmt):
    assert auto_format(accept, avif=True) == fmt


def _jpeg(size=(64, 48), orientation=None) -> bytes:
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    Image.new("RGB", size, (10, 200, 30)).save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


@pytest.mark.parametrize("text,size,fmt", [
    ("resize:fit:32:32/format:webp", (32, 24), "WEBP"),
    ("resize:fill:20:20", (20, 20), "JPEG"),
    ("resize:width:16/format:png", (16, 12), "PNG"),
    ("resize:height:12", (16, 12), "JPEG"),
    ("resize:fit:1000:1000", (64, 48), "JPEG"),  # never enlarges
    ("crop:100:10:south", (64, 10), "JPEG"),
])
def test_render_sizes(text, size, fmt):
    out = render(_jpeg(), parse(text), Limits())
    im = Image.open(io.BytesIO(out.body))
    assert (im.size, im.format) == (size, fmt)


def test_orientation_applied_and_exif_stripped():
    out = render(_jpeg(orientation=6), parse("resize:fit:100:100"), Limits())
    im = Image.open(io.BytesIO(out.body))
    assert im.size == (48, 64) and 0x0112 not in im.getexif()
    kept = Image.open(io.BytesIO(render(_jpeg(orientation=6), parse("strip:false"),
                                        Limits()).body))
    assert kept.size == (48, 64) and kept.getexif().get(0x0112) == 1


def test_bomb_refused_from_header():
    started = time.monotonic()
    with pytest.raises(ImageRefused) as exc:
        render(bomb_png(), parse("resize:fit:10:10"), Limits())
    assert exc.value.status == 422 and time.monotonic() - started < 1


@pytest.mark.parametrize("data", [b"not an image", _jpeg()[:200], b"GIF89a" + b"\0" * 10])
def test_not_an_image_or_corrupt_is_415(data):
    with pytest.raises(ImageRefused) as exc:
        render(data, parse("resize:fit:10:10"), Limits())
    assert exc.value.status == 415
