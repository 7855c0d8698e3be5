"""What a variant may cost, and the refusals a variant request can end in.

Every failure to make a variant is an `ImageRefused` carrying the client status the proxy
answers with: 400 (the `image` query is malformed, or names no preset), 403 (free-form
variants are off for the container), 415 (the original is not an image we decode, or is
corrupt), 422 (the original or the output is past a limit), 429 (the account already has its
share of variants being made). None of them is ever a 5xx: a variant that cannot be made is
the caller's business, not the cluster's health. (The one exception is carried, not made: an
original that the storage servers fail to return keeps their status.)
"""

from __future__ import annotations

from dataclasses import dataclass


class ImageRefused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def __reduce__(self):  # crosses the process pool's pickling intact
        return (ImageRefused, (self.status, self.reason))


def bad_variant(reason: str) -> ImageRefused:
    return ImageRefused(400, f"Bad image variant: {reason}")


@dataclass(frozen=True)
class Limits:
    # Width x height read from the header, checked before a single pixel is decoded: a
    # 50,000 x 50,000 PNG is a few KiB on the wire and 7.5 GB decoded.
    max_source_pixels: int = 50_000_000
    # The original's size: it is read into memory and shipped to a worker.
    max_source_bytes: int = 64 * 1024 * 1024
    # Any output side (a resize asking for more, or an unresized big original).
    max_output_side: int = 4096
    # An animation's frames, and their pixels added up: each frame is decoded and resized.
    max_frames: int = 500
    max_animation_pixels: int = 200_000_000

    def check_source(self, width: int, height: int) -> None:
        if width * height > self.max_source_pixels:
            raise ImageRefused(422, f"Source image too large: {width}x{height} pixels "
                                    f"(at most {self.max_source_pixels} pixels)")

    def check_animation(self, width: int, height: int, frames: int) -> None:
        if frames > self.max_frames or width * height * frames > self.max_animation_pixels:
            raise ImageRefused(422, f"Animation too large: {frames} frames of {width}x"
                                    f"{height} (at most {self.max_frames} frames and "
                                    f"{self.max_animation_pixels} pixels in all)")

    def check_output(self, width: int, height: int) -> None:
        if max(width, height) > self.max_output_side:
            raise ImageRefused(422, f"Variant too large: {width}x{height} (at most "
                                    f"{self.max_output_side} px a side; add a resize)")
