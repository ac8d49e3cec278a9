"""Log positions on PostgreSQL (`sql_parts.base`): every statement that appends events
takes its ordinals from one transaction-local counter, so whatever mix of write paths a
transaction runs — the single enqueue with and without a caller's dedupe key, the batch
statement, the COPY of a large batch, the general statement, a savepoint rolled back —
its positions are unique and grow in call order within its own range, and the next
transaction starts its range afresh."""

from __future__ import annotations

import psycopg
import pytest

from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_id
from jobledger.domain import job_commands, jobs
from jobledger.domain.jobs import Change, NewJob, Stamp
from jobledger.engine import Engine
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.schema import ORDINAL_BITS
from jobledger.storage.postgres.writes import COPY_FROM

pytestmark = pytest.mark.postgres


def opened(clock: FakeClock, tag: str, *, dedupe: str | None = None) -> Change:
    job_id = new_id(int(clock.now().timestamp() * 1000))
    return job_commands.enqueued(
        job_id=job_id,
        spec=NewJob("kafka:t", {"tag": tag}, key=tag),
        code="kafka:t",
        lane=jobs.Lane.FAST,
        partition=1,
        dedupe_key=dedupe or job_id,
        stamp=Stamp(clock.now()),
    )


async def noop(job: jobs.Job) -> None:
    return None


async def test_every_write_path_of_one_transaction_takes_the_next_positions(
    pg: PostgresStore, clock: FakeClock
) -> None:
    engine = Engine(pg, clock=clock)
    engine.targets.register("kafka:t", "fast", noop)
    order: list[str] = []  # the streams in call order
    conn = await psycopg.AsyncConnection.connect(pg.dsn)
    try:
        async with conn.transaction():
            single = opened(clock, "a")
            assert await pg.writes.append_in(conn, [single]) == [True]  # the single enqueue
            order.append(single.stream)
            keyed = await engine.enqueue("kafka:t", None, tx=conn, dedupe_key="caller-key")
            order.append(f"job:{keyed.job_id}")
            few = [opened(clock, f"few-{k}") for k in range(3)]
            assert await pg.writes.append_in(conn, few) == [True] * 3  # the batch statement
            order += [c.stream for c in few]
            try:
                async with conn.transaction():  # a savepoint, rolled back with its event
                    await engine.enqueue("kafka:t", {"gone": True}, tx=conn, key="g")
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
            many = [opened(clock, f"many-{k}") for k in range(COPY_FROM)]
            assert await pg.writes.append_in(conn, many) == [True] * COPY_FROM  # COPY
            order += [c.stream for c in many]
            # the general statement: a new job and an event on the first job's stream
            cancel = job_commands.cancel(single.row, Stamp(clock.now()))
            mixed = [opened(clock, "mixed"), cancel]
            assert await pg.writes.append_in(conn, mixed) == [True, True]
            order += [mixed[0].stream, cancel.stream]
            last = await engine.enqueue("kafka:t", {"n": 2}, tx=conn, key="z")
            order.append(f"job:{last.job_id}")
    finally:
        await conn.close()
    log = await pg.log.read_log(0, limit=1000)
    assert [e.stream for e in log] == order
    positions = [e.position or 0 for e in log]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert len({p >> ORDINAL_BITS for p in positions}) == 1  # one transaction's range


async def test_each_transaction_counts_its_positions_from_the_start_of_its_range(
    pg: PostgresStore, clock: FakeClock
) -> None:
    for tag in ("one", "two"):
        async with pg.writes.transaction() as tx:
            assert await pg.writes.append_in(tx, [opened(clock, tag)]) == [True]
            assert await pg.writes.append_in(tx, [opened(clock, tag + "-b")]) == [True]
    log = await pg.log.read_log(0, limit=10)
    ordinals = [(e.position or 0) & ((1 << ORDINAL_BITS) - 1) for e in log]
    assert ordinals == [1, 2, 1, 2]
    assert len({(e.position or 0) >> ORDINAL_BITS for e in log}) == 2
