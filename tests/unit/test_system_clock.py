"""`SystemClock.now`: the wall clock, aware UTC, in whole milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime

from jobledger.core.clock import SystemClock
from jobledger.domain.timeutil import at_ms


def test_now_is_the_wall_clock_truncated_to_milliseconds() -> None:
    clock = SystemClock()
    for _ in range(2000):
        before = at_ms(datetime.now(UTC))
        now = clock.now()
        after = datetime.now(UTC)
        assert now.tzinfo is UTC
        assert now.microsecond % 1000 == 0
        assert before <= now <= after
        assert at_ms(now) == now
