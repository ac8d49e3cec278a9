"""PostgreSQL stores on a fresh schema each, dropped afterwards (see __init__.py).

The server is `JOBLEDGER_TEST_PG_DSN` (default postgresql://postgres@127.0.0.1:5432/test);
when it is not reachable the test is skipped, never failed. `fresh_schema()` gives a DSN
and an unused schema name to tests that open stores (or worker processes) themselves.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from jobledger.domain.jobs import Job
from jobledger.storage.port import Store, native_handle
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.sql import JOB_SELECT

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
#: each test process gets its own database: a log read waits for the open transactions
#: of its database, so other processes' tests (on the shared server) never slow it down
TEST_DATABASE = f"jl_pg_tests_{os.getpid()}"
_OPEN: list[str] = []  # schemas of the stores make_store has open, newest last


def dsn() -> str:
    """The server to test against (its database is only used to create ours)."""
    return os.environ.get("JOBLEDGER_TEST_PG_DSN", DEFAULT_DSN)


async def reachable_dsn() -> str:
    """The DSN of the tests' database (created once), or skip when there is no server."""
    url = dsn()
    try:
        admin = await psycopg.AsyncConnection.connect(url, connect_timeout=3, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable at {url}: {exc}")
    async with admin:
        cur = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (TEST_DATABASE,))
        if not await cur.fetchone():
            await _drop_stale(admin)
            await admin.execute(f'CREATE DATABASE "{TEST_DATABASE}"')
            atexit.register(_drop_database, url, TEST_DATABASE)
    return make_conninfo(url, dbname=TEST_DATABASE)


async def _drop_stale(admin: psycopg.AsyncConnection[Any]) -> None:
    """Drop the databases of test processes of this machine that are gone."""
    cur = await admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'jl_pg_tests_%%'")
    for (name,) in await cur.fetchall():
        pid = int(name.rsplit("_", 1)[1])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            with contextlib.suppress(psycopg.Error):
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except PermissionError:
            pass


def _drop_database(url: str, name: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def fresh_schema() -> AsyncIterator[tuple[str, str]]:
    """(dsn, schema name) of a schema no other test uses; dropped on exit."""
    url = await reachable_dsn()
    name = f"jl_test_{uuid.uuid4().hex[:12]}"
    try:
        yield url, name
    finally:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@asynccontextmanager
async def make_store(tmp_path: Path, partitions: int = 64, **options: Any) -> AsyncIterator[Store]:
    async with fresh_schema() as (url, name):
        store = PostgresStore(url, partitions=partitions, schema=name, **options)
        await store.open()
        _OPEN.append(name)
        try:
            yield store
        finally:
            _OPEN.remove(name)
            await store.close()


@asynccontextmanager
async def open_peer(store: Store) -> AsyncIterator[Store]:
    """A second store on the same schema, with its own pool and LISTEN connection."""
    assert isinstance(store, PostgresStore)
    peer = PostgresStore(store.dsn, partitions=store.partitions, schema=store.schema)
    await peer.open()
    try:
        yield peer
    finally:
        await peer.close()


async def business_write(tx: Any, value: str) -> None:
    """The caller's own business row, written on the transaction's native connection.

    The table lives in the schema of the store `make_store` opened last.
    """
    conn: psycopg.AsyncConnection[Any] = native_handle(tx)
    table = f'"{_schema_for(conn)}".business'
    await conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (value text NOT NULL)")
    await conn.execute(f"INSERT INTO {table} (value) VALUES (%s)", (value,))


async def business_count(store: Store) -> int:
    """Committed business rows, read through a connection of its own."""
    assert isinstance(store, PostgresStore)
    async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT to_regclass(%s)", (f'"{store.schema}".business',))
        found = await cur.fetchone()
        if found is None or found[0] is None:
            return 0
        cur = await conn.execute(f'SELECT count(*) FROM "{store.schema}".business')
        row = await cur.fetchone()
        return int(row[0]) if row else 0


def _schema_for(conn: psycopg.AsyncConnection[Any]) -> str:
    """The schema of the newest store opened by this module (tests use one at a time)."""
    if not _OPEN:
        raise RuntimeError("business_write: no PostgreSQL test store is open")
    return _OPEN[-1]


async def all_jobs(store: Store) -> list[Job]:
    """Every job row, by id, read on a pooled connection of the store."""
    assert isinstance(store, PostgresStore)
    return await store.connections.jobs(f"SELECT {JOB_SELECT} FROM {store.s}.jobs ORDER BY id")
