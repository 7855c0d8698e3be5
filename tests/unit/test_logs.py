"""The access log sink: lines exactly like the logging module's, written per loop turn."""

from __future__ import annotations

import asyncio
import io
import logging
import re

from swiftlite.common.observe.logs import FORMAT, _AccessSink

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\S+)\[(\d+)\] INFO (.*)$")


def _logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    h = logging.StreamHandler(out)
    h.setFormatter(logging.Formatter(FORMAT))
    lg = logging.getLogger(name)
    lg.handlers[:] = [h]
    lg.propagate = False
    lg.setLevel(logging.INFO)
    return lg, out


def test_same_line_as_logging():
    lg, out = _logger("t.access")
    lg.info("%s", "127.0.0.1 GET /x 200 5 0.0010 tx1")
    _AccessSink().add(lg, "127.0.0.1 GET /x 200 5 0.0010 tx1")
    a, b = out.getvalue().splitlines()
    ma, mb = LINE.match(a), LINE.match(b)
    assert ma and mb and ma.groups() == mb.groups()


async def test_lines_of_one_loop_turn_are_written_together():
    lg, out = _logger("t.access2")
    sink = _AccessSink()
    for i in range(5):
        sink.add(lg, f"line {i}")
    assert out.getvalue() == ""  # not yet: written once this turn of the loop ends
    await asyncio.sleep(0)
    lines = out.getvalue().splitlines()
    assert [LINE.match(ln).group(3) for ln in lines] == [f"line {i}" for i in range(5)]


def test_disabled_level_writes_nothing():
    lg, out = _logger("t.access3")
    lg.setLevel(logging.WARNING)
    _AccessSink().add(lg, "quiet")
    assert out.getvalue() == ""
