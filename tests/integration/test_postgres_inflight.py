"""PostgreSQL keeps one `inflight` row per marked job (migration 5), written and removed
in the statement that sets or clears the mark, on every write path: the lean mark
alone, the first mark of a handed-over row, the general apply (a group commit of
marks and outcomes), an unmark, a takeover's judgement, and the rebuilt read model.
The takeover reads the marked rows through it, so a stale or missing entry would
either leave a marked row unjudged or grow the table past the rows in flight.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_token
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import Result, RunResult
from jobledger.domain.jobs import DeliveryMode, Job, Stamp
from jobledger.storage.port import LeaseGuard
from jobledger.storage.postgres import PostgresStore
from tests.integration.test_postgres_first_mark import lease, written

pytestmark = pytest.mark.postgres

POD = "pod-a"


@pytest.fixture(autouse=True)
async def _seeded(pg: PostgresStore) -> None:
    await pg.coordination.seed_partitions(pg.partitions)


async def entries(pg: PostgresStore) -> set[tuple[str, int]]:
    async with pg.pool.connection() as conn:
        cur = await conn.execute(f"SELECT id, partition FROM {pg.s}.inflight")
        return {(row[0], row[1]) for row in await cur.fetchall()}


async def current(pg: PostgresStore, job: Job) -> Job:
    row = await pg.admin.get_job(job.id)
    assert row is not None
    return row


def stamp(clock: FakeClock) -> Stamp:
    return Stamp(clock.now(), SYSTEM)


async def test_marks_and_their_ends_keep_the_inflight_table_in_step(pg: PostgresStore) -> None:
    clock = FakeClock()
    guard = LeaseGuard(POD, clock.now())
    jobs = [await written(pg, clock, key=f"K{n}") for n in range(4)]
    for job in jobs:
        await lease(pg, clock, job.partition)

    # the lean statement of a mark alone, then its outcome through the general apply
    lone = job_commands.dispatch(jobs[0], token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([lone], guard=guard) == [True]
    assert await entries(pg) == {(jobs[0].id, jobs[0].partition)}
    marked = await current(pg, jobs[0])
    done = job_outcomes.succeeded(marked, RunResult(Result.OK, duration_ms=1.0), stamp(clock))
    assert await pg.writes.apply([done.change]) == [True]
    assert await entries(pg) == set()

    # the first mark of a handed-over row, then its release (an unmark)
    first = job_commands.dispatch(jobs[1], token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.mark_first(first, guard)
    assert await entries(pg) == {(jobs[1].id, jobs[1].partition)}
    released = job_commands.unmark(await current(pg, jobs[1]), stamp(clock), "lease ending")
    assert await pg.writes.apply([released], guard=guard) == [True]
    assert await entries(pg) == set()

    # marks in one group commit (the general statement), judged by a takeover
    batch = [
        job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp(clock))
        for job in jobs[2:]
    ]
    assert await pg.writes.apply(batch, guard=guard) == [True, True]
    expected = {(job.id, job.partition) for job in jobs[2:]}
    assert await entries(pg) == expected
    taken = await pg.queue.inflight_in(list(range(pg.partitions)))
    assert {(j.id, j.partition) for j in taken} == expected
    judged = [
        job_outcomes.take_over(j, DeliveryMode.AT_MOST_ONCE, stamp(clock)).change for j in taken
    ]
    assert await pg.writes.apply(judged) == [True, True]
    assert await entries(pg) == set()
    assert await pg.queue.inflight_in(list(range(pg.partitions))) == []


async def test_a_refused_mark_writes_no_entry(pg: PostgresStore) -> None:
    clock = FakeClock()
    job = await written(pg, clock)
    change = job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp(clock))
    # no lease held: the guard refuses the mark, and the table stays empty
    assert await pg.writes.apply([change], guard=LeaseGuard(POD, clock.now())) == [False]
    await lease(pg, clock, job.partition)
    later = LeaseGuard(POD, clock.now() + timedelta(minutes=10))  # past the lease
    assert await pg.writes.apply([change], guard=later) == [False]
    assert await entries(pg) == set()


async def test_the_rebuilt_read_model_lists_its_marked_rows(pg: PostgresStore) -> None:
    clock = FakeClock()
    jobs = [await written(pg, clock, key=f"K{n}") for n in range(2)]
    await lease(pg, clock, jobs[0].partition)
    mark = job_commands.dispatch(jobs[0], token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([mark], guard=LeaseGuard(POD, clock.now())) == [True]
    rows = [await current(pg, job) for job in jobs]
    async with pg.pool.connection() as conn:  # a stale entry the rebuild must drop
        await conn.execute(f"INSERT INTO {pg.s}.inflight VALUES ('gone', 3)")
    await pg.projections.replace_read_models(rows, [])
    assert await entries(pg) == {(jobs[0].id, jobs[0].partition)}
