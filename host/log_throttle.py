"""At most one log line per period for one thing; the lines skipped meanwhile are counted.

Whatever can repeat at the rate of its cause (a folder written all the time,
a capsule's announcements, failed accepts, an attacker's bad tokens) says so
through a `LogThrottle`, so that the cause cannot fill the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LogThrottle:
    """One line per `every_s`: `ready()` is None to stay quiet, else how many were skipped since the last line."""

    def __init__(self, every_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()  # callers log from several threads (request handlers)
        self._last: float | None = None
        self._skipped = 0

    def ready(self) -> int | None:
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self.every_s:
                self._skipped += 1
                return None
            skipped, self._last, self._skipped = self._skipped, now, 0
            return skipped


class LogThrottles:
    """A `LogThrottle` per kind of line, so that one flood does not hide another kind.

    The kinds must be a small fixed set (fixed phrases, exception types), never
    what a sender chose: each kind is kept for good."""

    def __init__(self, every_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._by_kind: dict[str, LogThrottle] = {}

    def ready(self, kind: str) -> int | None:
        """As `LogThrottle.ready`, for lines of this kind."""
        with self._lock:
            throttle = self._by_kind.get(kind)
            if throttle is None:
                throttle = self._by_kind[kind] = LogThrottle(self.every_s, clock=self._clock)
        return throttle.ready()
