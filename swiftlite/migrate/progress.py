"""A plain-text progress line on stderr: \\r updates on a tty, a line every few s otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_secs(s: float) -> str:
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Progress:
    def __init__(self, total_files: int, total_bytes: int, stream: TextIO | None = None,
                 tty_interval: float = 0.25, line_interval: float = 5.0) -> None:
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.files = 0
        self.bytes = 0
        self.failed = 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = tty_interval if self.tty else line_interval
        self.start = time.monotonic()
        self._next = self.start + self.interval
        self._width = 0

    def add(self, nbytes: int) -> None:
        self.files += 1
        self.bytes += nbytes

    def fail(self) -> None:
        self.failed += 1

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.start, 1e-9)

    def line(self) -> str:
        el = self.elapsed
        fps = self.files / el
        bps = self.bytes / el
        if self.total_bytes and self.bytes:
            eta = (self.total_bytes - self.bytes) / bps
        elif fps:
            eta = (self.total_files - self.files) / fps
        else:
            eta = None
        pct = 100.0 * self.files / self.total_files if self.total_files else 100.0
        eta_s = human_secs(eta) if eta is not None else "?"
        text = (f"{self.files}/{self.total_files} files ({pct:.1f}%) "
                f"{human_bytes(self.bytes)}/{human_bytes(self.total_bytes)} "
                f"{fps:.0f} files/s {human_bytes(bps)}/s ETA {eta_s}")
        if self.failed:
            text += f" failed {self.failed}"
        return text

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.interval
        text = self.line()
        if self.tty:
            pad = max(self._width - len(text), 0)
            self._width = len(text)
            self.stream.write("\r" + text + " " * pad)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        self.tick(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
