"""The wake path's own connection: the at-most-once mark of a row a wake-up handed over
(`Store.mark_first`) runs on it instead of a pooled one.

A pool checkout and return cost a lock, the checkout check and their loop steps on the
path from the enqueue's commit to the handler; and on a connection of its own the
statement is prepared once and stays so. One statement at a time uses it: while it is
busy (another partition's mark) a call takes a pooled connection as before.

It connects on first use. Before each use it costs one `select()`: a socket that is
readable while idle means the server sent something (FATAL after a restart or
`pg_terminate_backend`), so the connection is replaced first. A call that fails on it
drops it (the next call connects again) and raises, as a pooled call would.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

Conn = psycopg.AsyncConnection[Any]


class WakeConnection:
    def __init__(self, conninfo: str, options: str) -> None:
        self._conninfo = conninfo
        self._options = options
        self._conn: Conn | None = None
        self._busy = False
        self.connects = 0  # connections opened (tests)

    @property
    def backend_pid(self) -> int | None:
        return self._conn.info.backend_pid if self._conn is not None else None

    @contextlib.asynccontextmanager
    async def connection(self, pool: AsyncConnectionPool[Conn]) -> AsyncIterator[Conn]:
        """The wake connection, or a pooled one while it is busy."""
        if self._busy:
            async with pool.connection() as pooled:
                yield pooled
            return
        self._busy = True
        try:
            conn = await self._ready()
            try:
                yield conn
            except BaseException:
                if conn.closed or conn.broken or not _idle(conn):
                    await self._drop()
                raise
            if not _idle(conn):  # left inside a transaction: do not keep it
                await self._drop()
        finally:
            self._busy = False

    async def _ready(self) -> Conn:
        conn = self._conn
        if conn is not None and (conn.closed or conn.broken or _readable(conn)):
            await self._drop()
            conn = None
        if conn is None:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, options=self._options
            )
            self.connects += 1
            self._conn = conn
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop()


def _readable(conn: Conn) -> bool:
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    return bool(readable)


def _idle(conn: Conn) -> bool:
    return conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
