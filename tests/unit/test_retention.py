"""DEAD retention: JobExpired for DEAD rows past `dead_retention_days` (by closed_at)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.events import EventType
from jobledger.domain.job_outcomes import Result, RunResult
from jobledger.domain.jobs import Job, JobStatus, NewJob, Stamp
from jobledger.projections.replay import replay
from jobledger.projections.retention import Retention
from jobledger.storage.port import Store
from tests.contract.projections.test_replay_workload import AMO, FAST, engine_for
from tests.stores import all_jobs

SETTINGS = Settings(dead_retention_days=30)


async def _enqueue(store: Store, clock: FakeClock, count: int, tag: str) -> list[Job]:
    engine = engine_for(store, clock)
    items = [NewJob(FAST, {"i": i}, dedupe_key=f"{tag}:{i}") for i in range(count)]
    async with engine.transaction() as tx:
        results = await engine.enqueue_many(items, tx=tx)
    rows = [await store.admin.get_job(r.job_id) for r in results if r.job_id]
    return [r for r in rows if r is not None]


async def _kill(store: Store, clock: FakeClock, rows: list[Job]) -> list[Job]:
    stamp = Stamp(clock.now())
    outcomes = [
        job_outcomes.decide_outcome(j, RunResult(Result.DEAD_NOW, "bad"), AMO, stamp) for j in rows
    ]
    assert await store.writes.apply([o.change for o in outcomes]) == [True] * len(rows)
    return [o.change.row for o in outcomes]


async def test_dead_rows_expire_after_the_retention_period(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    old = await _kill(store, clock, await _enqueue(store, clock, 3, "old"))
    clock.advance(days=10)
    young = await _kill(store, clock, await _enqueue(store, clock, 2, "young"))
    pending = await _enqueue(store, clock, 2, "pending")
    retention = Retention(store, clock=clock, settings=SETTINGS)

    assert await retention.run_once(t0 + timedelta(days=30) - timedelta(milliseconds=1)) == 0
    assert await retention.run_once(t0 + timedelta(days=30)) == 3
    left = {j.id for j in await all_jobs(store)}
    assert left == {j.id for j in young + pending}
    for job in old:
        last = (await store.log.read_stream(job.stream))[-1]
        assert last.type == EventType.JOB_EXPIRED
        assert last.data == {"retention_days": 30.0}
        assert last.at == t0 + timedelta(days=30)
    assert await retention.run_once(t0 + timedelta(days=30)) == 0  # nothing twice

    assert await retention.run_once(t0 + timedelta(days=45)) == 2
    assert {j.id for j in await all_jobs(store)} == {j.id for j in pending}
    assert retention.expired_total == 5
    assert (await replay(store)).ok


async def test_a_retried_row_is_not_expired(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    dead = await _kill(store, clock, await _enqueue(store, clock, 2, "r"))
    retried = job_commands.retry(dead[0], Stamp(clock.now()))
    assert await store.writes.apply([retried]) == [True]
    retention = Retention(store, clock=clock, settings=SETTINGS)
    assert await retention.run_once(t0 + timedelta(days=31)) == 1
    rows = await all_jobs(store)
    assert [(j.id, j.status) for j in rows] == [(dead[0].id, JobStatus.PENDING)]


async def test_the_hourly_loop_runs_on_the_injected_clock(store: Store, clock: FakeClock) -> None:
    await _kill(store, clock, await _enqueue(store, clock, 2, "loop"))
    engine = engine_for(store, clock)
    engine.settings = SETTINGS
    retention = Retention.for_engine(engine)
    assert retention.interval_s == 3600
    await retention.start()
    try:
        await asyncio.wait_for(retention.wait_for_sweeps(1), 10)
        assert retention.expired_total == 0 and len(await all_jobs(store)) == 2
        clock.advance(minutes=59)  # the next sweep is an hour away
        for _ in range(20):
            await asyncio.sleep(0)
        assert retention.sweeps == 1
        clock.advance(days=30, minutes=1)
        await asyncio.wait_for(retention.wait_for_sweeps(2), 10)
        assert retention.expired_total == 2
        assert await all_jobs(store) == []
    finally:
        await retention.stop()
    await retention.stop()  # stopping twice is harmless
