"""One log line per period, and the count of the lines skipped meanwhile."""

from __future__ import annotations

from astrid.host.log_throttle import LogThrottle


def test_the_first_line_is_said_then_one_per_period_with_the_skipped_count():
    now = [100.0]
    lines = LogThrottle(10.0, clock=lambda: now[0])
    assert lines.ready() == 0
    assert [lines.ready() for _ in range(3)] == [None] * 3
    now[0] += 9.9
    assert lines.ready() is None
    now[0] += 0.1
    assert lines.ready() == 4
    assert lines.ready() is None
    now[0] += 60
    assert lines.ready() == 1
