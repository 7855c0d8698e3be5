"""Decode, transform, encode: one variant of one original, as a pure function of bytes.

Runs in a worker process of `pool` (never on an event loop). Order of work:
1. open the header only, in one of SOURCE_FORMATS (anything else: 415);
2. check width x height against the source limit (422) before any pixel is decoded, so a
   decompression bomb costs its header's bytes;
3. for a JPEG whose first step shrinks it, ask the decoder for a reduced size (DCT scaling,
   1/2 to 1/8): a 12 MP photo made into a thumbnail is never held at full size;
4. decode (a truncated or corrupt body: 415), apply the EXIF orientation, the steps in
   order, then check the output side (422) and encode.

An animation (GIF, WebP or PNG with several frames) stays one where the output can hold it
(WebP, PNG as APNG): every frame goes through the same steps, with its own duration and the
loop count kept; JPEG and AVIF outputs get the first frame. Frames and their pixels in all
have limits of their own (422).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageOps, ImageSequence, UnidentifiedImageError

from swiftlite.image.formats import (
    DEFAULT_QUALITY,
    PIL_NAMES,
    SOURCE_FORMATS,
    SOURCE_OUTPUT,
)
from swiftlite.image.grammar import Step, Variant
from swiftlite.image.limits import ImageRefused, Limits

# Output formats that hold an animation (Pillow's save_all).
ANIMATED_OUTPUTS = ("webp", "png")
# EXIF orientations that swap width and height.
TRANSPOSED = (5, 6, 7, 8)
ORIENTATION_TAG = 0x0112
# Where a crop of the overflow sits, as (x, y) fractions of the spare room.
ANCHORS = {"center": (0.5, 0.5), "north": (0.5, 0.0), "south": (0.5, 1.0),
           "east": (1.0, 0.5), "west": (0.0, 0.5), "northeast": (1.0, 0.0),
           "northwest": (0.0, 0.0), "southeast": (1.0, 1.0), "southwest": (0.0, 1.0)}


@dataclass(frozen=True)
class Rendered:
    body: bytes
    format: str  # jpeg, png, webp, avif
    width: int
    height: int


def _scaled(w: int, h: int, step: Step) -> tuple[int, int]:
    """The size a resize step makes of a w x h image."""
    if step.op == "fit":
        s = min(step.width / w, step.height / h, 1.0)
    elif step.op == "fill":
        s = max(step.width / w, step.height / h)
    elif step.op == "width":
        s = min(step.width / w, 1.0)
    else:
        s = min(step.height / h, 1.0)
    return max(1, round(w * s)), max(1, round(h * s))


def _crop(im: Image.Image, width: int, height: int, gravity: str) -> Image.Image:
    w, h = im.size
    cw, ch = min(width, w), min(height, h)
    fx, fy = ANCHORS[gravity]
    left, top = round((w - cw) * fx), round((h - ch) * fy)
    return im.crop((left, top, left + cw, top + ch))


def _apply(im: Image.Image, step: Step) -> Image.Image:
    if step.op == "crop":
        return _crop(im, step.width, step.height, step.gravity)
    size = _scaled(im.width, im.height, step)
    if size != im.size:
        if im.mode not in ("RGB", "RGBA", "L", "LA"):
            im = im.convert("RGBA" if "A" in im.getbands() or im.mode == "P" else "RGB")
        # reducing_gap: a cheap box reduction first, then Lanczos on what is left.
        im = im.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    if step.op == "fill":
        im = _crop(im, step.width, step.height, step.gravity)
    return im


def _draft(im: Image.Image, variant: Variant, orientation: int) -> None:
    """Let the JPEG decoder scale down when the first step shrinks the image anyway."""
    if im.format != "JPEG" or not variant.steps or variant.steps[0].op == "crop":
        return
    w, h = im.size
    if orientation in TRANSPOSED:
        w, h = h, w
    tw, th = _scaled(w, h, variant.steps[0])
    if orientation in TRANSPOSED:
        tw, th = th, tw
    # draft() keeps at least the asked size, so the Lanczos pass still has pixels to spare.
    im.draft(im.mode if im.mode in ("RGB", "L") else "RGB", (tw, th))


def _for_format(im: Image.Image, fmt: str) -> Image.Image:
    has_alpha = "A" in im.getbands() or (im.mode == "P" and "transparency" in im.info)
    if fmt == "jpeg":
        return im if im.mode in ("RGB", "L") else im.convert("RGB")
    if fmt == "png":
        return im if im.mode in ("RGB", "RGBA", "L", "LA", "P", "1", "I;16") else \
            im.convert("RGBA" if has_alpha else "RGB")
    return im if im.mode in ("RGB", "RGBA") else im.convert("RGBA" if has_alpha else "RGB")


def render(data: bytes, variant: Variant, limits: Limits) -> Rendered:
    """The variant of the image `data`; ImageRefused (415, 422) when it cannot be made.
    Whatever a decoder raises on hostile bytes is one of those, never an error of ours."""
    try:
        return _render(data, variant, limits)
    except ImageRefused:
        raise
    except MemoryError:
        raise ImageRefused(422, "Image too large to process") from None
    except Exception as exc:  # a decoder's surprise on odd bytes: the image's fault
        raise ImageRefused(415, f"Image could not be processed ({type(exc).__name__})") \
            from None


def _render(data: bytes, variant: Variant, limits: Limits) -> Rendered:
    Image.MAX_IMAGE_PIXELS = limits.max_source_pixels  # Pillow's own guard, as a second one
    try:
        im = Image.open(io.BytesIO(data), formats=SOURCE_FORMATS)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError,
            SyntaxError) as exc:
        if isinstance(exc, Image.DecompressionBombError):
            raise ImageRefused(422, "Source image too large") from None
        raise ImageRefused(415, "Not an image this store can read") from None
    with im:
        limits.check_source(*im.size)
        src_format = im.format or "PNG"
        orientation = im.getexif().get(ORIENTATION_TAG, 1)
        try:
            _draft(im, variant, orientation)
            im.load()
            out = ImageOps.exif_transpose(im)
            exif = im.getexif() if not variant.strip else None
        except (OSError, ValueError, SyntaxError, EOFError):
            raise ImageRefused(415, "Corrupt or truncated image") from None
        except MemoryError:
            raise ImageRefused(422, "Image too large to decode") from None
        fmt = variant.format or SOURCE_OUTPUT[src_format]
        frames = getattr(im, "n_frames", 1)
        if frames > 1 and fmt in ANIMATED_OUTPUTS:
            return _animation(im, variant, limits, fmt, frames)
        for step in variant.steps:
            out = _apply(out, step)
        limits.check_output(*out.size)
        out = _for_format(out, fmt)
        opts: dict[str, object] = {}
        if fmt in DEFAULT_QUALITY:
            opts["quality"] = variant.quality or DEFAULT_QUALITY[fmt]
        icc = im.info.get("icc_profile")
        if icc:
            opts["icc_profile"] = icc  # colour, not metadata: kept even when stripping
        if exif is not None:
            exif[ORIENTATION_TAG] = 1  # the pixels are turned already
            opts["exif"] = exif.tobytes()
        buf = io.BytesIO()
        try:
            out.save(buf, PIL_NAMES[fmt], **opts)
        except (OSError, ValueError) as exc:
            raise ImageRefused(415, f"Cannot encode this image as {fmt}: {exc}") from None
        return Rendered(buf.getvalue(), fmt, out.width, out.height)


def _animation(im: Image.Image, variant: Variant, limits: Limits, fmt: str,
               frames: int) -> Rendered:
    """Every frame through the variant's steps, saved as one animation of `fmt`."""
    limits.check_animation(im.width, im.height, frames)
    out: list[Image.Image] = []
    durations: list[int] = []
    try:
        for frame in ImageSequence.Iterator(im):
            f = frame.convert("RGBA")  # composed by the decoder (GIF disposal included)
            for step in variant.steps:
                f = _apply(f, step)
            out.append(f)
            durations.append(int(frame.info.get("duration", im.info.get("duration", 100))))
    except (OSError, ValueError, SyntaxError, EOFError):
        raise ImageRefused(415, "Corrupt or truncated animation") from None
    limits.check_output(*out[0].size)
    opts: dict[str, object] = {"save_all": True, "append_images": out[1:],
                               "duration": durations, "loop": int(im.info.get("loop", 0))}
    if fmt in DEFAULT_QUALITY:
        opts["quality"] = variant.quality or DEFAULT_QUALITY[fmt]
    buf = io.BytesIO()
    try:
        out[0].save(buf, PIL_NAMES[fmt], **opts)
    except (OSError, ValueError) as exc:
        raise ImageRefused(415, f"Cannot encode this animation as {fmt}: {exc}") from None
    return Rendered(buf.getvalue(), fmt, out[0].width, out[0].height)
