"""Building blocks for the contract suite: targets, enqueue through the engine, and
domain commands applied through the port. Nothing here knows an adapter."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_token
from jobledger.domain import job_commands, job_outcomes, jobs
from jobledger.domain.jobs import Change, Job, Lane, Stamp
from jobledger.domain.schedules import commands as schedule_commands
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.domain.schedules.spec import ScheduleSpec
from jobledger.engine import Engine
from jobledger.storage.feed import Wake
from jobledger.storage.port import Store
from tests.builders import new_job as new_job  # shared with the other suites

FAST = "fast:t"
FAST_OTHER = "fast:u"
LONG = "long:t"
EXCLUSIVE = "schedule:nightly"
LEASE = timedelta(minutes=5)


async def _noop(job: Job) -> None:
    return None


def register_targets(engine: Engine) -> None:
    engine.targets.register(FAST, Lane.FAST, _noop)
    engine.targets.register(FAST_OTHER, Lane.FAST, _noop)
    engine.targets.register(LONG, Lane.LONG, _noop, delivery_mode="at_least_once")
    engine.targets.register(EXCLUSIVE, Lane.LONG, _noop, exclusive=True)


async def enqueue(engine: Engine, target: str = FAST, payload: Any = None, **options: Any) -> Job:
    """Enqueue one job in its own committed transaction; return its row."""
    async with engine.transaction() as tx:
        result = await engine.enqueue(target, payload, tx=tx, **options)
    assert result.inserted and result.job_id is not None
    job = await engine.store.admin.get_job(result.job_id)
    assert job is not None
    return job


def claim(job: Job, clock: FakeClock, *, pod: str = "pod-a", exclusive: bool = False) -> Change:
    return job_commands.claim(
        job, token=new_token(), pod=pod, lease=LEASE, exclusive=exclusive, stamp=Stamp(clock.now())
    )


def renew(job: Job, clock: FakeClock) -> Change:
    return job_commands.renew_lease(job, lease=LEASE, stamp=Stamp(clock.now()))


def dispatch(job: Job, clock: FakeClock, *, pod: str = "pod-a") -> Change:
    return job_commands.dispatch(job, token=new_token(), pod=pod, stamp=Stamp(clock.now()))


def succeed(job: Job, clock: FakeClock) -> Change:
    return job_outcomes.decide_outcome(
        job, job_outcomes.RunResult(job_outcomes.Result.OK), _policy(), Stamp(clock.now())
    ).change


def kill(job: Job, clock: FakeClock) -> Change:
    run = job_outcomes.RunResult(job_outcomes.Result.DEAD_NOW, error="rejected")
    return job_outcomes.decide_outcome(job, run, _policy(), Stamp(clock.now())).change


def _policy() -> job_outcomes.OutcomePolicy:
    return job_outcomes.OutcomePolicy(jobs.DeliveryMode.AT_LEAST_ONCE, 6, (1, 2, 4, 8, 16))


def declared_schedule(code: str, at: datetime) -> Change:
    """A schedule stream's first event and row, from the domain's schedule commands."""
    spec = ScheduleSpec(code, "*/5 * * * *", "UTC", MissedSlotPolicy.SKIP, 3)
    return schedule_commands.declared(spec, Stamp(at))


def disable_schedule(row: Schedule, at: datetime) -> Change:
    change = schedule_commands.disabled(row, Stamp(at))
    assert change is not None
    return change


class Subscriber:
    """Reads a store's change feed in a task, one wake at a time."""

    def __init__(self, store: Store) -> None:
        self._feed = store.feed()
        self._next: asyncio.Task[Wake] | None = None

    async def start(self) -> Subscriber:
        await self._feed.open()  # every commit from now on wakes it
        self._arm()
        return self

    def _arm(self) -> None:
        async def first() -> Wake:
            return await anext(self._feed)

        self._next = asyncio.create_task(first())

    @property
    def woken(self) -> bool:
        return self._next is not None and self._next.done()

    async def wake(self, timeout: float = 5.0) -> Wake:
        """The next wake; fails the test if none arrives within `timeout` seconds."""
        assert self._next is not None
        wake = await asyncio.wait_for(asyncio.shield(self._next), timeout)
        self._arm()
        return wake

    async def close(self) -> None:
        if self._next is not None:
            self._next.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await self._next
        await self._feed.aclose()
