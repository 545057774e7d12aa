"""A log line that may repeat on every request, written at most once per interval.

ZooKeeper's ``RateLogger``: the first message of an interval goes out at once; the ones that
follow within the interval are counted, and the count rides on the next message written.
"""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._next_s = 0.0
        self._suppressed = 0

    def warning(self, message: str) -> None:
        now = time.monotonic()
        if now < self._next_s:
            self._suppressed += 1
            return
        if self._suppressed:
            message += f" ({self._suppressed} more like it in the last {self.interval_s:g} s)"
        self.logger.warning(message)
        self._next_s, self._suppressed = now + self.interval_s, 0
