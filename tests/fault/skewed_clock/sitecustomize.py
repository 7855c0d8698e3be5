"""Clock skew for one process, with no hook in swiftlite: the nemesis harness starts a node's
servers and daemons with this directory on PYTHONPATH (so Python loads this file at startup)
and SWIFTLITE_TEST_CLOCK_SKEW=<seconds>. Wall-clock reads (time.time, time.time_ns) are
shifted by that much; monotonic clocks stay true, as they do on a host whose clock is off.
Unset or 0, nothing is patched."""

from __future__ import annotations

import os
import time

SKEW_ENV = "SWIFTLITE_TEST_CLOCK_SKEW"
_skew = float(os.environ.get(SKEW_ENV) or 0)

if _skew:
    _time, _time_ns = time.time, time.time_ns
    _skew_ns = int(_skew * 1e9)

    def _skewed_time() -> float:
        return _time() + _skew

    def _skewed_time_ns() -> int:
        return _time_ns() + _skew_ns

    time.time = _skewed_time
    time.time_ns = _skewed_time_ns
