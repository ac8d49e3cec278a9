"""The single enqueue's cursor per caller connection (`storage/postgres/cursors.py`):
one per connection, whatever the connection's own factories, bounded, and never in the
way of a connection that closed."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.cursors import CursorCache

pytestmark = pytest.mark.postgres


async def noop(job: Job) -> None:
    return None


def engine_of(pg: PostgresStore) -> Engine:
    engine = Engine(pg)
    engine.targets.register("mail", "fast", noop)
    return engine


async def test_a_connection_keeps_one_cursor_across_transactions(pg: PostgresStore) -> None:
    engine = engine_of(pg)
    conn = await psycopg.AsyncConnection.connect(pg.dsn)
    try:
        ids = []
        for n in range(3):
            async with conn.transaction():
                ids.append((await engine.enqueue("mail", {"n": n}, tx=conn)).job_id)
                ids.append((await engine.enqueue("mail", {"n": -n}, tx=conn, key="k")).job_id)
        assert len(pg._cursors) == 1
        for job_id in ids:
            assert await pg.get_job(job_id or "") is not None
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


async def test_the_cache_drops_the_cursors_of_closed_connections_first(
    pg: PostgresStore,
) -> None:
    cache = CursorCache(size=3)
    conns = [await psycopg.AsyncConnection.connect(pg.dsn) for _ in range(5)]
    try:
        first = cache.cursor(conns[0])
        assert cache.cursor(conns[0]) is first and first.connection is conns[0]
        cache.cursor(conns[1])
        cache.cursor(conns[2])
        await conns[1].close()
        cache.cursor(conns[3])  # full: the closed connection's cursor goes
        assert len(cache) == 3 and cache.cursor(conns[0]) is first
        cache.cursor(conns[4])  # full of open ones: all go
        assert len(cache) == 1 and cache.cursor(conns[0]) is not first
    finally:
        for conn in conns:
            await conn.close()
