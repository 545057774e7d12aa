"""A log line that may repeat on every request or connection, written at most once per interval.

ZooKeeper's ``RateLogger``: the first message of an interval goes out at once; the ones that
follow within the interval are counted.  The count rides on the next message written, or, if
none comes, on the line ``flush`` writes once the interval is over (the server's ticker calls
it), so a burst of a thousand refusals is two lines: the first, and one with the count.
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
        self._last = ""  # the last message held back

    def warning(self, message: str) -> None:
        now = time.monotonic()
        if now < self._next_s:
            self._suppressed += 1
            self._last = message
            return
        if self._suppressed:
            message += f" ({self._suppressed} more like it in the last {self.interval_s:g} s)"
        self.logger.warning(message)
        self._next_s, self._suppressed = now + self.interval_s, 0

    def flush(self) -> None:
        """Write the count of what was held back, once its interval is over."""
        if self._suppressed and time.monotonic() >= self._next_s:
            count, self._suppressed = self._suppressed, 0
            self.logger.warning("%d more like this in the last %g s, the last: %s", count, self.interval_s, self._last)
            self._next_s = time.monotonic() + self.interval_s


class RateLimitedLogs:
    """One ``RateLimitedLog`` per kind of message (a refused connection, a protocol error...),
    so a flood of one kind neither hides nor is hidden by another."""

    def __init__(self, logger: logging.Logger, interval_s: float) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._logs: dict[str, RateLimitedLog] = {}

    def warning(self, kind: str, message: str) -> None:
        log = self._logs.get(kind)
        if log is None:
            log = self._logs[kind] = RateLimitedLog(self.logger, self.interval_s)
        log.warning(message)

    def flush(self) -> None:
        for log in self._logs.values():
            log.flush()
