"""The single enqueue on a caller's own connection: any number of transactions on one
connection, whatever the connection's own factories, never in the way of a connection
that closed — and the store keeps no reference to a caller's connection."""

from __future__ import annotations

import gc
import weakref

import psycopg
import pytest
from psycopg.rows import dict_row

from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.storage.postgres import PostgresStore

pytestmark = pytest.mark.postgres


async def noop(job: Job) -> None:
    return None


def engine_of(pg: PostgresStore) -> Engine:
    engine = Engine(pg)
    engine.targets.register("mail", "fast", noop)
    return engine


async def test_a_connection_enqueues_across_transactions(pg: PostgresStore) -> None:
    engine = engine_of(pg)
    conn = await psycopg.AsyncConnection.connect(pg.dsn)
    try:
        ids = []
        for n in range(3):
            async with conn.transaction():
                ids.append((await engine.enqueue("mail", {"n": n}, tx=conn)).job_id)
                ids.append((await engine.enqueue("mail", {"n": -n}, tx=conn, key="k")).job_id)
        for job_id in ids:
            assert await pg.admin.get_job(job_id or "") is not None
    finally:
        await conn.close()


async def test_a_connection_with_its_own_cursor_and_row_factories_still_enqueues(
    pg: PostgresStore,
) -> None:
    engine = engine_of(pg)
    conn = await psycopg.AsyncConnection.connect(
        pg.dsn, cursor_factory=psycopg.AsyncRawCursor, row_factory=dict_row
    )
    try:
        async with conn.transaction():
            done = await engine.enqueue("mail", {"raw": True}, tx=conn)
            again = await engine.enqueue("mail", None, tx=conn, dedupe_key=done.job_id)
        assert done.inserted and not again.inserted and again.job_id == done.job_id
    finally:
        await conn.close()


async def test_a_closed_connection_leaves_the_next_one_working(pg: PostgresStore) -> None:
    engine = engine_of(pg)
    for n in range(3):  # each connection closed before the next one opens
        async with await psycopg.AsyncConnection.connect(pg.dsn) as conn:
            assert (await engine.enqueue("mail", {"n": n}, tx=conn)).inserted
            await conn.commit()
    closed = await psycopg.AsyncConnection.connect(pg.dsn)
    await closed.close()
    with pytest.raises(psycopg.OperationalError):
        await engine.enqueue("mail", None, tx=closed)


async def test_a_dropped_connection_is_collected(pg: PostgresStore) -> None:
    """A caller that opens a connection per request and drops it must not find the store
    keeping it (and its socket's memory) alive."""
    engine = engine_of(pg)
    conn = await psycopg.AsyncConnection.connect(pg.dsn)
    async with conn.transaction():
        assert (await engine.enqueue("mail", {"once": True}, tx=conn)).inserted
    await conn.close()
    dropped = weakref.ref(conn)
    del conn
    gc.collect()
    assert dropped() is None
