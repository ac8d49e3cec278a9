"""The PostgreSQL enqueue path: the statement's positional rows read every column as
the table's own type, and both the statement and the COPY of large batches keep the
guarantees of the generic write statement."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import psycopg
import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, jobs
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Change, NewJob, Stamp
from jobledger.storage.jsontext import dumps
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.sql import (
    EVENT_COLUMNS,
    EVENT_TYPES,
    JOB_TYPES,
    OPENING_EVENT_FIELDS,
)
from jobledger.storage.postgres.writes import COPY_FROM
from jobledger.storage.rows import JOB_FIELDS
from tests.factories.postgres import business_count, business_write
from tests.stores import all_jobs

pytestmark = pytest.mark.postgres

_TYPE_NAMES = {"timestamptz": "timestamp with time zone"}


async def column_types(pg: PostgresStore, table: str) -> dict[str, str]:
    rows = await pg.connections.rows(
        "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (f"{pg.s}.{table}",),
    )
    return {r["attname"]: r["type"] for r in rows}


async def test_the_statement_and_the_copy_write_every_column_as_its_table_type(
    pg: PostgresStore,
) -> None:
    def expected(types: dict[str, str], column: str) -> str:
        sql_type = types.get(column, "text")
        return _TYPE_NAMES.get(sql_type, sql_type)

    job_types = await column_types(pg, "jobs")
    assert {c: job_types[c] for c in (*JOB_FIELDS, "order_key")} == {
        c: expected(JOB_TYPES, c) for c in (*JOB_FIELDS, "order_key")
    }
    event_types = await column_types(pg, "events")
    event_cols = (*EVENT_COLUMNS.split(", "), "dedupe_key")
    assert {c: event_types[c] for c in event_cols} == {
        c: expected(EVENT_TYPES, c) for c in event_cols
    }
    assert set(OPENING_EVENT_FIELDS) < set(event_cols)


def opening(clock: FakeClock, n: int, dedupe: str) -> Change:
    return job_commands.enqueued(
        job_id=f"job-{n}",
        spec=NewJob("kafka:t", {"n": n}),
        code="kafka:t",
        lane=jobs.Lane.FAST,
        partition=n % 4,
        dedupe_key=dedupe,
        stamp=Stamp(clock.now()),
    )


async def test_two_statements_of_one_transaction_keep_positions_growing(
    pg: PostgresStore, clock: FakeClock
) -> None:
    async with pg.writes.transaction() as tx:
        assert await pg.writes.append_in(tx, [opening(clock, 1, "a"), opening(clock, 2, "b")]) == [
            True,
            True,
        ]
        # a loser in the middle leaves a gap, never a reused position
        assert await pg.writes.append_in(
            tx, [opening(clock, 3, "c"), opening(clock, 4, "a"), opening(clock, 5, "e")]
        ) == [True, False, True]
        await business_write(tx, "kept")
    log = await pg.log.read_log(0, limit=10)
    assert [e.stream for e in log] == ["job:job-1", "job:job-2", "job:job-3", "job:job-5"]
    positions = [e.position or 0 for e in log]
    assert positions == sorted(positions) and len(set(positions)) == 4
    assert len({p >> 20 for p in positions}) == 1  # one transaction's range
    assert await business_count(pg) == 1


def batch(
    clock: FakeClock, tag: str, n: int = COPY_FROM, *, seen: str | None = None
) -> list[Change]:
    """`n` new jobs (enough for the COPY path); the middle one reuses dedupe key `seen`."""
    out = []
    for k in range(n):
        dedupe = seen if seen is not None and k == n // 2 else f"{tag}-{k}"
        spec = NewJob(
            "kafka:t",
            None if k % 11 == 0 else {"k": k, "s": "tab\there ü"},
            key=None if k % 5 == 0 else f"key-{k % 7}",
            headers={"h": "v"} if k % 2 else None,
            run_at=clock.now() + timedelta(seconds=k) if k % 3 == 0 else None,
        )
        out.append(
            job_commands.enqueued(
                job_id=f"{tag}-job-{k:04d}",
                spec=spec,
                code="kafka:t",
                lane=jobs.Lane.FAST,
                partition=k % 4,
                dedupe_key=dedupe,
                stamp=Stamp(clock.now(), Actor(id="u", via="api")),
            )
        )
    return out


async def test_a_large_batch_is_copied_with_every_field_the_domain_computed(
    pg: PostgresStore, clock: FakeClock
) -> None:
    changes = batch(clock, "a")
    feed = await pg.feed().open()
    waiting = asyncio.ensure_future(anext(feed))
    async with pg.writes.transaction() as tx:
        assert await pg.writes.append_in(tx, changes) == [True] * len(changes)
        await business_write(tx, "kept")
    assert {j.id: j for j in await all_jobs(pg)} == {c.row.id: c.row for c in changes}
    log = await pg.log.read_log(0, limit=1000)
    assert [e.stream for e in log] == [c.stream for c in changes]
    assert log == [c.events[0] for c in changes] and verify_chain(log) == []
    wake = await asyncio.wait_for(waiting, 10)
    assert wake.partitions == frozenset(range(4)) and wake.lanes == frozenset({jobs.Lane.FAST})
    # the copied events carry their dedupe keys: new jobs reusing the first and last lose
    reused = batch(clock, "b", 1, seen="a-0") + batch(clock, "c", 1, seen=f"a-{COPY_FROM - 1}")
    assert await pg.writes.apply(reused) == [False, False]


async def test_a_large_batch_with_a_seen_dedupe_key_drops_that_job_alone(
    pg: PostgresStore, clock: FakeClock
) -> None:
    async with pg.writes.transaction() as tx:
        await pg.writes.append_in(tx, [opening(clock, 0, "taken")])
    changes = batch(clock, "b", seen="taken")
    async with pg.writes.transaction() as tx:
        flags = await pg.writes.append_in(tx, changes)
        await business_write(tx, "the transaction is not aborted")
    assert flags == [k != COPY_FROM // 2 for k in range(COPY_FROM)]
    assert len(await all_jobs(pg)) == COPY_FROM
    positions = [e.position or 0 for e in await pg.log.read_log(0, limit=1000)]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert await business_count(pg) == 1


async def test_a_rolled_back_large_batch_leaves_nothing(
    pg: PostgresStore, clock: FakeClock
) -> None:
    with pytest.raises(RuntimeError):
        async with pg.writes.transaction() as tx:
            await pg.writes.append_in(tx, batch(clock, "c"))
            await business_write(tx, "gone too")
            raise RuntimeError("rollback")
    assert await all_jobs(pg) == [] and await pg.log.read_log(0, limit=10) == []
    assert await business_count(pg) == 0


async def test_a_large_batch_outside_a_transaction_block_is_one_statement(
    pg: PostgresStore, clock: FakeClock
) -> None:
    # not in a transaction block yet (an autocommit connection there is refused): the
    # statement opens it, and the caller commits
    async with await psycopg.AsyncConnection.connect(pg.dsn) as conn:
        assert await pg.writes.append_in(conn, batch(clock, "d")) == [True] * COPY_FROM
        await conn.commit()
    assert len(await all_jobs(pg)) == COPY_FROM


async def test_two_open_transactions_copying_one_dedupe_key_keep_one_and_abort_neither(
    pg: PostgresStore, clock: FakeClock
) -> None:
    conn_a = await psycopg.AsyncConnection.connect(pg.dsn)
    conn_b = await psycopg.AsyncConnection.connect(pg.dsn)
    try:
        await conn_a.execute("SELECT 1")  # both inside a transaction block: the COPY path
        await conn_b.execute("SELECT 1")
        assert (
            await pg.writes.append_in(conn_a, batch(clock, "e", seen="race")) == [True] * COPY_FROM
        )
        # B's COPY waits on A's uncommitted key, then B writes its batch without it
        b = asyncio.create_task(pg.writes.append_in(conn_b, batch(clock, "f", seen="race")))
        await asyncio.sleep(0.2)
        assert not b.done()
        await conn_a.commit()
        flags = await asyncio.wait_for(b, 10)
        assert flags == [k != COPY_FROM // 2 for k in range(COPY_FROM)]
        await business_write(conn_b, "b's own row")
        await conn_b.commit()
    finally:
        await conn_a.close()
        await conn_b.close()
    assert len(await all_jobs(pg)) == 2 * COPY_FROM - 1
    assert await business_count(pg) == 1


async def test_a_copy_that_fails_midway_leaves_nothing_and_the_transaction_usable(
    pg: PostgresStore, clock: FakeClock
) -> None:
    changes = batch(clock, "g")
    last = changes[-1]
    # a key PostgreSQL text cannot hold: the COPY fails after most rows were sent
    bad = dataclasses.replace(last, row=dataclasses.replace(last.row, key="nul\x00key"))
    async with pg.writes.transaction() as tx:
        with pytest.raises(psycopg.DataError):
            await pg.writes.append_in(tx, [*changes[:-1], bad])
        await business_write(tx, "still usable")
    assert await all_jobs(pg) == [] and await pg.log.read_log(0, limit=10) == []
    assert await business_count(pg) == 1


async def test_a_large_batch_on_a_latin1_connection_keeps_its_text(
    pg: PostgresStore, clock: FakeClock
) -> None:
    changes = batch(clock, "h")
    dsn = f"{pg.dsn} options='-c client_encoding=LATIN1'"
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute("SELECT 1")  # inside a transaction block
        assert await pg.writes.append_in(conn, changes) == [True] * len(changes)
        await conn.commit()
    assert {j.id: j for j in await all_jobs(pg)} == {c.row.id: c.row for c in changes}
    assert await pg.log.read_log(0, limit=1000) == [c.events[0] for c in changes]


async def test_one_job_at_a_time_writes_what_the_batch_writes(
    pg: PostgresStore, clock: FakeClock
) -> None:
    """A single enqueue goes through its own statement (scalar parameters): every field
    the domain computed, the event's exact text, positions growing within the
    transaction, its wake-up, and a seen dedupe key writing nothing."""
    changes = batch(clock, "one", 12)
    feed = await pg.feed().open()
    waiting = asyncio.ensure_future(anext(feed))
    async with pg.writes.transaction() as tx:
        for change in changes[:6]:
            assert await pg.writes.append_in(tx, [change]) == [True]
        assert await pg.writes.append_in(tx, changes[6:9]) == [True] * 3  # the batch statement
        for change in changes[9:]:
            assert await pg.writes.append_in(tx, [change]) == [True]
        await business_write(tx, "kept")
    assert {j.id: j for j in await all_jobs(pg)} == {c.row.id: c.row for c in changes}
    keys = await pg.connections.tuples(f"SELECT id, order_key FROM {pg.s}.jobs")
    assert dict(keys) == {c.row.id: c.row.order_key.encode() for c in changes}
    log = await pg.log.read_log(0, limit=100)
    assert log == [c.events[0] for c in changes] and verify_chain(log) == []
    assert len({(e.position or 0) >> 20 for e in log}) == 1  # one transaction's range
    wake = await asyncio.wait_for(waiting, 10)
    assert wake.partitions is not None and wake.partitions <= frozenset(range(4))
    assert wake.lanes == frozenset({jobs.Lane.FAST})
    # the row's payload is the event's payload text (json keeps 1e300 and -0.0 as sent)
    numbers = job_commands.enqueued(
        job_id="numbers",
        spec=NewJob("kafka:t", {"big": 1e300, "neg": -0.0}),
        code="kafka:t",
        lane=jobs.Lane.FAST,
        partition=1,
        dedupe_key="numbers",
        stamp=Stamp(clock.now()),
    )
    assert await pg.writes.apply([numbers]) == [True]
    differ = await pg.connections.value(
        f"SELECT count(*) FROM {pg.s}.jobs j JOIN {pg.s}.events e ON e.stream = 'job:' || j.id"
        " WHERE j.payload::text IS DISTINCT FROM (e.data->'payload')::text"
        " AND j.payload IS NOT NULL"
    )
    assert differ == 0
    text = await pg.connections.value(f"SELECT payload::text FROM {pg.s}.jobs WHERE id = 'numbers'")
    assert text == dumps({"big": 1e300, "neg": -0.0}) and text.endswith('"neg":-0.0}')
    (again,) = batch(clock, "two", 1, seen="one-3")
    assert await pg.writes.apply([again]) == [False]
    async with pg.writes.transaction() as tx:
        assert await pg.writes.append_in(tx, [again]) == [False]
    assert await pg.admin.get_job(again.row.id) is None
