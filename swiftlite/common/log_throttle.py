"""One log line per interval for a trouble that repeats per request (a memcached down, a
process out of descriptors, a connection cap reached), not one per request."""

from __future__ import annotations

import time


class LogThrottle:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last = float("-inf")

    def due(self) -> bool:
        """True at most once per `interval` seconds: the caller logs then."""
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True
