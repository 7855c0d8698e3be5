"""The `?image=` language, and its canonical form (half of a variant's cache key).

    image = step *("/" step)          step = name *(":" arg)
    resize:fit:W:H           fit inside W x H, keeping the aspect ratio (never enlarges)
    resize:fill:W:H[:G]      cover W x H, then crop the overflow at gravity G (exactly W x H)
    resize:width:W           W wide, height by aspect ratio (never enlarges)
    resize:height:H          H high, width by aspect ratio (never enlarges)
    crop:W:H[:G]             cut W x H (at most the image) at gravity G
    format:F                 jpeg (jpg), png, webp, avif (where Pillow has it), auto
    quality:Q                1..100 (JPEG, WebP, AVIF)
    strip:B                  true (default: EXIF dropped) or false (EXIF kept, orientation
                             reset since the pixels are already turned)
    G: center (default), north, south, east, west, northeast, northwest, southeast,
       southwest, or n s e w ne nw se sw c

Geometry steps (resize, crop) apply in their order, at most MAX_GEOMETRY of them; format,
quality and strip may each appear once, anywhere. EXIF orientation is always applied first.
A single word with no `:` is a preset's name (X-Container-Meta-Image-Preset-<name>).

The canonical text spells every step in one way (`jpg` is `jpeg`, `n` is `north`, `080` is
`80`, fill and crop always name their gravity) with geometry in order and the output options
last in a fixed order, so two spellings of one variant share one cached object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from swiftlite.image.formats import ALIASES, CONTENT_TYPES
from swiftlite.image.limits import ImageRefused, Limits, bad_variant

MAX_TEXT = 512
MAX_GEOMETRY = 4
MAX_SIDE_SPELLED = 100_000  # numbers past this are malformed; the configured limit is lower
GRAVITIES = {"center": "center", "centre": "center", "c": "center",
             "north": "north", "n": "north", "south": "south", "s": "south",
             "east": "east", "e": "east", "west": "west", "w": "west",
             "northeast": "northeast", "ne": "northeast", "northwest": "northwest",
             "nw": "northwest", "southeast": "southeast", "se": "southeast",
             "southwest": "southwest", "sw": "southwest"}
BOOLS = {"true": True, "1": True, "yes": True, "t": True,
         "false": False, "0": False, "no": False, "f": False}
PRESET_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Step:
    op: str  # fit, fill, width, height, crop
    width: int = 0
    height: int = 0
    gravity: str = "center"

    def text(self) -> str:
        if self.op in ("fit", "fill"):
            tail = f":{self.gravity}" if self.op == "fill" else ""
            return f"resize:{self.op}:{self.width}:{self.height}{tail}"
        if self.op == "width":
            return f"resize:width:{self.width}"
        if self.op == "height":
            return f"resize:height:{self.height}"
        return f"crop:{self.width}:{self.height}:{self.gravity}"


@dataclass(frozen=True)
class Variant:
    steps: tuple[Step, ...] = ()
    format: str | None = None  # None: the original's format; "auto": from Accept
    quality: int | None = None
    strip: bool = True

    def canonical(self) -> str:
        parts = [s.text() for s in self.steps]
        if self.format:
            parts.append(f"format:{self.format}")
        if self.quality is not None:
            parts.append(f"quality:{self.quality}")
        if not self.strip:
            parts.append("strip:false")
        return "/".join(parts) or "original"

    def with_format(self, fmt: str | None) -> Variant:
        return replace(self, format=fmt)

    def check(self, limits: Limits) -> None:
        """422 for a step asking for an output past the limits (before any work)."""
        for s in self.steps:
            limits.check_output(s.width, s.height)

    def content_type(self) -> str | None:
        return CONTENT_TYPES.get(self.format or "")


def is_preset_name(text: str) -> bool:
    return PRESET_NAME.fullmatch(text) is not None and text != "original"


def _side(value: str, what: str) -> int:
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= MAX_SIDE_SPELLED:
        raise bad_variant(f"{what} must be a positive whole number, not {value!r}")
    return int(value)


def _gravity(args: list[str], at: int) -> str:
    if len(args) <= at:
        return "center"
    g = GRAVITIES.get(args[at].lower())
    if g is None:
        raise bad_variant(f"unknown gravity {args[at]!r}")
    return g


def _resize(args: list[str]) -> Step:
    mode = args[0].lower() if args else ""
    want = {"fit": 3, "fill": (3, 4), "width": 2, "height": 2}.get(mode)
    if want is None:
        raise bad_variant("resize takes fit, fill, width or height")
    if len(args) not in (want if isinstance(want, tuple) else (want,)):
        raise bad_variant(f"wrong number of arguments to resize:{mode}")
    if mode == "width":
        return Step("width", width=_side(args[1], "width"))
    if mode == "height":
        return Step("height", height=_side(args[1], "height"))
    w, h = _side(args[1], "width"), _side(args[2], "height")
    return Step(mode, w, h, _gravity(args, 3) if mode == "fill" else "center")


def parse(text: str, avif: bool = True) -> Variant:
    """The Variant `text` spells; ImageRefused(400) with a short reason otherwise."""
    if not text or len(text) > MAX_TEXT:
        raise bad_variant("empty or too long")
    steps: list[Step] = []
    options: dict[str, object] = {}
    for raw in text.split("/"):
        name, *args = raw.split(":")
        name = name.lower()
        if name in ("format", "quality", "strip"):
            if name in options:
                raise bad_variant(f"{name} given twice")
            if len(args) != 1:
                raise bad_variant(f"{name} takes one argument")
            options[name] = _option(name, args[0], avif)
        elif name in ("resize", "crop"):
            if len(steps) == MAX_GEOMETRY:
                raise bad_variant(f"at most {MAX_GEOMETRY} resize and crop steps")
            if name == "resize":
                steps.append(_resize(args))
            else:
                if len(args) not in (2, 3):
                    raise bad_variant("crop takes width, height and an optional gravity")
                steps.append(Step("crop", _side(args[0], "width"), _side(args[1], "height"),
                                  _gravity(args, 2)))
        else:
            raise bad_variant(f"unknown step {name!r}" if name else "empty step")
    return Variant(tuple(steps), options.get("format"), options.get("quality"),  # type: ignore[arg-type]
                   options.get("strip", True))  # type: ignore[arg-type]


def _option(name: str, value: str, avif: bool) -> object:
    low = value.lower()
    if name == "format":
        fmt = ALIASES.get(low, low)
        if fmt == "avif" and not avif:
            raise ImageRefused(400, "Bad image variant: AVIF is not available here")
        if fmt != "auto" and fmt not in CONTENT_TYPES:
            raise bad_variant(f"unknown format {value!r}")
        return fmt
    if name == "quality":
        if not low.isascii() or not low.isdigit() or not 1 <= int(low) <= 100:
            raise bad_variant("quality is 1 to 100")
        return int(low)
    if low not in BOOLS:
        raise bad_variant("strip is true or false")
    return BOOLS[low]
