"""The scheduler: declare schedules in code, sync them at boot, tick on every pod, run slots.

    scheduler = Scheduler(engine)
    scheduler.declare("nightly_report", "0 2 * * *", build_report, timezone="Europe/Berlin")
    await scheduler.start()      # boot sync, then the ticker (when settings.workers)

Everything decided here is decided by `jobledger.domain.schedules` (pure); this module
reads rows, applies the changes it gets back, retries a lost compare-and-set, and runs
the ticker loop. Every pod ticks: a slot's schedule advance and its job go to the store
in ONE `apply` call, so the pod that loses the race on the schedule stream writes
nothing, and the slot's dedupe key `<code>:<slot ISO>` drops its job if the schedule
change of a winner already committed. docs/schedules.md explains the rules.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobledger.admin.schedules import CAS_RETRIES, ScheduleCommands
from jobledger.core import context
from jobledger.core.clock import Clock
from jobledger.core.ids import new_id
from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.errors import (
    DuplicateSchedule,
    InvalidArgument,
    SkipRun,
)
from jobledger.domain.events import SYSTEM
from jobledger.domain.jobs import Change, DeliveryMode, Job, JobStatus, Lane, Stamp
from jobledger.domain.schedules import commands as sched
from jobledger.domain.schedules import slot_run
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule, schedule_target
from jobledger.domain.schedules.spec import ScheduleSpec, make_spec
from jobledger.domain.schedules.tick import TickPlan, plan_tick
from jobledger.domain.timeutil import at_ms
from jobledger.reactors.waiting import wait_for
from jobledger.storage.feed import Subscription, Wake
from jobledger.storage.port import JobFilter

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.scheduler")

#: how many PENDING jobs of a code the run_once collapse looks at (newest first)
NEWER_SLOT_SCAN = 50
#: pause before ticking again when a schedule is still due right after a tick
MIN_RETICK_S = 1.0


@dataclass(frozen=True, slots=True)
class SlotRun:
    """What a schedule handler receives: the schedule code, the slot time, the job."""

    code: str
    slot: datetime  # aware UTC
    job: Job


SlotHandler = Callable[[SlotRun], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Declaration:
    spec: ScheduleSpec
    handler: SlotHandler


def _boot(spec: ScheduleSpec) -> Callable[[Schedule | None, Stamp], Change | None]:
    def build(row: Schedule | None, stamp: Stamp) -> Change | None:
        return sched.declared(spec, stamp) if row is None else sched.synced(row, spec, stamp)

    return build


class Scheduler(ScheduleCommands):
    """Declares schedules, syncs them at boot, ticks, and runs slots (admin commands: the base)."""

    def __init__(self, engine: Engine, *, clock: Clock | None = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.settings = engine.settings
        self.clock: Clock = clock or engine.clock
        self._declared: dict[str, Declaration] = {}
        self._task: asyncio.Task[None] | None = None
        self._feed_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._earliest: datetime | None = None
        self.synced = False

    # --- declaring --------------------------------------------------------------------

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.schedule_grace_s)

    def declared(self) -> list[ScheduleSpec]:
        return [self._declared[c].spec for c in sorted(self._declared)]

    def declare(
        self,
        code: str,
        cron: str,
        handler: SlotHandler,
        *,
        missed_slot_policy: MissedSlotPolicy | str | None = None,
        runs_per_slot: int | None = None,
        retry_count: int | None = None,
        timezone: str | None = None,
    ) -> ScheduleSpec:
        """Declare a schedule at start-up (before `sync`).

        `runs_per_slot` is the TOTAL number of runs one slot gets (default 3 = the
        first run and 2 retries at 1 and 2 min). `retry_count` is the TypeScript engine's
        name for the same number, kept as a deprecated alias. Raises InvalidCron,
        DuplicateSchedule, InvalidArgument.
        """
        if code in self._declared:
            raise DuplicateSchedule(f"schedule {code!r} is already declared")
        if retry_count is not None:
            warnings.warn(
                "retry_count is the total number of runs per slot; pass runs_per_slot",
                DeprecationWarning,
                stacklevel=2,
            )
            if runs_per_slot is not None and runs_per_slot != retry_count:
                raise InvalidArgument(
                    f"schedule {code!r}: runs_per_slot={runs_per_slot} and its alias"
                    f" retry_count={retry_count} disagree"
                )
        runs = runs_per_slot if runs_per_slot is not None else retry_count
        spec = make_spec(
            code,
            cron,
            timezone=timezone or self.settings.default_timezone,
            missed_slot_policy=missed_slot_policy,
            runs_per_slot=runs if runs is not None else self.settings.schedule_default_retry,
            now=self.clock.now(),
            skip_max_interval=timedelta(seconds=self.settings.schedule_skip_max_interval_s),
        )
        self.engine.targets.register(
            schedule_target(code),
            Lane.LONG,
            self._slot_handler(code),
            delivery_mode=DeliveryMode.AT_LEAST_ONCE,
            exclusive=True,
        )
        self.engine.targets.set_max_attempts(code, spec.runs_per_slot)
        self._declared[code] = Declaration(spec, handler)
        return spec

    # --- boot sync --------------------------------------------------------------------

    async def sync(self) -> list[Schedule]:
        """Insert new schedules, rewrite the code-owned fields of known ones.

        Runs on every pod, also with settings.workers off. Admin-owned fields (enabled,
        cron_override) are never touched.
        """
        rows = []
        for code in sorted(self._declared):
            row = await self._write(code, _boot(self._declared[code].spec), SYSTEM, missing_ok=True)
            rows.append(row)
        self.synced = True
        return rows

    # --- the tick ---------------------------------------------------------------------

    async def tick(self) -> list[TickPlan]:
        """One tick: enqueue the due slot of every enabled, due, declared schedule.

        Returns the plans this pod wrote (another pod may have written the others).
        """
        now = self.clock.now()
        applied: list[TickPlan] = []
        earliest: datetime | None = None
        for row in await self.store.admin.list_schedules():
            if row.code not in self._declared:
                continue  # a code this build does not declare: no handler here to run it
            plan, row = await self._tick_one(row, now)
            if plan is not None:
                applied.append(plan)
            if row.enabled and row.next_run_at is not None:
                earliest = row.next_run_at if earliest is None else min(earliest, row.next_run_at)
        self._earliest = earliest
        return applied

    async def _tick_one(self, row: Schedule, now: datetime) -> tuple[TickPlan | None, Schedule]:
        written: tuple[datetime, str] | None = None  # (slot, job id) written on a lost race
        for _ in range(CAS_RETRIES):
            plan = self._plan(row, now, written[1] if written else None)
            if plan is not None and written is not None and plan.slot != written[0]:
                plan = self._plan(row, now, None)
            if plan is None:
                return None, row
            flags = await self.store.writes.apply(plan.changes)
            if flags[0]:
                self._report(plan, job_written=len(flags) > 1 and flags[1])
                assert isinstance(plan.schedule.row, Schedule)
                return plan, plan.schedule.row
            if len(flags) > 1 and flags[1]:
                # the schedule moved under us (an admin command or a slot record) but
                # this slot's job was new: it is a real slot of the cron, so it stays,
                # and a re-plan of the same slot names this job in ScheduleSlotEnqueued
                written = (plan.slot, plan.job.row.id if plan.job else "")
                logger.warning(
                    "schedule %s: slot %s enqueued while the schedule changed concurrently",
                    row.code,
                    plan.slot,
                )
            fresh = await self.store.admin.get_schedule(row.code)
            if fresh is None:
                return None, row
            row = fresh
        logger.warning("schedule %s: tick gave up after %d lost races", row.code, CAS_RETRIES)
        return None, row

    def _plan(self, row: Schedule, now: datetime, job_id: str | None) -> TickPlan | None:
        return plan_tick(
            row,
            now,
            grace=self.grace,
            stamp=Stamp(now, SYSTEM, context.new_trace_id()),
            job_id=job_id or new_id(int(now.timestamp() * 1000)),
            partitions=self.settings.partitions,
        )

    def _report(self, plan: TickPlan, *, job_written: bool) -> None:
        code = plan.schedule.stream.removeprefix("schedule:")
        if plan.missed is not None and plan.reason is not None:
            logger.warning(
                "schedule missed code=%s slots=%d reason=%s action=%s %s",
                code,
                plan.missed.count,
                plan.reason,
                "enqueued newest" if plan.job is not None else "skipped",
                plan.detail,
            )
            self.engine.observers.schedule_missed(code, plan.missed.count, plan.reason)
        if plan.job is not None:
            if job_written:
                self.engine.observers.enqueued(schedule_target(code), 1)
            else:
                logger.info("schedule %s: slot %s already had its job", code, plan.slot)

    # --- the slot run -----------------------------------------------------------------

    def _slot_handler(self, code: str) -> Callable[[Job], Awaitable[object]]:
        async def run_slot(job: Job) -> object:
            return await self.run_slot(code, job)

        return run_slot

    async def run_slot(self, code: str, job: Job) -> object:
        """The registered handler of target `schedule:<code>` (the long lane calls it).

        A slot whose first run starts more than the grace after its slot time is
        skipped (raises SkipRun, the outcome path writes JobSkipped) per the policy;
        otherwise the declared handler runs. ScheduleSlotRan / ScheduleSlotSkipped are
        then recorded on the schedule stream, best effort (docs/schedules.md).
        """
        declaration = self._declared[code]
        now = self.clock.now()
        row = await self.store.admin.get_schedule(code)
        policy = row.missed_slot_policy if row else declaration.spec.missed_slot_policy
        slot = slot_run.slot_of(job)
        newer = False
        if slot_run.needs_newer_slot_check(policy, job, now, grace=self.grace):
            newer = await self._newer_slot_pending(code, job, slot)
        verdict = slot_run.decide_slot_run(
            row, policy, job, now, grace=self.grace, newer_pending=newer
        )
        if not verdict.run:
            await self._record(code, lambda r, s: slot_run.slot_skipped(r, job, verdict, s))
            raise SkipRun(verdict.skip_text)
        result = await declaration.handler(SlotRun(code, slot, job))
        await self._record(code, lambda r, s: slot_run.slot_ran(r, job, s))
        return result

    async def _newer_slot_pending(self, code: str, job: Job, slot: datetime) -> bool:
        rows, _ = await self.store.admin.list_jobs(
            JobFilter(code=code, status=JobStatus.PENDING, target=schedule_target(code)),
            offset=0,
            limit=NEWER_SLOT_SCAN,
        )
        for other in rows:
            if other.id == job.id:
                continue
            try:
                if slot_run.slot_of(other) > slot:
                    return True
            except InvalidArgument:
                continue
        return False

    async def _record(self, code: str, build: Callable[[Schedule, Stamp], Change]) -> None:
        """Write a slot record on the schedule stream; a failure is logged, not raised
        (the job's own outcome is the truth, the record is its projection)."""
        try:
            await self._write(code, build, SYSTEM)
        except Exception:
            logger.exception("schedule %s: could not record the slot outcome", code)

    # --- the reactor ------------------------------------------------------------------

    async def start(self) -> None:
        """Boot sync (every pod), then the ticker when settings.workers is on."""
        if not self.synced:
            await self.sync()
        if not self.settings.workers or self._task is not None:
            return
        self._stopping = False
        # subscribed before the first tick: a change committed once start() returned
        # wakes the ticker (in the background it could miss one until the next interval)
        feed = self.store.feed()
        feed.on_wake = self._on_wake  # as published: no task woken per wake-up
        try:
            await feed.open()
        except Exception:
            logger.exception("schedule feed could not subscribe; the timer still ticks")
        self._feed_task = asyncio.create_task(
            self._watch_feed(feed), name="jobledger-schedule-feed"
        )
        self._task = asyncio.create_task(self._loop(), name="jobledger-scheduler")

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        await cancel_and_wait(self._task, self._feed_task)
        self._task = self._feed_task = None

    def delay(self) -> float:
        """Seconds until the next tick: the tick interval, or sooner when the earliest
        next_run_at says so (a timer, not a poll); 0 when a schedule is due already."""
        delay = self.settings.schedule_tick_s
        if self._earliest is not None:
            until = (self._earliest - at_ms(self.clock.now())).total_seconds()
            delay = min(delay, until)
        return max(delay, 0.0)

    async def _loop(self) -> None:
        again = False  # a tick right after a tick, because a slot fell due meanwhile
        while not self._stopping:
            self._wake.clear()
            try:
                await self.tick()
            except Exception:
                logger.exception("schedule tick failed")
                self._earliest = None
            if self._stopping:
                break
            delay = self.delay()
            if delay == 0.0 and not again:
                again = True  # the clock passed a slot while this tick ran
                continue
            again = False
            # still due right after a tick: a write keeps failing; do not spin
            await wait_for(self._wake, self.clock, delay or MIN_RETICK_S)

    def _on_wake(self, wake: Wake) -> None:
        if wake.schedules:
            self._wake.set()

    async def _watch_feed(self, feed: Subscription) -> None:
        try:
            async for wake in feed:
                self._on_wake(wake)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("schedule feed stopped; the timer still ticks")
        finally:  # cancelled before its first read, it still leaves the feed
            await asyncio.shield(feed.aclose())
