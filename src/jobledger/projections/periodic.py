"""A sweep that runs now and then on the injected clock (retention, the log archive)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from jobledger.core.clock import Clock
from jobledger.core.tasks import cancel_and_wait

logger = logging.getLogger("jobledger.periodic")


class Periodic:
    """Calls `sweep()` every `interval_s`; a failing sweep is logged and retried next time."""

    def __init__(
        self, name: str, sweep: Callable[[], Awaitable[object]], clock: Clock, interval_s: float
    ) -> None:
        self.name = name
        self._sweep = sweep
        self.clock = clock
        self.interval_s = interval_s
        self.sweeps = 0  # sweeps finished since start, failed ones included
        self._swept = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def wait_for_sweeps(self, count: int) -> None:
        async with self._swept:
            await self._swept.wait_for(lambda: self.sweeps >= count)

    async def _loop(self) -> None:
        while True:
            try:
                await self._sweep()
            except Exception:
                logger.exception("%s sweep failed; next one in %ss", self.name, self.interval_s)
            async with self._swept:
                self.sweeps += 1
                self._swept.notify_all()
            await self.clock.sleep(self.interval_s)
