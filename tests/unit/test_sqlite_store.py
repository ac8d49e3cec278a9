"""SQLite-specific behaviour the contract suite cannot see: schema, durability settings,
the caller's own sqlite3 connections, the watcher, and the plans of the lane reads."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import Lane
from jobledger.engine import Engine
from jobledger.storage.sqlite import SqliteStore
from jobledger.storage.sqlite.schema import LATEST
from jobledger.storage.urls import open_store
from tests.builders import new_job
from tests.contract.helpers import FAST, LONG, Subscriber, register_targets
from tests.stores import all_jobs


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    # the background watcher stays out of the way: tests call check_foreign_commits()
    store = SqliteStore(str(tmp_path / "jobs.db"), watch_interval=3600)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def engine(sqlite_store: SqliteStore, clock: FakeClock) -> Engine:
    built = Engine(sqlite_store, clock=clock, settings=Settings())
    register_targets(built)
    return built


def _raw(store: SqliteStore, *, autocommit: bool = False) -> sqlite3.Connection:
    """The caller's own connection: default (implicit transactions) or autocommit mode."""
    if autocommit:
        return sqlite3.connect(store.path, timeout=10, isolation_level=None)
    return sqlite3.connect(store.path, timeout=10)


async def test_migrations_are_versioned_and_idempotent(sqlite_store: SqliteStore) -> None:
    assert await sqlite_store.migrate() == LATEST
    again = SqliteStore(sqlite_store.path)
    await again.open()
    await again.close()
    with closing(_raw(sqlite_store)) as conn:
        versions = conn.execute("SELECT version FROM schema_version").fetchall()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert versions == [(v,) for v in range(1, LATEST + 1)]
    assert {"events", "jobs", "schedules", "partitions", "workers"} <= tables
    assert {"checkpoints", "counters"} <= tables


async def test_durability_settings(sqlite_store: SqliteStore) -> None:
    with closing(_raw(sqlite_store)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for conn in (sqlite_store.connections.w.conn, sqlite_store.connections.r.conn):
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000


async def test_open_store_url(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/from-url.db", partitions=16)
    assert isinstance(store, SqliteStore)
    assert (store.path, store.partitions) == (f"{tmp_path}/from-url.db", 16)
    await store.open()
    await store.close()
    assert (tmp_path / "from-url.db").exists()


async def test_enqueue_on_the_callers_own_connection(
    sqlite_store: SqliteStore, engine: Engine
) -> None:
    """A plain sqlite3 connection in its default (implicit transaction) mode."""
    sub = await Subscriber(sqlite_store).start()
    try:
        with closing(_raw(sqlite_store)) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (no TEXT)")
            conn.execute("INSERT INTO orders VALUES ('DO-1')")
            first = await engine.enqueue(FAST, {"do": 1}, key="DO-1", dedupe_key="d", tx=conn)
            again = await engine.enqueue(FAST, {"do": 1}, key="DO-1", dedupe_key="d", tx=conn)
            conn.execute("INSERT INTO orders VALUES ('DO-2')")
            assert await all_jobs(sqlite_store) == []  # not committed yet
            conn.commit()
        assert first.inserted and not again.inserted
        assert [j.dedupe_key for j in await all_jobs(sqlite_store)] == ["d"]
        # committed on a connection the store does not own: the watcher reports it
        assert await sqlite_store.check_foreign_commits()
        wake = await sub.wake()
        assert wake.partitions is None
    finally:
        await sub.close()


async def test_enqueue_alone_opens_the_implicit_transaction_it_would_open_for_an_insert(
    sqlite_store: SqliteStore, engine: Engine
) -> None:
    with closing(_raw(sqlite_store)) as conn:
        assert not conn.in_transaction
        assert (await engine.enqueue(FAST, dedupe_key="d", tx=conn)).inserted
        assert conn.in_transaction
        conn.rollback()
    assert await all_jobs(sqlite_store) == []


async def test_an_autocommit_connection_outside_a_transaction_is_refused(
    sqlite_store: SqliteStore, engine: Engine
) -> None:
    with closing(_raw(sqlite_store, autocommit=True)) as conn, pytest.raises(InvalidArgument):
        await engine.enqueue(FAST, dedupe_key="d", tx=conn)
    assert await sqlite_store.log.read_log(0, limit=10) == []


async def test_a_losing_change_never_breaks_the_callers_transaction(
    sqlite_store: SqliteStore, engine: Engine, clock: FakeClock
) -> None:
    existing = new_job(clock, dedupe_key="first")
    assert await sqlite_store.writes.apply([existing]) == [True]
    same_stream = new_job(clock, job_id=existing.stream.removeprefix("job:"), dedupe_key="other")
    with closing(_raw(sqlite_store)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (no TEXT)")
        conn.execute("INSERT INTO orders VALUES ('kept')")
        flags = await sqlite_store.writes.append_in(
            conn, [same_stream, new_job(clock, dedupe_key="ok")]
        )
        conn.commit()
        assert conn.execute("SELECT no FROM orders").fetchall() == [("kept",)]
    assert flags == [False, True]
    assert sorted(j.dedupe_key for j in await all_jobs(sqlite_store)) == ["first", "ok"]


async def test_a_change_that_fails_mid_write_leaves_nothing_for_the_callers_commit(
    sqlite_store: SqliteStore, clock: FakeClock
) -> None:
    """The event row is written before the job row: when the job row raises (here a
    version no INTEGER column holds, built past the enqueue rules), the change's
    savepoint is rolled back before the error reaches a caller that may catch it and
    commit its own rows (it once committed a JobEnqueued without its job)."""
    good = new_job(clock)
    assert good.row is not None
    unwritable = dataclasses.replace(good, row=dataclasses.replace(good.row, version=2**63))
    with closing(_raw(sqlite_store)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (no TEXT)")
        conn.execute("INSERT INTO orders VALUES ('kept')")
        with pytest.raises(OverflowError):
            await sqlite_store.writes.append_in(conn, [unwritable])
        conn.commit()
        assert conn.execute("SELECT no FROM orders").fetchall() == [("kept",)]
    assert await sqlite_store.log.read_log(0, limit=10) == []
    assert await all_jobs(sqlite_store) == []


async def test_own_commits_do_not_look_foreign(
    sqlite_store: SqliteStore, engine: Engine, clock: FakeClock
) -> None:
    assert await sqlite_store.writes.apply([new_job(clock, dedupe_key="a")]) == [True]
    async with engine.transaction() as tx:
        await engine.enqueue(LONG, dedupe_key="b", tx=tx)
    await sqlite_store.coordination.heartbeat("pod", clock.now())
    assert not await sqlite_store.check_foreign_commits()
    peer = SqliteStore(sqlite_store.path)
    await peer.open()
    try:
        assert await peer.writes.apply([new_job(clock, dedupe_key="c")]) == [True]
    finally:
        await peer.close()
    assert await sqlite_store.check_foreign_commits()
    assert not await sqlite_store.check_foreign_commits()


async def test_the_watcher_polls_only_while_the_feed_has_a_subscriber(
    sqlite_store: SqliteStore, clock: FakeClock
) -> None:
    assert await sqlite_store.writes.apply([new_job(clock, dedupe_key="a")]) == [True]
    assert sqlite_store._watcher is None  # enqueue-only: nothing polls data_version
    sub = await Subscriber(sqlite_store).start()
    assert sqlite_store._watcher is not None and not sqlite_store._watcher.done()
    peer = SqliteStore(sqlite_store.path)
    await peer.open()
    try:
        assert await peer.writes.apply([new_job(clock, dedupe_key="b")]) == [True]
    finally:
        await peer.close()
    assert await sqlite_store.check_foreign_commits()
    assert (await sub.wake()).partitions is None
    await sub.close()
    assert sqlite_store._watcher is None


async def test_a_second_write_from_inside_the_open_transaction_fails_fast(
    sqlite_store: SqliteStore, clock: FakeClock
) -> None:
    async with sqlite_store.writes.transaction():
        with pytest.raises(RuntimeError, match="wait for itself"):
            await sqlite_store.writes.apply([new_job(clock, dedupe_key="a")])


async def test_lane_reads_use_their_partial_indexes(
    sqlite_store: SqliteStore, engine: Engine, clock: FakeClock
) -> None:
    """Closes G10: each lane read is an index search, never a scan of the backlog."""
    for i in range(20):
        change = new_job(clock, key=f"k{i}", dedupe_key=f"f{i}")
        long_change = new_job(clock, target=LONG, lane=Lane.LONG, dedupe_key=f"l{i}")
        assert await sqlite_store.writes.apply([change, long_change]) == [True, True]
    statements: list[str] = []
    reader = sqlite_store.connections.r.conn
    reader.set_trace_callback(statements.append)
    try:
        await sqlite_store.queue.fast_pending(3, after_key="k1", limit=10)
        await sqlite_store.queue.long_candidates(clock.now(), limit=10)
        await sqlite_store.queue.next_due([1, 2], Lane.FAST)
        await sqlite_store.queue.next_due([], Lane.LONG)
        await sqlite_store.queue.running_codes(clock.now())
        await sqlite_store.queue.inflight(3)
    finally:
        reader.set_trace_callback(None)
    plans = []
    for sql in statements:
        detail = " | ".join(r[3] for r in reader.execute(f"EXPLAIN QUERY PLAN {sql}"))
        plans.append(detail)
        assert "SCAN jobs" not in detail, (sql, detail)
    joined = "\n".join(plans)
    for index in (
        "jobs_fast_pending",
        "jobs_long_pending",
        "jobs_running_lease",
        "jobs_fast_due",
        "jobs_inflight",
    ):
        assert index in joined, joined
