"""Replay over every adapter: the log rebuilds exactly the live read models.

Architecture sketch, "The queue is an inline projection": replay must produce exactly
the jobs table from the log; a tampered read model is reported field by field and
`--apply` repairs it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_id
from jobledger.domain.events import SYSTEM
from jobledger.domain.jobs import JobStatus, Stamp
from jobledger.domain.schedules.row import Schedule
from jobledger.projections.replay import (
    EXTRA,
    FIELD,
    MISSING,
    replay,
)
from jobledger.projections.schedules import schedule_apply
from jobledger.storage.port import Store
from tests.contract.projections.test_replay_workload import (
    EVENTS_PER_CYCLE,
    generate,
)
from tests.stores import all_jobs


@pytest.mark.slow
async def test_replay_of_100k_events_rebuilds_the_live_read_models(
    store: Store, clock: FakeClock
) -> None:
    jobs_count = 25_000
    started = time.perf_counter()
    workload = await generate(store, clock, jobs_count=jobs_count)
    generated = time.perf_counter()
    assert workload.events == jobs_count // 8 * EVENTS_PER_CYCLE == 100_000

    report = await replay(store, page=5000)
    replayed = time.perf_counter()
    print(
        f"\n{store.name}: generated {workload.events} events in {generated - started:.1f}s,"
        f" replayed in {replayed - generated:.1f}s"
    )
    assert report.events == 100_000
    assert report.problems == []
    assert report.differences == [], "\n".join(d.describe() for d in report.differences[:20])
    assert report.ok
    live = await all_jobs(store)
    assert report.jobs_rebuilt == len(live) == len(workload.open_rows) == jobs_count * 3 // 8
    statuses = {j.status for j in live}
    assert statuses == {JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DEAD}
    assert {j.id: j for j in live} == workload.open_rows


async def test_a_tampered_read_model_is_reported_and_apply_repairs_it(
    store: Store, clock: FakeClock
) -> None:
    await generate(store, clock, jobs_count=80)
    live = await all_jobs(store)
    dead = next(j for j in live if j.status == JobStatus.DEAD)
    pending = next(j for j in live if j.status == JobStatus.PENDING)
    dropped = next(j for j in live if j.status == JobStatus.RUNNING)
    ghost = replace(pending, id="f" * 32, dedupe_key="ghost")
    tampered = [
        replace(j, attempts=j.attempts + 5, last_error="edited")
        if j.id == dead.id
        else replace(j, next_run_at=j.next_run_at.replace(year=2030))
        if j.id == pending.id
        else j
        for j in live
        if j.id != dropped.id
    ] + [ghost]
    schedules = await store.admin.list_schedules()
    await store.projections.replace_read_models(tampered, schedules)

    report = await replay(store)
    assert not report.ok
    found = {(d.key, d.kind, d.field) for d in report.differences}
    assert found == {
        (dead.id, FIELD, "attempts"),
        (dead.id, FIELD, "last_error"),
        (pending.id, FIELD, "next_run_at"),
        (dropped.id, MISSING, None),
        (ghost.id, EXTRA, None),
    }
    attempts = next(d for d in report.differences if d.field == "attempts")
    assert (attempts.live, attempts.rebuilt) == (dead.attempts + 5, dead.attempts)
    text = "\n".join(report.lines())
    assert f"jobs {dropped.id}: missing from the live read model" in text
    assert f"jobs {ghost.id}: in the live read model, not in the log" in text

    repaired = await replay(store, apply=True)
    assert repaired.applied and repaired.ok
    assert {j.id: j for j in await all_jobs(store)} == {j.id: j for j in live}
    again = await replay(store)
    assert again.ok and not again.applied


async def test_replay_of_an_empty_store_is_clean(store: Store) -> None:
    report = await replay(store)
    assert report.ok and report.events == 0 and report.jobs_rebuilt == 0


async def _schedules(store: Store, clock: FakeClock) -> list[Schedule]:
    """Three schedules with declare, disable, override and a tick that enqueues a slot."""
    from jobledger.domain.schedules import commands as sd
    from jobledger.domain.schedules import tick
    from jobledger.domain.schedules.spec import make_spec

    def stamp() -> Stamp:
        return Stamp(clock.now(), SYSTEM, "trace-schedules")

    rows: dict[str, Schedule] = {}
    for code, cron in (
        ("nightly", "0 2 * * *"),
        ("every5", "*/5 * * * *"),
        ("hourly", "0 * * * *"),
    ):
        spec = make_spec(
            code,
            cron,
            timezone="UTC",
            missed_slot_policy=None,
            runs_per_slot=3,
            now=clock.now(),
            skip_max_interval=timedelta(minutes=5),
        )
        change = sd.declared(spec, stamp())
        assert await store.writes.apply([change]) == [True]
        rows[code] = change.row
    off = sd.disabled(rows["hourly"], stamp())
    over = sd.override_set(rows["nightly"], "30 3 * * *", stamp())
    assert off is not None
    assert await store.writes.apply([off, over]) == [True, True]
    due = rows["every5"].next_run_at
    assert due is not None
    clock.set(due)
    plan = tick.plan_tick(
        rows["every5"],
        clock.now(),
        grace=timedelta(seconds=60),
        stamp=stamp(),
        job_id=new_id(),
        partitions=64,
    )
    assert plan is not None and plan.job is not None
    assert await store.writes.apply(plan.changes) == [True, True]
    return await store.admin.list_schedules()


async def test_schedules_are_replayed_and_a_tampered_schedule_is_reported(
    store: Store, clock: FakeClock
) -> None:
    if schedule_apply() is None:
        pytest.fail("jobledger.domain.schedules.apply_schedule is missing: schedules cannot replay")
    await generate(store, clock, jobs_count=16)
    live = await _schedules(store, clock)
    assert [s.code for s in live] == ["every5", "hourly", "nightly"]

    report = await replay(store)
    assert report.ok, "\n".join(report.lines())
    assert report.schedules_rebuilt == 3

    _every5, hourly, nightly = live
    jobs_now = await all_jobs(store)
    await store.projections.replace_read_models(
        jobs_now, [replace(hourly, enabled=True), replace(nightly, cron_override=None)]
    )
    report = await replay(store)
    found = {(d.model, d.key, d.kind, d.field) for d in report.differences}
    assert found == {
        ("schedules", "every5", MISSING, None),
        ("schedules", "hourly", FIELD, "enabled"),
        ("schedules", "nightly", FIELD, "cron_override"),
    }
    repaired = await replay(store, apply=True)
    assert repaired.applied and repaired.ok
    assert await store.admin.list_schedules() == live
