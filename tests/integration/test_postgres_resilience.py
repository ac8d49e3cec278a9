"""PostgreSQL adapter under connection loss: the feed reconnects, the pool recovers,
and a transaction cut off by the server leaves nothing half-written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import Lane
from jobledger.storage.feed import EVERYTHING, Wake
from jobledger.storage.postgres import PostgresStore
from tests.builders import new_job
from tests.factories.postgres import business_count, business_write, make_store
from tests.stores import all_jobs

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    async with make_store(tmp_path, pool_min=1, pool_max=1, listen_retry_s=0.05) as store:
        assert isinstance(store, PostgresStore)
        yield store


async def terminate(dsn: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        # with a timeout the call returns once the backend has exited
        cur = await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        assert (await cur.fetchone()) == (True,)


async def pooled_pid(store: PostgresStore) -> int:
    async with store.pool.connection() as conn:
        return conn.info.backend_pid


async def test_the_listen_connection_survives_termination_and_wakes_again(
    pg: PostgresStore, clock: FakeClock
) -> None:
    assert pg.listener.backend_pid is None  # nobody subscribed: no LISTEN connection
    feed = await pg.feed().open()
    waiting = asyncio.ensure_future(asyncio.wait_for(anext(feed), 10))
    await asyncio.sleep(0)
    old = pg.listener.backend_pid
    assert old is not None
    await terminate(pg.dsn, old)
    # notifications may have been missed while it was down: everything is woken
    assert await waiting == EVERYTHING
    assert pg.listener.reconnects == 1
    assert pg.listener.backend_pid not in (None, old)

    waiting = asyncio.ensure_future(asyncio.wait_for(anext(feed), 10))
    await asyncio.sleep(0)
    change = new_job(clock, key="after-reconnect")
    await pg.writes.apply([change])
    wake = await waiting
    assert wake == Wake(frozenset({change.row.partition}), frozenset({Lane.FAST}), False, wake.jobs)
    assert [job.id for job in wake.jobs] == [change.row.id]


async def test_apply_works_right_after_its_pooled_connection_was_terminated(
    pg: PostgresStore, clock: FakeClock
) -> None:
    pid = await pooled_pid(pg)
    await terminate(pg.dsn, pid)
    # the checkout check sees the dead idle connection; the pool hands out a new one
    assert await pg.writes.apply([new_job(clock)]) == [True]
    assert await pooled_pid(pg) != pid
    assert len(await all_jobs(pg)) == 1


async def test_a_transaction_cut_off_by_the_server_leaves_nothing_and_the_next_call_works(
    pg: PostgresStore, clock: FakeClock
) -> None:
    lost = new_job(clock, key="lost")
    with pytest.raises(psycopg.OperationalError):
        async with pg.writes.transaction() as tx:
            await business_write(tx, "half")
            assert await pg.writes.append_in(tx, [lost]) == [True]
            await terminate(pg.dsn, tx.native.info.backend_pid)
            # the commit (or the next statement) finds the connection gone
    assert await all_jobs(pg) == []
    assert await pg.log.read_log(0, limit=10) == []
    assert await business_count(pg) == 0
    # the broken connection was discarded; the same dedupe key is still free
    assert await pg.writes.apply([lost]) == [True]
    assert [j.id for j in await all_jobs(pg)] == [lost.row.id]


async def listening_backends(dsn: str, channel: str) -> int:
    """Server sessions LISTENing on `channel` (pg_listening_channels is per session, so
    count the sessions whose last statement was that LISTEN)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{channel}"',),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def test_the_listen_connection_runs_only_while_the_feed_has_a_subscriber(
    pg: PostgresStore, clock: FakeClock
) -> None:
    channel = pg.sql.channel
    assert await pg.writes.apply([new_job(clock, key="before")]) == [
        True
    ]  # enqueue-only: no LISTEN
    assert pg.listener.backend_pid is None and await listening_backends(pg.dsn, channel) == 0
    first = await pg.feed().open()
    second = await pg.feed().open()
    assert await listening_backends(pg.dsn, channel) == 1
    await first.aclose()
    assert pg.listener.running  # one subscriber left
    reading = asyncio.ensure_future(anext(second))
    await asyncio.sleep(0)
    reading.cancel()  # a reader cancelled while it waits leaves the feed
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert pg.listener.backend_pid is None and not pg.listener.running
    assert await listening_backends(pg.dsn, channel) == 0
    again = await pg.feed().open()  # a new subscriber listens again, before open() returns
    change = new_job(clock, key="after")
    assert await pg.writes.apply([change]) == [True]
    wake = await asyncio.wait_for(anext(again), 10)
    assert wake == Wake(frozenset({change.row.partition}), frozenset({Lane.FAST}), False, wake.jobs)
    assert [job.id for job in wake.jobs] == [change.row.id]
    await again.aclose()


async def test_a_subscription_opening_while_the_store_closes_does_not_hang(
    pg: PostgresStore,
) -> None:
    opening = asyncio.ensure_future(pg.feed().open())
    await asyncio.sleep(0)  # its LISTEN connection is being made
    await pg.listener.stop()  # what close() does first
    sub = await asyncio.wait_for(opening, 5)
    await sub.aclose()
