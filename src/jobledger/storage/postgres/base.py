"""What the parts of the PostgreSQL store share: the pool, the SQL texts, and the
helpers that run one statement on a pooled connection (see `store.PostgresStore`)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from jobledger.domain.jobs import Job
from jobledger.storage.postgres.statements import Statements
from jobledger.storage.rows import job_from_text_row

Conn = psycopg.AsyncConnection[Any]


class PgBase:
    """The state every part of the store reads; `PostgresStore` sets it up."""

    sql: Statements
    s: str  # the quoted schema
    _pool: AsyncConnectionPool[Conn] | None

    @property
    def pool(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    async def _rows(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def _value(self, sql: str, params: Any = None) -> Any:
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
        return row[0] if row else None

    async def _tuples(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def _jobs(self, sql: str, params: Any = None) -> list[Job]:
        """Rows selected as `JOB_SELECT`, decoded straight from tuples (the lanes'
        reads go through here: no dict per row, the JSON columns parsed once by orjson
        from their text, see `rows.job_from_text_row`)."""
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=tuple_row, binary=True) as cur,
        ):
            await cur.execute(sql, params)
            return [job_from_text_row(r) for r in await cur.fetchall()]

    async def _exec(self, sql: str, params: Any = None) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return cur.rowcount
