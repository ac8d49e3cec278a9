"""Schedules end to end on every adapter.

A `Scheduler` over the `store` fixture with a `FakeClock`; slots run through the real
long lane of a `Runtime` (reserve + run_batch driven by hand, so nothing waits in real
time). The tests cover the reference engine's schedule cases: cron in a zone, bad
cron, default policy, one job per slot over 2 pods, retry inside a slot, DEAD slot then
next slot, missed slots after downtime, disable, override, 404/400, one RUNNING per
code, run_once collapse, other codes keep running while one exclusive code runs long.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.chain import verify_chain
from jobledger.domain.errors import DuplicateSchedule, InvalidCron, NotFound
from jobledger.domain.events import Actor, Event, EventType
from jobledger.domain.jobs import Job, JobStatus
from jobledger.domain.schedules.row import MissedSlotPolicy
from jobledger.engine import Engine
from jobledger.observability.observe import Observer
from jobledger.reactors.runtime import Runtime
from jobledger.reactors.scheduler import Scheduler, SlotRun
from jobledger.storage.feed import Subscription
from jobledger.storage.port import JobFilter, Store
from tests.builders import make_engine
from tests.contract.conftest import Kit

ADMIN = Actor(id="alice", via="http", role="admin")


class Slots:
    """A slot handler that records its runs and fails or blocks when told to."""

    def __init__(self) -> None:
        self.runs: list[SlotRun] = []
        self.fail = 0  # fail this many more runs
        self.always_fail = False
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self, run: SlotRun) -> None:
        self.runs.append(run)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.always_fail or self.fail > 0:
            self.fail -= 1
            raise RuntimeError(f"slot {run.slot} failed")

    @property
    def slots(self) -> list[datetime]:
        return [r.slot for r in self.runs]


class Missed(Observer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def schedule_missed(self, code: str, slots: int, reason: str) -> None:
        self.calls.append((code, slots, reason))


@pytest.fixture
def engine(store: Store, clock: FakeClock) -> Engine:
    return make_engine(store, clock)


@pytest.fixture
def scheduler(engine: Engine) -> Scheduler:
    return Scheduler(engine)


@pytest.fixture
async def pod(engine: Engine, seeded: Store) -> AsyncIterator[Runtime]:
    runtime = Runtime(engine, pod_id="pod-a")
    yield runtime
    await runtime.long.drain()


async def run_long(runtime: Runtime) -> list[Job]:
    """One long-lane reserve on `runtime`, and run what it claimed to the end."""
    rows = await runtime.long.reserve()
    if rows:
        await runtime.long.run_batch(rows)
    return rows


async def enqueued(store: Store, code: str) -> list[Event]:
    """The JobEnqueued event of each slot job the schedule stream names.

    Read per stream, not from the global log: a PostgreSQL log read holds back events
    while any transaction of the database runs (other suites share the server)."""
    found: list[Event] = []
    for event in await store.log.read_stream(f"schedule:{code}"):
        if event.type == EventType.SCHEDULE_SLOT_ENQUEUED:
            job_events = await store.log.read_stream(f"job:{event.data['job_id']}")
            found.extend(e for e in job_events if e.type == EventType.JOB_ENQUEUED)
    return found


async def stream_types(store: Store, code: str) -> list[str]:
    return [e.type for e in await store.log.read_stream(f"schedule:{code}")]


async def pending(store: Store, code: str) -> list[Job]:
    rows, _ = await store.admin.list_jobs(JobFilter(code=code), offset=0, limit=100)
    return sorted(rows, key=lambda j: j.payload["slot"])


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# --- declaring and boot sync ---------------------------------------------------------------


async def test_cron_in_a_zone(store: Store, clock: FakeClock, scheduler: Scheduler) -> None:
    """09:00 in Asia/Bangkok (the reference's fixed +07:00) is 02:00 UTC."""
    scheduler.declare("morning", "0 9 * * *", Slots(), timezone="Asia/Bangkok")
    (row,) = await scheduler.sync()
    assert row.next_run_at == utc(2026, 3, 3, 2, 0) and row.timezone == "Asia/Bangkok"
    clock.set(utc(2026, 3, 3, 2, 0, 5))
    (plan,) = await scheduler.tick()
    (job,) = await pending(store, "morning")
    assert job.payload == {"slot": "2026-03-03T02:00:00.000Z"}
    assert job.dedupe_key == "morning:2026-03-03T02:00:00.000Z"
    assert job.target == "schedule:morning" and job.lane == "long"
    assert plan.job is not None and plan.job.row.id == job.id


async def test_default_timezone_comes_from_settings(store: Store, clock: FakeClock) -> None:
    scheduler = Scheduler(make_engine(store, clock, default_timezone="America/New_York"))
    spec = scheduler.declare("ny", "0 9 * * *", Slots())
    assert spec.timezone == "America/New_York"
    (row,) = await scheduler.sync()
    assert row.next_run_at == utc(2026, 3, 2, 14, 0)  # 09:00 EST


async def test_bad_cron_duplicate_and_unknown_code(scheduler: Scheduler) -> None:
    with pytest.raises(InvalidCron):
        scheduler.declare("bad", "0 25 * * *", Slots())
    with pytest.raises(InvalidCron):
        scheduler.declare("bad", "* * * *", Slots())
    scheduler.declare("report", "0 * * * *", Slots())
    with pytest.raises(DuplicateSchedule):
        scheduler.declare("report", "0 * * * *", Slots())
    await scheduler.sync()
    with pytest.raises(InvalidCron) as bad:
        await scheduler.set_cron_override("report", "61 * * * *", ADMIN)
    assert bad.value.status == 400
    for call in (
        scheduler.enable("nope", ADMIN),
        scheduler.disable("nope", ADMIN),
        scheduler.set_cron_override("nope", "* * * * *", ADMIN),
        scheduler.clear_cron_override("nope", ADMIN),
    ):
        with pytest.raises(NotFound) as missing:
            await call
        assert missing.value.status == 404


async def test_default_policy_and_runs_per_slot(engine: Engine, scheduler: Scheduler) -> None:
    scheduler.declare("often", "*/5 * * * *", Slots())
    scheduler.declare("hourly", "0 * * * *", Slots(), runs_per_slot=4)
    with pytest.warns(DeprecationWarning, match="runs_per_slot"):
        scheduler.declare("legacy", "0 3 * * *", Slots(), retry_count=2)
    rows = {r.code: r for r in await scheduler.sync()}
    assert rows["often"].missed_slot_policy == MissedSlotPolicy.SKIP
    assert rows["hourly"].missed_slot_policy == MissedSlotPolicy.RUN_ONCE
    assert (rows["often"].runs_per_slot, rows["hourly"].runs_per_slot) == (3, 4)
    assert rows["legacy"].runs_per_slot == 2
    assert engine.targets.max_attempts("hourly") == 4  # the job's code is the schedule code
    target = engine.targets.get("schedule:hourly")
    assert target.exclusive and target.lane == "long" and target.delivery_mode == "at_least_once"


async def test_boot_sync_code_owns_cron_admins_own_enabled_and_override(
    store: Store, clock: FakeClock
) -> None:
    first = Scheduler(make_engine(store, clock))
    first.declare("report", "0 * * * *", Slots())
    await first.sync()
    await first.disable("report", ADMIN)
    await first.set_cron_override("report", "30 * * * *", ADMIN)
    # a restart with the same declaration writes nothing
    same = Scheduler(make_engine(store, clock))
    same.declare("report", "0 * * * *", Slots())
    await same.sync()
    assert (await stream_types(store, "report")).count(EventType.SCHEDULE_SYNCED) == 0
    # a deploy that changes the cron and the runs count
    changed = Scheduler(make_engine(store, clock))
    changed.declare("report", "15 * * * *", Slots(), runs_per_slot=5)
    (row,) = await changed.sync()
    assert (row.cron, row.runs_per_slot) == ("15 * * * *", 5)
    assert not row.enabled and row.cron_override == "30 * * * *"
    assert (await stream_types(store, "report")) == [
        EventType.SCHEDULE_DECLARED,
        EventType.SCHEDULE_DISABLED,
        EventType.SCHEDULE_OVERRIDE_SET,
        EventType.SCHEDULE_SYNCED,
    ]
    assert verify_chain(await store.log.read_stream("schedule:report")) == []


async def test_sync_runs_with_workers_off_but_no_tick(store: Store, clock: FakeClock) -> None:
    scheduler = Scheduler(make_engine(store, clock, workers=False))
    scheduler.declare("report", "* * * * *", Slots())
    await scheduler.start()
    try:
        assert (await store.admin.get_schedule("report")) is not None
        clock.advance(minutes=5)
        await asyncio.sleep(0)
        assert await enqueued(store, "report") == []
    finally:
        await scheduler.stop()


# --- the tick ------------------------------------------------------------------------------


async def test_one_job_per_slot_over_two_pods(store: Store, clock: FakeClock, kit: Kit) -> None:
    async with kit.peer(store) as other_store:
        pods = [Scheduler(make_engine(s, clock)) for s in (store, other_store)]
        for scheduler in pods:
            scheduler.declare("minutely", "* * * * *", Slots(), missed_slot_policy="run_once")
        await asyncio.gather(*(s.sync() for s in pods))
        won = [0, 0]
        for _ in range(20):
            clock.advance(minutes=1)
            plans = await asyncio.gather(*(s.tick() for s in pods))
            for i, applied in enumerate(plans):
                won[i] += len(applied)
        jobs = await enqueued(store, "minutely")
        keys = [e.data["dedupe_key"] for e in jobs]
        assert len(keys) == 20 == len(set(keys)) == sum(won)
        rows = await pending(store, "minutely")  # nobody runs them: all 20 still queued
        assert sorted(j.dedupe_key for j in rows) == sorted(keys)
        types = await stream_types(store, "minutely")
        assert types.count(EventType.SCHEDULE_DECLARED) == 1
        assert types.count(EventType.SCHEDULE_SLOT_ENQUEUED) == 20
        assert EventType.SCHEDULE_SLOTS_MISSED not in types
        assert verify_chain(await store.log.read_stream("schedule:minutely")) == []


async def test_missed_slots_after_downtime(store: Store, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    missed = Missed()
    engine.observers.add(missed)
    scheduler = Scheduler(engine)
    scheduler.declare("hourly", "0 * * * *", Slots())  # run_once
    scheduler.declare("often", "*/5 * * * *", Slots())  # skip
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 12, 22))  # pods were down from 09:00 to 12:22
    await scheduler.tick()
    (job,) = await pending(store, "hourly")
    assert job.payload["slot"] == "2026-03-02T12:00:00.000Z"  # only the newest
    assert await pending(store, "often") == []  # skip + late: nothing
    hourly = await store.admin.get_schedule("hourly")
    often = await store.admin.get_schedule("often")
    assert hourly is not None and often is not None
    assert hourly.next_run_at == utc(2026, 3, 2, 13, 0)
    assert often.next_run_at == utc(2026, 3, 2, 12, 25)  # newest 12:20 is 120 s late
    assert often.last_skipped_at == utc(2026, 3, 2, 12, 20)  # G8: recorded
    assert sorted(missed.calls) == [("hourly", 3, "missed"), ("often", 40, "missed")]
    events = await store.log.read_stream("schedule:often")
    assert events[-2].type == EventType.SCHEDULE_SLOTS_MISSED
    assert events[-2].data["count"] == 40 and "no pod ticked" in events[-2].data["detail"]


async def test_disable_stops_new_slots_but_an_enqueued_slot_still_runs(
    store: Store, clock: FakeClock, engine: Engine, scheduler: Scheduler, pod: Runtime
) -> None:
    slots = Slots()
    scheduler.declare("report", "0 * * * *", slots)
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 10, 0, 1))
    await scheduler.tick()
    row = await scheduler.disable("report", ADMIN)
    assert not row.enabled
    events = await store.log.read_stream("schedule:report")
    assert events[-1].type == EventType.SCHEDULE_DISABLED and events[-1].actor == ADMIN
    await run_long(pod)
    assert slots.slots == [utc(2026, 3, 2, 10, 0)]
    clock.set(utc(2026, 3, 2, 15, 0, 1))
    assert await scheduler.tick() == []
    assert await pending(store, "report") == []
    # re-enabled: the slots missed while disabled are dropped
    row = await scheduler.enable("report", ADMIN)
    assert row.enabled and row.next_run_at == utc(2026, 3, 2, 16, 0)
    assert await scheduler.tick() == []


async def test_override_moves_next_run_and_clear_goes_back(
    store: Store, clock: FakeClock, scheduler: Scheduler
) -> None:
    scheduler.declare("report", "0 * * * *", Slots())
    await scheduler.sync()
    row = await scheduler.set_cron_override("report", "*/20 * * * *", ADMIN)
    assert row.cron_override == "*/20 * * * *" and row.next_run_at == utc(2026, 3, 2, 9, 20)
    clock.set(utc(2026, 3, 2, 9, 20, 2))
    await scheduler.tick()
    (job,) = await pending(store, "report")
    assert job.payload["slot"] == "2026-03-02T09:20:00.000Z"
    row = await scheduler.clear_cron_override("report", ADMIN)
    assert row.cron_override is None and row.next_run_at == utc(2026, 3, 2, 10, 0)
    assert (await scheduler.get("report")) == row


class InterleavedWrites:
    """The real store's writes, with one write of another writer slipped in just before
    this pod's first schedule change reaches them (a concurrent slot record)."""

    def __init__(self, writes: Any) -> None:
        self.real = writes
        self.before_first: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def apply(self, changes: Any, **kw: Any) -> list[bool]:
        if self.before_first is not None and any(c.stream.startswith("schedule:") for c in changes):
            other, self.before_first = self.before_first, None
            assert await self.real.apply([await other()]) == [True]
        flags: list[bool] = await self.real.apply(changes, **kw)
        return flags


class Interleaved:
    """The real store, its writes `InterleavedWrites`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes = InterleavedWrites(store.writes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_tick_that_loses_the_schedule_race_keeps_one_job_and_names_it(
    store: Store, clock: FakeClock
) -> None:
    from jobledger.domain.jobs import Stamp
    from jobledger.domain.schedules import slot_run, tick

    racing = Interleaved(store)
    scheduler = Scheduler(make_engine(cast(Store, racing), clock))
    scheduler.declare("report", "0 * * * *", Slots())
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 10, 0, 1))

    async def slot_record() -> Any:  # another pod records an older slot's run meanwhile
        row = await store.admin.get_schedule("report")
        assert row is not None
        old = tick.slot_job(
            "report", utc(2026, 3, 2, 8, 0), job_id="old", partitions=64, stamp=Stamp(clock.now())
        )
        return slot_run.slot_ran(row, old.row, Stamp(clock.now()))

    racing.writes.before_first = slot_record
    (plan,) = await scheduler.tick()
    assert plan.job is not None
    (job,) = await pending(store, "report")
    assert job.payload["slot"] == "2026-03-02T10:00:00.000Z"
    events = await store.log.read_stream("schedule:report")
    assert [e.type for e in events][-2:] == [
        EventType.SCHEDULE_SLOT_RAN,
        EventType.SCHEDULE_SLOT_ENQUEUED,
    ]
    assert events[-1].data["job_id"] == job.id  # names the job that exists
    row = await store.admin.get_schedule("report")
    assert row is not None and row.next_run_at == utc(2026, 3, 2, 11, 0)
    assert verify_chain(events) == []


# --- the slot run --------------------------------------------------------------------------


async def test_retry_inside_a_slot(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    slots = Slots()
    slots.fail = 1
    scheduler.declare("report", "0 * * * *", slots)
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 10, 0, 1))
    await scheduler.tick()
    await run_long(pod)
    (job,) = await pending(store, "report")
    assert job.attempts == 1 and job.status == JobStatus.PENDING
    clock.advance(minutes=1)  # the retry runs 61 s after the slot: late, but a retry
    await run_long(pod)
    assert slots.slots == [utc(2026, 3, 2, 10, 0)] * 2
    assert await pending(store, "report") == []
    row = await store.admin.get_schedule("report")
    assert row is not None and row.last_run_at == utc(2026, 3, 2, 10, 0)


async def test_dead_slot_then_next_slot(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    slots = Slots()
    slots.always_fail = True
    scheduler.declare("report", "0 * * * *", slots, runs_per_slot=2)
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 10, 0, 1))
    await scheduler.tick()
    await run_long(pod)
    clock.advance(minutes=1)
    await run_long(pod)
    (dead,) = await pending(store, "report")
    assert dead.status == JobStatus.DEAD and dead.attempts == 2  # 2 runs in total
    slots.always_fail = False
    clock.set(utc(2026, 3, 2, 11, 0, 1))
    await scheduler.tick()
    await run_long(pod)
    assert slots.slots[-1] == utc(2026, 3, 2, 11, 0)
    assert [j.status for j in await pending(store, "report")] == [JobStatus.DEAD]
    row = await store.admin.get_schedule("report")
    assert row is not None and row.last_run_at == utc(2026, 3, 2, 11, 0)


async def test_skip_policy_skips_a_slot_that_starts_late(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    slots = Slots()
    scheduler.declare("often", "*/5 * * * *", slots)  # skip
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 9, 5, 1))
    await scheduler.tick()
    clock.set(utc(2026, 3, 2, 9, 6, 30))  # no worker took it within the grace
    await run_long(pod)
    assert slots.runs == []
    assert await pending(store, "often") == []
    (job_event,) = await enqueued(store, "often")
    skipped = (await store.log.read_stream(f"job:{job_event.data['id']}"))[-1]
    assert skipped.type == EventType.JOB_SKIPPED
    assert skipped.data["reason"].startswith("late: ")
    row = await store.admin.get_schedule("often")
    assert row is not None and row.last_skipped_at == utc(2026, 3, 2, 9, 5)
    record = (await store.log.read_stream("schedule:often"))[-1]
    assert record.type == EventType.SCHEDULE_SLOT_SKIPPED
    assert (record.data["stage"], record.data["reason"]) == ("run", "not_started")


async def test_one_running_per_code_across_pods(
    store: Store, clock: FakeClock, kit: Kit, seeded: Store
) -> None:
    """S-18: two slots PENDING, two pods reserve at once: one RUNNING row for the code."""
    async with kit.peer(store) as other_store:
        engines = [make_engine(s, clock) for s in (store, other_store)]
        handlers = [Slots(), Slots()]
        schedulers = [Scheduler(e) for e in engines]
        for scheduler, handler in zip(schedulers, handlers, strict=True):
            handler.gate = asyncio.Event()
            scheduler.declare("report", "*/10 * * * *", handler, missed_slot_policy="run_once")
        await schedulers[0].sync()
        for minute in (10, 20):
            clock.set(utc(2026, 3, 2, 9, minute, 1))
            await schedulers[0].tick()
        pods = [Runtime(e, pod_id=f"pod-{i}") for i, e in enumerate(engines)]
        claimed = await asyncio.gather(*(p.long.reserve() for p in pods))
        assert sum(len(c) for c in claimed) == 1
        running = [j for j in await pending(store, "report") if j.status == JobStatus.RUNNING]
        assert len(running) == 1
        assert await store.queue.running_codes(clock.now()) == {"report"}
        for handler in handlers:
            assert handler.gate is not None
            handler.gate.set()
        for p, rows in zip(pods, claimed, strict=True):
            if rows:
                await p.long.run_batch(rows)


async def test_run_once_collapse(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    """S-19: a late slot with a newer slot PENDING is skipped; the newer one runs."""
    slots = Slots()
    scheduler.declare("report", "*/10 * * * *", slots, missed_slot_policy="run_once")
    await scheduler.sync()
    for minute in (10, 20):
        clock.set(utc(2026, 3, 2, 9, minute, 1))
        await scheduler.tick()
    clock.set(utc(2026, 3, 2, 9, 25))  # 09:10 is 15 min late, 09:20 5 min late
    await run_long(pod)  # exclusive: one slot per reserve, the oldest first
    await run_long(pod)
    assert slots.slots == [utc(2026, 3, 2, 9, 20)]
    assert await pending(store, "report") == []
    row = await store.admin.get_schedule("report")
    assert row is not None
    assert row.last_skipped_at == utc(2026, 3, 2, 9, 10)
    assert row.last_run_at == utc(2026, 3, 2, 9, 20)
    skipped = [
        e
        for e in await store.log.read_stream("schedule:report")
        if e.type == EventType.SCHEDULE_SLOT_SKIPPED
    ]
    assert [e.data["reason"] for e in skipped] == ["newer_slot_pending"]


async def test_run_once_runs_a_late_slot_when_it_is_the_newest(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    slots = Slots()
    scheduler.declare("report", "0 * * * *", slots)
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 10, 0, 1))
    await scheduler.tick()
    clock.set(utc(2026, 3, 2, 10, 30))
    await run_long(pod)
    assert slots.slots == [utc(2026, 3, 2, 10, 0)]


async def test_other_codes_keep_running_while_one_exclusive_code_runs_long(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    """S-21/S-22: a long run of one code holds only that code's next slots."""
    slow, quick = Slots(), Slots()
    slow.gate = asyncio.Event()
    scheduler.declare("slow", "*/10 * * * *", slow, missed_slot_policy="run_once")
    scheduler.declare("quick", "*/10 * * * *", quick, missed_slot_policy="run_once")
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 9, 10, 1))
    await scheduler.tick()
    first = await pod.long.reserve()
    batch = pod.long.start_batch(first)
    try:
        await _slow_and_quick(store, clock, scheduler, pod, slow, quick, first, batch)
    finally:
        slow.gate.set()
        await batch


async def _slow_and_quick(
    store: Store,
    clock: FakeClock,
    scheduler: Scheduler,
    pod: Runtime,
    slow: Slots,
    quick: Slots,
    first: list[Job],
    batch: asyncio.Task[None],
) -> None:
    assert slow.gate is not None
    assert {j.code for j in first} == {"slow", "quick"}
    await slow.entered.wait()
    for _ in range(50):
        if quick.runs and not any(j.code == "quick" for j in await pending(store, "quick")):
            break
        await asyncio.sleep(0.01)
    await minutes_pass(store, clock, "slow", 10)  # the slow 09:10 slot is still running
    await scheduler.tick()
    second = await pod.long.reserve()
    assert [j.code for j in second] == ["quick"]  # slow's 09:20 waits for its code
    await pod.long.run_batch(second)
    assert quick.slots == [utc(2026, 3, 2, 9, 10), utc(2026, 3, 2, 9, 20)]
    (waiting,) = [j for j in await pending(store, "slow") if j.status == JobStatus.PENDING]
    assert waiting.payload["slot"] == "2026-03-02T09:20:00.000Z"
    slow.gate.set()
    await batch
    # 09:20 of slow starts 10 min late; the previous slot held the code until now
    clock.advance(seconds=1)
    await run_long(pod)
    assert slow.slots == [utc(2026, 3, 2, 9, 10), utc(2026, 3, 2, 9, 20)]


async def test_previous_slot_running_is_named_when_it_made_a_skip_slot_late(
    store: Store, clock: FakeClock, scheduler: Scheduler, pod: Runtime
) -> None:
    slots = Slots()
    slots.gate = asyncio.Event()
    scheduler.declare("often", "*/5 * * * *", slots)  # skip
    await scheduler.sync()
    clock.set(utc(2026, 3, 2, 9, 5, 1))
    await scheduler.tick()
    batch = pod.long.start_batch(await pod.long.reserve())
    await slots.entered.wait()
    await minutes_pass(store, clock, "often", 5)
    await scheduler.tick()
    await minutes_pass(store, clock, "often", 2)  # the 09:05 run ends 2 min after 09:10
    slots.gate.set()
    await batch
    await run_long(pod)
    assert slots.slots == [utc(2026, 3, 2, 9, 5)]
    record = (await store.log.read_stream("schedule:often"))[-1]
    assert record.type == EventType.SCHEDULE_SLOT_SKIPPED
    assert record.data["reason"] == "previous_slot_running"


async def minutes_pass(store: Store, clock: FakeClock, code: str, minutes: int) -> None:
    """Move the clock a minute at a time, letting the long lane's heartbeat renew the
    lease of the RUNNING row of `code` each minute (as it would in real time)."""
    for _ in range(minutes):
        clock.advance(minutes=1)

        async def renewed() -> bool:
            running = [j for j in await pending(store, code) if j.status == JobStatus.RUNNING]
            return all(
                j.lease_until is not None and j.lease_until > clock.now() + timedelta(minutes=4)
                for j in running
            )

        await until(renewed)


# --- the reactor ---------------------------------------------------------------------------


async def until(check: Any, timeout_s: float = 5.0) -> None:
    """Let background tasks run (bounded real time) until `check()` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if await check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def test_ticker_fires_on_the_timer_and_on_admin_changes(
    store: Store, clock: FakeClock
) -> None:
    """No poll: with a day-long tick interval, only the earliest next_run_at timer and
    the change feed can make it tick."""
    scheduler = Scheduler(make_engine(store, clock, schedule_tick_s=86_400.0))
    scheduler.declare("report", "0 * * * *", Slots())
    await scheduler.start()
    try:

        async def jobs() -> int:
            return len(await enqueued(store, "report"))

        async def armed_for(seconds: float) -> bool:
            return abs(scheduler.delay() - seconds) < 1.0

        await until(lambda: armed_for(3600.0))  # 09:00 → the 10:00 slot
        assert await jobs() == 0
        clock.set(utc(2026, 3, 2, 10, 0, 0))
        await until(lambda: _eq(jobs, 1))
        # an override set by another pod (its own Scheduler) wakes this ticker through
        # the change feed; it re-arms for the override's next slot
        other = Scheduler(make_engine(store, clock))
        other.declare("report", "0 * * * *", Slots())
        await other.set_cron_override("report", "* * * * *", ADMIN)
        await until(lambda: armed_for(60.0))
        clock.set(utc(2026, 3, 2, 10, 1, 0))
        await until(lambda: _eq(jobs, 2))
    finally:
        await scheduler.stop()


async def test_a_change_right_after_start_wakes_the_ticker(
    store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    """`start()` returns once the ticker is subscribed to the change feed: an admin
    change committed right after it (here while subscribing is slow, as a LISTEN
    connection being set up) wakes the ticker. It used to subscribe in the background,
    so such a change went unseen until the next tick interval (seen as a flaky test
    under load)."""
    real_open = Subscription.open

    async def slow_open(self: Subscription) -> Subscription:
        await asyncio.sleep(1.0)
        return await real_open(self)

    monkeypatch.setattr(Subscription, "open", slow_open)
    scheduler = Scheduler(make_engine(store, clock, schedule_tick_s=86_400.0))
    scheduler.declare("report", "0 * * * *", Slots())
    await scheduler.start()
    try:

        async def armed_for(seconds: float) -> bool:
            return abs(scheduler.delay() - seconds) < 1.0

        await until(lambda: armed_for(3600.0))  # 09:00 → the 10:00 slot
        other = Scheduler(make_engine(store, clock))
        other.declare("report", "0 * * * *", Slots())
        await other.set_cron_override("report", "* * * * *", ADMIN)
        await until(lambda: armed_for(60.0))
    finally:
        await scheduler.stop()


async def _eq(read: Any, expected: int) -> bool:
    value: int = await read()
    return value == expected


async def test_runtime_runs_the_slots_of_its_scheduler(
    store: Store, clock: FakeClock, seeded: Store
) -> None:
    """The whole pod: Runtime(reactors=[scheduler]) ticks, the long lane wakes on the
    feed and runs the slot; nothing but the FakeClock moves time."""
    engine = make_engine(store, clock)
    scheduler = Scheduler(engine)
    slots = Slots()
    slots.fail = 1
    scheduler.declare("report", "0 * * * *", slots)
    runtime = Runtime(engine, pod_id="pod-e2e", reactors=[scheduler])
    await runtime.start()
    try:
        assert await store.admin.get_schedule("report") is not None  # start() synced

        async def ran(count: int) -> bool:
            return len(slots.runs) == count and not runtime.long.current

        clock.set(utc(2026, 3, 2, 10, 0, 0))
        await until(lambda: ran(1))  # first run fails: retry in 1 min
        clock.advance(minutes=1)
        await until(lambda: ran(2))

        async def done() -> bool:
            row = await store.admin.get_schedule("report")
            recorded = row is not None and row.last_run_at == utc(2026, 3, 2, 10, 0)
            return recorded and await pending(store, "report") == []

        await until(done)
    finally:
        await runtime.stop()
