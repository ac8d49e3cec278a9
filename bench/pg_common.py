"""Shared set-up of the PostgreSQL benches: a bench database, a fresh schema, timing.

Plain scripts, not tests. Every bench prints its raw-psycopg baseline from the same
run next to the store's figure, and the ratio; docs/performance.md records them.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import psycopg
from psycopg.conninfo import make_conninfo

from jobledger.core.clock import FakeClock
from jobledger.engine import Engine
from jobledger.storage.postgres import PostgresStore

SERVER = os.environ.get("JOBLEDGER_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DATABASE = "jobledger_pg_bench"


async def bench_dsn() -> str:
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        cur = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
        if not await cur.fetchone():
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    return make_conninfo(SERVER, dbname=DATABASE)


@asynccontextmanager
async def fresh_store(
    app: str | None = None, *, database: str | None = None, **options: object
) -> AsyncIterator[PostgresStore]:
    """A store on a new schema of the bench database (or of `database`, a conninfo),
    dropped afterwards; `app` names its connections (`application_name`, so a bench can
    find its own server processes)."""
    dsn = database or await bench_dsn()
    if app is not None:
        dsn = make_conninfo(dsn, application_name=app)
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(dsn, schema=schema, **options)  # type: ignore[arg-type]
    await store.open()
    try:
        yield store
    finally:
        await store.close()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def engine(store: PostgresStore) -> Engine:
    async def nothing(job: object) -> None:
        return None

    eng = Engine(store, clock=FakeClock())
    eng.targets.register("kafka:bench", "fast", nothing)
    return eng


async def timed(n: int, step: Callable[[int], Awaitable[object]]) -> list[float]:
    """Seconds per call of `step(i)` for i in range(n)."""
    out = []
    for i in range(n):
        started = time.perf_counter()
        await step(i)
        out.append(time.perf_counter() - started)
    return out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def line(label: str, value: float, unit: str) -> str:
    return f"{label:<58} {value:>12.3f} {unit}"
