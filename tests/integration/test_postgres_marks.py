"""PostgreSQL names each partition's marked row in its `marks` row (migration 8): the
statement that sets a mark overwrites its partition's row, on every write path (the
lean mark alone, the first mark of a handed-over row, the general apply of a group
commit); the end of a mark writes nothing there. The takeover reads the named rows and
judges those that still carry a mark, so a name left by an ended mark is ignored, and a
marked row with no name (never the lane's) is judged when the lane's pass meets it.
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
from jobledger.domain.policies import partition_of
from jobledger.storage.port import LeaseGuard
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.schema import migrate
from tests.integration.test_postgres_first_mark import lease, written

pytestmark = pytest.mark.postgres

POD = "pod-a"


@pytest.fixture(autouse=True)
async def _seeded(pg: PostgresStore) -> None:
    await pg.coordination.seed_partitions(pg.partitions)


async def entries(pg: PostgresStore) -> set[tuple[int, str]]:
    async with pg.pool.connection() as conn:
        cur = await conn.execute(f"SELECT partition, id FROM {pg.s}.marks")
        return {(row[0], row[1]) for row in await cur.fetchall()}


async def in_flight(pg: PostgresStore) -> set[tuple[int, str]]:
    return {(j.partition, j.id) for j in await pg.queue.inflight_in(list(range(pg.partitions)))}


async def current(pg: PostgresStore, job: Job) -> Job:
    row = await pg.admin.get_job(job.id)
    assert row is not None
    return row


def stamp(clock: FakeClock) -> Stamp:
    return Stamp(clock.now(), SYSTEM)


def keys(count: int, *, same_partition: bool = False) -> list[str]:
    """`count` keys, each of its own partition (or all of one)."""
    found: dict[int, str] = {}
    first = partition_of("K0", "K0")
    n = 0
    while len(found) < count:
        key = f"K{n}"
        part = partition_of(key, key)
        if same_partition and part == first:
            found[n] = key
        elif not same_partition and part not in found:
            found[part] = key
        n += 1
    return list(found.values())


async def test_each_mark_names_its_row_and_an_ended_mark_is_ignored(pg: PostgresStore) -> None:
    clock = FakeClock()
    guard = LeaseGuard(POD, clock.now())
    jobs = [await written(pg, clock, key=k) for k in keys(4)]
    for job in jobs:
        await lease(pg, clock, job.partition)

    # the lean statement of a mark alone, then its outcome through the general apply
    lone = job_commands.dispatch(jobs[0], token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([lone], guard=guard) == [True]
    assert await entries(pg) == {(jobs[0].partition, jobs[0].id)}
    assert await in_flight(pg) == {(jobs[0].partition, jobs[0].id)}
    marked = await current(pg, jobs[0])
    done = job_outcomes.succeeded(marked, RunResult(Result.OK, duration_ms=1.0), stamp(clock))
    assert await pg.writes.apply([done.change]) == [True]
    assert await entries(pg) == {(jobs[0].partition, jobs[0].id)}  # its name stays
    assert await in_flight(pg) == set()  # and is ignored: the row is gone

    # the first mark of a handed-over row, then its release (an unmark)
    first = job_commands.dispatch(jobs[1], token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.mark_first(first, guard)
    assert (jobs[1].partition, jobs[1].id) in await entries(pg)
    assert await in_flight(pg) == {(jobs[1].partition, jobs[1].id)}
    released = job_commands.unmark(await current(pg, jobs[1]), stamp(clock), "lease ending")
    assert await pg.writes.apply([released], guard=guard) == [True]
    assert await in_flight(pg) == set()

    # marks in one group commit (the general statement), judged by a takeover
    batch = [
        job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp(clock))
        for job in jobs[2:]
    ]
    assert await pg.writes.apply(batch, guard=guard) == [True, True]
    expected = {(job.partition, job.id) for job in jobs[2:]}
    assert expected <= await entries(pg)
    assert await in_flight(pg) == expected
    taken = await pg.queue.inflight_in(list(range(pg.partitions)))
    judged = [
        job_outcomes.take_over(j, DeliveryMode.AT_MOST_ONCE, stamp(clock)).change for j in taken
    ]
    assert await pg.writes.apply(judged) == [True, True]
    assert await in_flight(pg) == set()
    assert len(await entries(pg)) == 4  # one row a partition, whatever it marked


async def test_the_next_mark_of_a_partition_overwrites_its_name(pg: PostgresStore) -> None:
    clock = FakeClock()
    guard = LeaseGuard(POD, clock.now())
    one, two = [await written(pg, clock, key=k) for k in keys(2, same_partition=True)]
    await lease(pg, clock, one.partition)
    mark = job_commands.dispatch(one, token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([mark], guard=guard) == [True]
    done = job_outcomes.succeeded(
        await current(pg, one), RunResult(Result.OK, duration_ms=1.0), stamp(clock)
    )
    # the carried mark: the outcome of one row and the mark of the next in one commit
    carried = job_commands.dispatch(two, token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([done.change, carried], guard=guard) == [True, True]
    assert await entries(pg) == {(two.partition, two.id)}
    assert await in_flight(pg) == {(two.partition, two.id)}


async def test_a_batch_marking_two_rows_of_a_partition_names_its_last(
    pg: PostgresStore,
) -> None:
    """Not the lane's (it marks one row a partition at a time): the other row is judged
    when the lane's pass meets it (tests/contract/lanes)."""
    clock = FakeClock()
    guard = LeaseGuard(POD, clock.now())
    both = [await written(pg, clock, key=k) for k in keys(2, same_partition=True)]
    await lease(pg, clock, both[0].partition)
    marks = [
        job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp(clock)) for job in both
    ]
    assert await pg.writes.apply(marks, guard=guard) == [True, True]
    assert await entries(pg) == {(both[1].partition, both[1].id)}
    assert await in_flight(pg) == {(both[1].partition, both[1].id)}


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


async def test_the_rebuilt_read_model_names_its_marked_rows(pg: PostgresStore) -> None:
    clock = FakeClock()
    jobs = [await written(pg, clock, key=k) for k in keys(2)]
    await lease(pg, clock, jobs[0].partition)
    mark = job_commands.dispatch(jobs[0], token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([mark], guard=LeaseGuard(POD, clock.now())) == [True]
    rows = [await current(pg, job) for job in jobs]
    async with pg.pool.connection() as conn:  # a stale name the rebuild must drop
        await conn.execute(f"INSERT INTO {pg.s}.marks VALUES ({jobs[1].partition}, 'gone')")
    await pg.projections.replace_read_models(rows, [])
    assert await entries(pg) == {(jobs[0].partition, jobs[0].id)}
    assert await in_flight(pg) == {(jobs[0].partition, jobs[0].id)}


async def test_migration_8_replaces_the_inflight_table_with_the_names(pg: PostgresStore) -> None:
    """A schema at version 7 with a marked row listed in `inflight`: migrating drops the
    table and names the row in its partition's `marks` row, so a takeover finds it."""
    clock = FakeClock()
    job = await written(pg, clock)
    await lease(pg, clock, job.partition)
    mark = job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp(clock))
    assert await pg.writes.apply([mark], guard=LeaseGuard(POD, clock.now())) == [True]
    s = pg.s
    async with pg.pool.connection() as conn:  # back to version 7
        await conn.execute(f"DROP TABLE {s}.marks")
        await conn.execute(
            f'CREATE TABLE {s}.inflight (id text COLLATE "C" PRIMARY KEY,'
            " partition integer NOT NULL)"
        )
        await conn.execute(f"INSERT INTO {s}.inflight VALUES (%s, %s)", (job.id, job.partition))
        await conn.execute(f"DELETE FROM {s}.schema_version WHERE version = 8")
    async with pg.pool.connection() as conn:
        assert await migrate(conn, pg.schema) == 1
        cur = await conn.execute("SELECT to_regclass(%s)", (f"{s}.inflight",))
        assert await cur.fetchone() == (None,)
    assert await entries(pg) == {(job.partition, job.id)}
    assert await in_flight(pg) == {(job.partition, job.id)}
