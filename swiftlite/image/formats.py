"""Output formats: names, content types, default qualities, and `format:auto`."""

from __future__ import annotations

CONTENT_TYPES = {"jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp",
                 "avif": "image/avif"}
ALIASES = {"jpg": "jpeg"}
# Pillow's save() format names.
PIL_NAMES = {"jpeg": "JPEG", "png": "PNG", "webp": "WEBP", "avif": "AVIF"}
# A format's default quality when the variant names none (PNG is lossless: no quality).
DEFAULT_QUALITY = {"jpeg": 85, "webp": 80, "avif": 60}
# Source formats we decode (Pillow's names): the usual web images. Anything else is 415, so
# an upload in an obscure format cannot reach a rarely exercised decoder.
SOURCE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "AVIF")
# What an original becomes when the variant names no format: its own, or PNG for a source
# we cannot write (GIF).
SOURCE_OUTPUT = {"JPEG": "jpeg", "PNG": "png", "WEBP": "webp", "AVIF": "avif", "GIF": "png"}


def avif_available() -> bool:
    try:
        from PIL import features
        return bool(features.check("avif"))
    except Exception:  # an old Pillow without the plugin
        return False


def accepted(accept: str) -> dict[str, float]:
    """Media type (lower case) -> q from an Accept header; malformed parts are skipped."""
    out: dict[str, float] = {}
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        q = 1.0
        for f in fields[1:]:
            name, _, value = f.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        out[fields[0].lower()] = max(q, out.get(fields[0].lower(), 0.0))
    return out


def auto_format(accept: str, avif: bool) -> str | None:
    """`format:auto`: AVIF, then WebP, when the client takes them (browsers say so in Accept:
    a type named explicitly, not through `image/*`); None keeps the original's format, which
    every client that asked for the original takes."""
    took = accepted(accept)
    if avif and took.get("image/avif", 0) > 0:
        return "avif"
    if took.get("image/webp", 0) > 0:
        return "webp"
    return None
