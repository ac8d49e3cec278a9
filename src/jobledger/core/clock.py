"""The injected clock. Every time read in the engine goes through one of these."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from jobledger.domain.timeutil import at_ms


class Clock(Protocol):
    def now(self) -> datetime: ...

    async def sleep(self, seconds: float) -> None: ...


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SystemClock:
    def now(self) -> datetime:
        """The wall clock in whole milliseconds, as `at_ms(datetime.now(UTC))` gives it:
        the epoch plus the whole milliseconds of `time.time_ns()` (exact timedelta
        arithmetic, half the cost of truncating a `datetime`; the lanes read it per job)."""
        return _EPOCH + timedelta(0, 0, 0, time.time_ns() // 1_000_000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class FakeClock:
    """A clock tests move by hand: `advance(minutes=16)` wakes sleepers that are due."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = at_ms(start or datetime(2026, 1, 1, tzinfo=UTC))
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    def set(self, value: datetime) -> None:
        self._now = at_ms(value)
        self._wake()

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        self._now = at_ms(self._now + (delta or timedelta(**kwargs)))
        self._wake()
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # already due: just let others run
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + timedelta(seconds=seconds), future))
        await future

    def _wake(self) -> None:
        keep = []
        for when, future in self._sleepers:
            if when <= self._now:
                if not future.done():
                    future.set_result(None)
            elif not future.done():
                keep.append((when, future))
        self._sleepers = keep
