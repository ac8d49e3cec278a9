"""PostgreSQL stores on a fresh schema each, dropped afterwards.

The server is `JOBLEDGER_TEST_PG_DSN` (default postgresql://postgres@127.0.0.1:5432/test);
when it is not reachable the test is skipped, never failed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobledger.storage.port import Store, native_handle
from jobledger.storage.postgres import PostgresStore

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
_BUSINESS = "business_rows"
#: schemas of the stores open in this process, newest last (business_write's target)
_ACTIVE: list[str] = []


def dsn() -> str:
    return os.environ.get("JOBLEDGER_TEST_PG_DSN", DEFAULT_DSN)


async def reachable_dsn() -> str:
    """The test server's DSN, or skip the test when it is not reachable."""
    url = dsn()
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable at {url}: {exc}")
    await conn.close()
    return url


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
async def make_store(
    tmp_path: Path, partitions: int = 64, **options: Any
) -> AsyncIterator[Store]:
    async with fresh_schema() as (url, name):
        store = PostgresStore(url, partitions=partitions, schema=name, **options)
        await store.open()
        async with store.pool.connection() as conn:
            await conn.execute(f'CREATE TABLE "{name}".{_BUSINESS} (value text)')
        _ACTIVE.append(name)
        try:
            yield store
        finally:
            _ACTIVE.remove(name)
            await store.close()


# --- the business row a caller writes in the same transaction as its enqueue ------------



async def business_write(tx: Any, value: Any) -> None:
    """Insert one business row on the caller's connection (the store's own schema)."""
    conn = native_handle(tx)
    schema = _ACTIVE[-1]
    await conn.execute(f'INSERT INTO "{schema}".{_BUSINESS} (value) VALUES (%s)', (str(value),))


async def business_count(store: Store) -> int:
    assert isinstance(store, PostgresStore)
    async with store.pool.connection() as conn:
        cur = await conn.execute(f'SELECT count(*) FROM "{store.schema}".{_BUSINESS}')
        row = await cur.fetchone()
        return int(row[0]) if row else 0
