"""PostgreSQL adapter: migrations, the caller's transaction, partial batches, the log.

These run against the real server (marker `postgres`); each test gets a fresh schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.jobs import Job, Lane, Stamp
from jobledger.storage.feed import EVERYTHING, Wake
from jobledger.storage.port import LeaseGuard
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.schema import LATEST, migrate
from jobledger.storage.rows import JOB_FIELDS, SCHEDULE_FIELDS
from tests.builders import new_job
from tests.factories.postgres import business_count, business_write, fresh_schema
from tests.stores import all_jobs

pytestmark = pytest.mark.postgres


async def next_wake(feed: AsyncIterator[Wake], timeout: float = 10.0) -> Wake:
    return await asyncio.wait_for(anext(feed), timeout)


async def test_migrations_are_idempotent_and_safe_when_processes_race() -> None:
    async with fresh_schema() as (dsn, schema):
        conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(5)]
        try:
            applied = await asyncio.gather(*(migrate(c, schema) for c in conns))
            assert sorted(applied) == [0, 0, 0, 0, LATEST]
            assert await migrate(conns[0], schema) == 0
            cur = await conns[0].execute(f'SELECT version FROM "{schema}".schema_version')
            assert [r[0] for r in await cur.fetchall()] == list(range(1, LATEST + 1))
            cur = await conns[0].execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = %s",
                (schema,),
            )
            columns: dict[str, set[str]] = {}
            for table, column in await cur.fetchall():
                columns.setdefault(table, set()).add(column)
            # every field storage/rows.py maps has a column (catches a new field early)
            assert set(JOB_FIELDS) | {"order_key"} <= columns["jobs"]
            assert set(SCHEDULE_FIELDS) <= columns["schedules"]
        finally:
            for c in conns:
                await c.close()


async def test_enqueue_in_the_callers_transaction_commits_or_rolls_back_with_it(
    pg: PostgresStore, clock: FakeClock
) -> None:
    waiting = asyncio.ensure_future(next_wake(await pg.feed().open()))  # subscribed
    first = new_job(clock, key="K")
    dropped = new_job(clock, key="R")
    assert dropped.row.partition != first.row.partition
    with pytest.raises(RuntimeError):
        async with pg.writes.transaction() as tx:
            await business_write(tx, "rolled back")
            assert await pg.writes.append_in(tx, [dropped]) == [True]
            raise RuntimeError("the business change failed")
    assert await all_jobs(pg) == []
    assert await pg.log.read_log(0, limit=10) == []
    assert await business_count(pg) == 0

    hooks: list[str] = []
    async with pg.writes.transaction() as tx:
        tx.after_commit(lambda: hooks.append("after"))
        await business_write(tx, "kept")
        assert await pg.writes.append_in(tx, [first]) == [True]
        assert hooks == []
    assert hooks == ["after"]
    (stored,) = await all_jobs(pg)
    assert stored.id == first.row.id
    assert await business_count(pg) == 1
    # the rolled-back transaction sent nothing: the first wake is the committed one,
    # with the row it wrote (`Wake.jobs`)
    wake = await waiting
    assert wake == Wake(frozenset({stored.partition}), frozenset({Lane.FAST}), False, (stored,))


async def test_a_seen_dedupe_key_inserts_nothing_and_never_aborts_the_callers_transaction(
    pg: PostgresStore, clock: FakeClock
) -> None:
    async with pg.writes.transaction() as tx:
        assert await pg.writes.append_in(tx, [new_job(clock, dedupe_key="d-1")]) == [True]
    async with pg.writes.transaction() as tx:
        # the same key again, and twice within one call: the first of the call wins
        flags = await pg.writes.append_in(
            tx,
            [
                new_job(clock, dedupe_key="d-1"),
                new_job(clock, dedupe_key="d-2"),
                new_job(clock, dedupe_key="d-2"),
            ],
        )
        assert flags == [False, True, False]
        await business_write(tx, "still fine")  # the transaction is not aborted
    assert len(await all_jobs(pg)) == 2
    assert await business_count(pg) == 1
    # both keys are in the log now: only an unseen key inserts
    fresh = [new_job(clock, dedupe_key=key) for key in ("d-1", "d-2", "d-3")]
    assert await pg.writes.apply(fresh) == [False, False, True]


async def test_two_open_transactions_racing_on_one_dedupe_key_keep_one_and_abort_neither(
    pg: PostgresStore, clock: FakeClock
) -> None:
    conn_a = await psycopg.AsyncConnection.connect(pg.dsn)
    conn_b = await psycopg.AsyncConnection.connect(pg.dsn)
    try:
        assert await pg.writes.append_in(conn_a, [new_job(clock, dedupe_key="race")]) == [True]
        # B's insert waits on A's uncommitted key, then sees it committed
        b = asyncio.create_task(pg.writes.append_in(conn_b, [new_job(clock, dedupe_key="race")]))
        await asyncio.sleep(0.2)
        assert not b.done()
        await conn_a.commit()
        assert await asyncio.wait_for(b, 10) == [False]
        await business_write(conn_b, "b's own row")
        await conn_b.commit()  # B's transaction was never aborted
    finally:
        await conn_a.close()
        await conn_b.close()
    assert len(await all_jobs(pg)) == 1
    assert await business_count(pg) == 1


async def test_apply_drops_losers_one_by_one_and_keeps_the_rest(
    pg: PostgresStore, clock: FakeClock
) -> None:
    made = [new_job(clock, key=f"k{i}") for i in range(5)]
    assert await pg.writes.apply(made) == [True] * 5
    rows: list[Job] = [c.row for c in made]
    stamp = Stamp(clock.now())
    stale = job_commands.dispatch(rows[1], token="t0", pod="p", stamp=stamp)
    assert await pg.writes.apply([stale]) == [True]
    batch = [
        job_commands.dispatch(rows[0], token="t1", pod="p", stamp=stamp),
        job_commands.dispatch(rows[1], token="t2", pod="p", stamp=stamp),  # stale: v1 is gone
        new_job(clock, dedupe_key=rows[2].dedupe_key),  # a seen dedupe key
        job_commands.cancel(rows[3], stamp),  # leaves the queue
        job_commands.dispatch(
            rows[3], token="t3", pod="p", stamp=stamp
        ),  # same stream, 2nd round: stale
    ]
    # a change after another on the same stream in one call applies in order
    d4 = job_commands.dispatch(rows[4], token="t4", pod="p", stamp=stamp)
    assert d4.row is not None
    batch += [d4, job_commands.cancel(Job(**{**_fields(d4.row), "inflight_token": None}), stamp)]
    assert await pg.writes.apply(batch) == [True, False, False, True, False, True, True]
    left = {j.id: j for j in await all_jobs(pg)}
    assert set(left) == {rows[0].id, rows[1].id, rows[2].id}
    assert left[rows[0].id].inflight_token == "t1"
    assert left[rows[1].id].inflight_token == "t0"
    assert [e.type for e in await pg.log.read_stream(rows[4].stream)] == [
        "JobEnqueued",
        "JobDispatched",
        "JobCancelled",
    ]


def _fields(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in JOB_FIELDS}


async def test_the_lease_guard_and_running_code_collisions_drop_only_their_changes(
    pg: PostgresStore, clock: FakeClock
) -> None:
    await pg.coordination.seed_partitions(64)
    now = clock.now()
    a, b = new_job(clock, key="a"), new_job(clock, key="b")
    while b.row.partition == a.row.partition:
        b = new_job(clock, key=b.row.key + "x")
    assert await pg.writes.apply([a, b]) == [True, True]
    assert await pg.coordination.take_partition(
        a.row.partition, "pod-1", now, now + timedelta(seconds=30)
    )
    stamp = Stamp(now)
    guard = LeaseGuard("pod-1", now)
    marks = [job_commands.dispatch(c.row, token="t", pod="pod-1", stamp=stamp) for c in (a, b)]
    assert await pg.writes.apply(marks, guard=guard) == [True, False]
    # an expired lease guards nothing any more
    later = LeaseGuard("pod-1", now + timedelta(seconds=31))
    again = job_commands.dispatch(
        (await pg.admin.get_job(a.row.id)), token="t2", pod="pod-1", stamp=stamp
    )  # type: ignore[arg-type]
    assert await pg.writes.apply([again], guard=later) == [False]

    longs = [new_job(clock, target="schedule:x", lane=Lane.LONG) for _ in range(3)]
    assert await pg.writes.apply(longs) == [True] * 3
    claims = [
        job_commands.claim(
            c.row, token=f"c{i}", pod="p", lease=timedelta(minutes=5), exclusive=True, stamp=stamp
        )
        for i, c in enumerate(longs)
    ]
    plain = job_commands.dispatch(
        (await pg.admin.get_job(b.row.id)), token="t", pod="p", stamp=stamp
    )  # type: ignore[arg-type]
    assert await pg.writes.apply([claims[0], claims[1], plain]) == [True, False, True]
    assert await pg.writes.apply([claims[2]]) == [False]
    assert await pg.queue.running_codes(now) == {"schedule:x"}
    assert await pg.queue.running_codes(now + timedelta(minutes=6)) == set()


async def test_a_reader_never_skips_a_transaction_that_commits_late(
    pg: PostgresStore, clock: FakeClock
) -> None:
    async with pg.writes.transaction() as tx:
        await pg.writes.append_in(tx, [new_job(clock)])
    seen = await pg.log.read_log(0, limit=100)
    assert len(seen) == 1
    last = seen[-1].position
    assert last is not None

    conn_a = await psycopg.AsyncConnection.connect(pg.dsn)
    try:
        a = new_job(clock, payload="A")
        assert await pg.writes.append_in(conn_a, [a]) == [True]  # A appends and stays open
        b = new_job(clock, payload="B")
        async with pg.writes.transaction() as tx:  # B appends after A and commits first
            assert await pg.writes.append_in(tx, [b]) == [True]
        assert await pg.admin.get_job(b.row.id) is not None
        # B is committed, but A (older) may still commit: nothing past `last` yet
        assert await pg.log.read_log(last, limit=100) == []
        await conn_a.commit()
    finally:
        await conn_a.close()
    after = await pg.log.read_log(last, limit=100)
    assert [e.stream for e in after] == [a.stream, b.stream]
    positions = [last] + [e.position or 0 for e in after]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


async def test_log_positions_only_grow_in_read_order_across_pages(
    pg: PostgresStore, clock: FakeClock
) -> None:
    for _ in range(3):
        await pg.writes.apply([new_job(clock) for _ in range(7)])
    events, after = [], 0
    while page := await pg.log.read_log(after, limit=4):
        events += page
        after = page[-1].position or 0
    positions = [e.position or 0 for e in events]
    assert len(events) == 21
    assert positions == sorted(positions)


async def test_another_store_on_the_same_schema_is_woken_by_a_commit(
    pg: PostgresStore, clock: FakeClock
) -> None:
    peer = PostgresStore(pg.dsn, partitions=64, schema=pg.schema)
    await peer.open()
    try:
        feed = await peer.feed().open()
        waiting = asyncio.ensure_future(next_wake(feed))
        change = new_job(clock, key="k", lane=Lane.LONG)
        await pg.writes.apply([change])
        wake = await waiting
        assert wake.partitions == frozenset({change.row.partition})
        assert wake.lanes == frozenset({Lane.LONG})
        waiting = asyncio.ensure_future(next_wake(feed))
        await asyncio.sleep(0)
        await pg.projections.replace_read_models(await all_jobs(pg), [])
        assert await waiting == EVERYTHING
    finally:
        await peer.close()


async def test_payload_order_keys_and_event_text_round_trip(
    pg: PostgresStore, clock: FakeClock
) -> None:
    keyless = new_job(clock, payload={"big": 1e20, "neg": -0.0, "s": "ü"})
    keyed = new_job(clock, key="ä-key")
    await pg.writes.apply([keyless, keyed])
    events = await pg.log.read_log(0, limit=10)
    from jobledger.domain.chain import verify_chain

    assert verify_chain(events) == []  # json keeps the exact text the hash covered
    part = keyless.row.partition
    rows = await pg.queue.fast_pending(part, after_key=None, limit=10)
    assert [j.id for j in rows][:1] == [keyless.row.id]
    assert await pg.queue.fast_pending(part, after_key=keyless.row.order_key, limit=10) == [
        j for j in rows if j.order_key > keyless.row.order_key
    ]


async def test_an_outcome_event_keeps_its_exact_number_text(
    pg: PostgresStore, clock: FakeClock
) -> None:
    """The apply statement carries event data as JSON text inside a jsonb parameter and
    stores that text as json: numbers jsonb would rewrite (1e+20, -0.0) still verify."""
    from jobledger.domain.chain import verify_chain
    from jobledger.domain.events import SYSTEM
    from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
    from jobledger.domain.jobs import DeliveryMode

    opened = new_job(clock, payload={"n": 1})
    await pg.writes.apply([opened])
    policy = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 6, (1.0,))
    stamp = Stamp(clock.now(), SYSTEM, "t")
    failed = job_outcomes.decide_outcome(
        opened.row, RunResult(Result.ANSWERED, error="é ✓", duration_ms=1e20), policy, stamp
    )
    assert await pg.writes.apply([failed.change]) == [True]
    assert isinstance(failed.change.row, Job)
    done = job_outcomes.decide_outcome(
        failed.change.row, RunResult(Result.OK, duration_ms=-0.0), policy, stamp
    )
    assert await pg.writes.apply([done.change]) == [True]
    events = await pg.log.read_stream(opened.stream)
    assert [e.type for e in events] == ["JobEnqueued", "JobFailed", "JobSucceeded"]
    assert events[2].data["duration_ms"] == 0.0
    assert verify_chain(events) == []


async def test_an_open_transaction_of_another_database_does_not_hold_the_log_back(
    pg: PostgresStore, clock: FakeClock
) -> None:
    other = psycopg.conninfo.make_conninfo(pg.dsn, dbname="postgres")
    async with await psycopg.AsyncConnection.connect(other) as elsewhere:
        await elsewhere.execute("SELECT pg_current_xact_id()")  # holds an xid, stays open
        await pg.writes.apply([new_job(clock)])
        assert len(await pg.log.read_log(0, limit=10)) == 1


def test_the_read_horizon_ignores_younger_xids_and_survives_wraparound() -> None:
    from jobledger.storage.postgres.log import horizon

    top = 5 << 32 | 100  # epoch 5, xid 100
    assert horizon(top, []) == top << 20
    assert horizon(top, [90, 95]) == (top - 10) << 20
    assert horizon(top, [105]) == top << 20  # assigned after the snapshot
    assert horizon(top, [(1 << 32) - 6]) == (top - 106) << 20  # previous epoch
