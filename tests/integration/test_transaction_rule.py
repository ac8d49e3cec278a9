"""One transaction rule on every store and every caller path (caller_paths.PATHS): the
job commits with the caller's transaction or not at all, and every refusal — bad input,
a database without the store's tables, a connection the job would not commit with —
comes before any write and leaves the caller's transaction usable: the caller still
writes its business row and commits it.

The memory store has one path (`app.transaction()`); the MongoDB store's checks are
unit-tested without a server (tests/unit/test_mongodb_store.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jobledger import App
from jobledger.config.settings import Settings
from jobledger.domain.errors import ConfigError, InvalidArgument, InvalidPayload
from jobledger.domain.jobs import Job
from tests.integration.caller_paths import PATHS, Database, open_caller, users
from tests.integration.sync_kit import configure_django

SETTINGS = Settings(safety_poll_s=60.0)
TARGET = "mail:welcome"
CASES = [("memory", "app.transaction")] + [
    (store, path) for store in ("sqlite", "postgres") for path in PATHS
]
#: paths that refuse a store outright (a clear line, before any write)
REFUSED_PATHS: dict[tuple[str, str], Any] = {
    ("sqlite", "sqlalchemy async"): (InvalidArgument, "aiosqlite")
}


async def _noop(job: Job) -> None:
    return None


def _app(store: Any) -> App:
    app = App(store=store, settings=SETTINGS)
    app.register(TARGET, "long", _noop)
    return app


@asynccontextmanager
async def database(store: str, tmp_path: Path, *, tables: bool = True) -> AsyncIterator[Database]:
    """A database with a `users` table and an app over it: started (its tables made) when
    `tables`, else never started, so the database has none of the store's tables."""
    if store == "memory":
        app = _app("memory://")
        await app.start(workers=False)
        try:
            yield Database("memory", app, None, "users", "?", "")
        finally:
            await app.stop()
        return
    if store == "sqlite":
        path = str(tmp_path / ("shop.db" if tables else "elsewhere.db"))
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE users (name text NOT NULL)")
        conn.close()
        app = _app(f"sqlite:///{path}")
        db = Database(
            "sqlite",
            app,
            lambda: sqlite3.connect(path),
            "users",
            "?",
            f"sqlite:///{path}",
            path=path,
        )
        async with _started(app, tables):
            yield db
        return
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from jobledger.storage.postgres import PostgresStore
    from tests.factories.postgres import fresh_schema

    async with fresh_schema() as (dsn, schema):
        table = f'"{schema}".users'
        with psycopg.connect(dsn) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f"CREATE TABLE {table} (name text NOT NULL)")
        info = conninfo_to_dict(dsn)
        url = (
            f"postgresql+psycopg://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}"
            f":{info.get('port', 5432)}/{info['dbname']}"
        )
        # without tables: the app's store names a schema nobody migrated
        app = _app(PostgresStore(dsn, schema=schema if tables else f"{schema}_none"))
        db = Database("postgres", app, lambda: psycopg.connect(dsn), table, "%s", url, dsn=dsn)
        async with _started(app, tables):
            yield db


@asynccontextmanager
async def _started(app: App, started: bool) -> AsyncIterator[None]:
    if not started:
        yield
        return
    await app.start(workers=False)
    try:
        yield
    finally:
        await app.stop()


@pytest.fixture(params=CASES, ids=[f"{s}-{p}" for s, p in CASES])
async def case(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Database, str]]:
    store, path = request.param
    if path == "django":
        configure_django()
    async with database(store, tmp_path) as db:
        yield db, path


async def enqueued_streams(db: Database) -> list[str]:
    log = await db.app.pod.store.log.read_log(0, limit=100)
    return [e.stream for e in log if e.type == "JobEnqueued"]


async def test_a_commit_keeps_the_row_and_the_job_and_a_rollback_neither(
    case: tuple[Database, str],
) -> None:
    db, path = case
    refused = REFUSED_PATHS.get((db.store, path))
    rolled_back = await open_caller(path, db)
    await rolled_back.write("bob")
    if refused is None:
        assert (await rolled_back.enqueue(TARGET, {"user": "bob"})).inserted
    await rolled_back.end(commit=False)
    assert users(db) == [] and await enqueued_streams(db) == []

    committed = await open_caller(path, db)
    await committed.write("ada")
    if refused is not None:  # refused before any write: the transaction goes on
        error, says = refused
        with pytest.raises(error, match=says):
            await committed.enqueue(TARGET, {"user": "ada"})
        await committed.end(commit=True)
        assert users(db) == ["ada"] and await enqueued_streams(db) == []
        return
    job = await committed.enqueue(TARGET, {"user": "ada"})
    await committed.end(commit=True)
    assert users(db) == ["ada"] and await enqueued_streams(db) == [f"job:{job.job_id}"]


async def test_refused_input_leaves_the_transaction_usable(case: tuple[Database, str]) -> None:
    db, path = case
    refused = REFUSED_PATHS.get((db.store, path))
    payload_error = refused or (InvalidPayload, "not JSON")
    naive_error = refused or (InvalidArgument, "naive datetime")
    caller = await open_caller(path, db)
    await caller.write("before")
    with pytest.raises(payload_error[0], match=payload_error[1]):
        await caller.enqueue(TARGET, {"x": object()})
    with pytest.raises(naive_error[0], match=naive_error[1]):
        await caller.enqueue(TARGET, None, run_at=datetime(2030, 1, 1))
    await caller.write("after")
    await caller.end(commit=True)
    assert users(db) == ["after", "before"] and await enqueued_streams(db) == []


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("path", [p for p in PATHS if p != "app.transaction"])
async def test_a_database_without_the_stores_tables_is_one_line_and_the_transaction_goes_on(
    store: str, path: str, tmp_path: Path
) -> None:
    if path == "django":
        configure_django()
    async with database(store, tmp_path, tables=False) as db:
        caller = await open_caller(path, db)
        await caller.write("before")
        error, says = REFUSED_PATHS.get((store, path), (ConfigError, "no jobledger tables"))
        with pytest.raises(error, match=says) as refused:
            await caller.enqueue(TARGET, {"user": 1})
        if error is ConfigError:
            assert "jobledger migrate" in str(refused.value) and "\n" not in str(refused.value)
        await caller.write("after")
        await caller.end(commit=True)
        assert users(db) == ["after", "before"]


# --- connections the job would not commit with --------------------------------------------


@pytest.fixture
async def pg_db(tmp_path: Path) -> AsyncIterator[Database]:
    async with database("postgres", tmp_path) as db:
        yield db


async def test_an_idle_autocommit_async_connection_is_refused_before_any_write(
    pg_db: Database,
) -> None:
    """It was accepted: the job committed on its own, whatever became of the caller's
    business work after it."""
    import psycopg

    assert pg_db.dsn is not None
    async with await psycopg.AsyncConnection.connect(pg_db.dsn, autocommit=True) as conn:
        with pytest.raises(InvalidArgument, match="inside a transaction, not autocommit") as exc:
            await pg_db.app.enqueue(TARGET, {"user": 1}, tx=conn)
        assert "async with conn.transaction()" in str(exc.value)
        with pytest.raises(InvalidArgument, match="not autocommit"):
            await pg_db.app.next_version("k", tx=conn)
        assert await enqueued_streams(pg_db) == []
        async with conn.transaction():  # the cure the message names
            await conn.execute(f"INSERT INTO {pg_db.table} (name) VALUES ('ada')")
            job = await pg_db.app.enqueue(TARGET, {"user": 1}, tx=conn)
    assert users(pg_db) == ["ada"] and await enqueued_streams(pg_db) == [f"job:{job.job_id}"]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_connection_in_a_failed_transaction_is_refused_with_the_cure(
    pg_db: Database, kind: str
) -> None:
    import psycopg

    assert pg_db.dsn is not None

    async def fail(conn: Any) -> None:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1 / 0") if kind == "async" else conn.execute("SELECT 1 / 0")

    if kind == "async":
        conn: Any = await psycopg.AsyncConnection.connect(pg_db.dsn)
    else:
        conn = psycopg.connect(pg_db.dsn)
    try:
        await fail(conn)
        with pytest.raises(InvalidArgument, match="transaction failed: roll it back"):
            if kind == "async":
                await pg_db.app.enqueue(TARGET, None, tx=conn)
            else:
                pg_db.app.enqueue_sync(TARGET, None, tx=conn)
    finally:
        await conn.close() if kind == "async" else conn.close()


async def test_a_sync_connection_given_to_the_async_api_names_the_sync_entry_point(
    pg_db: Database,
) -> None:
    import psycopg

    assert pg_db.dsn is not None
    with psycopg.connect(pg_db.dsn) as conn:
        with pytest.raises(TypeError, match=r"app\.enqueue_sync\(\.\.\., tx=conn\)"):
            await pg_db.app.enqueue(TARGET, None, tx=conn)
        job = pg_db.app.enqueue_sync(TARGET, None, tx=conn)
    assert await enqueued_streams(pg_db) == [f"job:{job.job_id}"]


async def test_an_sqlalchemy_session_given_to_the_async_api_names_the_helper(
    pg_db: Database,
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(pg_db.url)
    try:
        async with AsyncSession(engine) as session:
            with pytest.raises(TypeError, match=r"integrations\.sqlalchemy"):
                await pg_db.app.enqueue(TARGET, None, tx=session)
    finally:
        await engine.dispose()


async def test_an_own_sqlite_connection_to_another_file_is_refused(tmp_path: Path) -> None:
    """The async path took it: the job committed into a database no worker reads."""
    async with database("sqlite", tmp_path) as db:
        other = sqlite3.connect(tmp_path / "other.db")
        try:
            with pytest.raises(ConfigError, match="a job commits with your rows only in"):
                await db.app.enqueue(TARGET, None, tx=other)
            assert not other.in_transaction
        finally:
            other.close()
