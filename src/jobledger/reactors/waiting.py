"""Waiting on a wake-up or a timer, through the injected clock.

`wait_for` returns as soon as `event` is set (the feed path: no sleep, no poll) or when
`timeout_s` passed on the clock (a retry timer, a probe, the safety poll). Tests use
`FakeClock`, so timers fire when the test moves the clock, never in real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import datetime, timedelta

from jobledger.core.clock import Clock, SystemClock
from jobledger.core.tasks import cancel_and_wait

MIN_IDLE_POLL_S = 5.0


async def wait_for(event: asyncio.Event, clock: Clock, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` passed; True when the event was set."""
    if event.is_set():
        return True
    if timeout_s is None:
        await event.wait()
        return True
    if type(clock) is SystemClock:
        # The wake path: a timer handle on the loop, no extra tasks to create, schedule
        # and cancel per wait (a fake clock needs its own sleep, below).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await event.wait()
        return event.is_set()
    # The deadline is fixed now, before any task runs: a clock that moves before the
    # sleeper starts must not push the timer back by the size of the jump.
    deadline = clock.now() + timedelta(seconds=max(timeout_s, 0.0))
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(_sleep_until(clock, deadline))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(waiter, sleeper)
    return event.is_set()


async def _sleep_until(clock: Clock, deadline: datetime) -> None:
    await clock.sleep(max((deadline - clock.now()).total_seconds(), 0.0))


def safety_poll_s(configured_s: float, rng: random.Random | None = None) -> float:
    """The jittered safety poll (±20 %), never more often than every 5 s when idle."""
    jitter = (rng or random).uniform(0.8, 1.2)
    return max(configured_s * jitter, MIN_IDLE_POLL_S)
