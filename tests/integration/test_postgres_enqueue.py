"""The PostgreSQL enqueue statement: its positional rows read every column as the
table's own type, and it keeps the guarantees of the generic write statement."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobledger.clock import FakeClock
from jobledger.domain import jobs
from jobledger.domain.jobs import NewJob, Stamp
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.statements import EVENT_TYPES, JOB_TYPES, OPENING_EVENT_FIELDS
from jobledger.storage.rows import JOB_FIELDS
from tests.factories.postgres import business_count, business_write, make_store

pytestmark = pytest.mark.postgres

_TYPE_NAMES = {"timestamptz": "timestamp with time zone"}


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    async with make_store(tmp_path) as store:
        assert isinstance(store, PostgresStore)
        yield store


async def column_types(pg: PostgresStore, table: str) -> dict[str, str]:
    rows = await pg._rows(
        "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (f"{pg.s}.{table}",),
    )
    return {r["attname"]: r["type"] for r in rows}


async def test_the_statement_reads_every_column_as_its_table_type(pg: PostgresStore) -> None:
    def expected(types: dict[str, str], column: str) -> str:
        sql_type = types.get(column, "text")
        return _TYPE_NAMES.get(sql_type, sql_type)

    job_types = await column_types(pg, "jobs")
    assert {c: job_types[c] for c in (*JOB_FIELDS, "order_key")} == {
        c: expected(JOB_TYPES, c) for c in (*JOB_FIELDS, "order_key")
    }
    event_types = await column_types(pg, "events")
    assert {c: event_types[c] for c in OPENING_EVENT_FIELDS} == {
        c: expected(EVENT_TYPES, c) for c in OPENING_EVENT_FIELDS
    }


def opening(clock: FakeClock, n: int, dedupe: str) -> jobs.Change:
    return jobs.enqueued(
        job_id=f"job-{n}", spec=NewJob("kafka:t", {"n": n}), code="kafka:t",
        lane=jobs.Lane.FAST, partition=n % 4, dedupe_key=dedupe, stamp=Stamp(clock.now()),
    )


async def test_two_statements_of_one_transaction_keep_positions_growing(
    pg: PostgresStore, clock: FakeClock
) -> None:
    async with pg.transaction() as tx:
        assert await pg.append_in(tx, [opening(clock, 1, "a"), opening(clock, 2, "b")]) == [
            True, True]
        # a loser in the middle leaves a gap, never a reused position
        assert await pg.append_in(
            tx, [opening(clock, 3, "c"), opening(clock, 4, "a"), opening(clock, 5, "e")]
        ) == [True, False, True]
        await business_write(tx, "kept")
    log = await pg.read_log(0, limit=10)
    assert [e.stream for e in log] == ["job:job-1", "job:job-2", "job:job-3", "job:job-5"]
    positions = [e.position or 0 for e in log]
    assert positions == sorted(positions) and len(set(positions)) == 4
    assert len({p >> 20 for p in positions}) == 1  # one transaction's range
    assert await business_count(pg) == 1
