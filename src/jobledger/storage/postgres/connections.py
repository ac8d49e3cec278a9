"""The PostgreSQL store's connections, which every role of the store shares: the pool
(UTC sessions, checked cheaply at checkout), the helpers that run one statement on a
pooled connection, and the wake path's own connection."""

from __future__ import annotations

import contextlib
import select
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from jobledger.domain.jobs import Job
from jobledger.storage import jsontext
from jobledger.storage.rows import job_from_text_row

Conn = psycopg.AsyncConnection[Any]

#: seconds a new connection may take unless the DSN says otherwise (libpq's default is
#: to wait for the operating system, ~130 s against a server that never answers: a pod
#: stopping or reconnecting then outlives its stop deadline)
CONNECT_TIMEOUT_S = 5


def bounded_connect(dsn: str) -> str:
    """`dsn` with `connect_timeout` set to CONNECT_TIMEOUT_S when it sets none."""
    if "connect_timeout" in conninfo_to_dict(dsn):
        return dsn
    return make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)


def utc_options(dsn: str) -> str:
    """The sessions' `options`: the DSN's own (e.g. `-csearch_path=billing`, which
    business SQL on `tx.native` relies on) followed by UTC."""
    own = conninfo_to_dict(dsn).get("options")
    return f"{own} -c TimeZone=UTC" if own else "-c TimeZone=UTC"


async def _configure(conn: Conn) -> None:
    """jsonb columns (the lanes' job rows: payload, headers) parsed by orjson, with the
    standard library for what orjson refuses (`jsontext.loads`: the same values as
    psycopg's default `json.loads`, a third of its time per row)."""
    set_json_loads(jsontext.loads, conn)


class PgConnections:
    """The pool and the wake connection of one store, and one-statement helpers."""

    def __init__(self, dsn: str, *, name: str, pool_min: int, pool_max: int) -> None:
        self.conninfo = bounded_connect(dsn)
        self.options = utc_options(self.conninfo)
        self._name = name
        self._pool_min = pool_min
        self._pool_max = pool_max
        self._pool: AsyncConnectionPool[Conn] | None = None
        self.wake = WakeConnection(self.conninfo, self.options)

    @property
    def pool(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def open(self) -> None:
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.conninfo,
            min_size=self._pool_min,
            max_size=self._pool_max,
            # UTC sessions: psycopg then hands out times in `datetime.UTC` itself, which
            # the row decoder passes through untouched
            kwargs={"autocommit": True, "options": self.options},
            check=self._check,
            configure=_configure,
            open=False,
            name=self._name,
        )
        await pool.open(wait=True)
        self._pool = pool

    async def _check(self, conn: Conn) -> None:
        """Pool checkout check that costs one `select()` call when the connection is fine.

        An idle pooled connection has nothing to read; if its socket is readable the server
        has sent something (typically FATAL from `pg_terminate_backend` or a restart), so
        only then do we pay the round trip that proves the connection still works.

        A dead one is rarely alone: a restart or a mass `pg_terminate_backend` ends every
        idle connection at once, and psycopg_pool's checkout loop backs off 1, 2, 4, 8,
        16 s per failed check, giving up with PoolTimeout at 30 s after five dead
        connections. So a failed check first sweeps the idle connections (`pool.check()`:
        the dead ones are replaced), then fails: the loop's single 1 s back-off later
        finds a live connection.
        """
        if not _readable(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if self._pool is not None:
                await self._pool.check()
            raise

    async def close(self) -> None:
        await self.wake.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # --- one statement on a pooled connection --------------------------------------------
    async def rows(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def value(self, sql: str, params: Any = None) -> Any:
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
        return row[0] if row else None

    async def tuples(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def jobs(self, sql: str, params: Any = None) -> list[Job]:
        """Rows selected as `sql.JOB_SELECT`, decoded straight from tuples (the lanes'
        reads go through here: no dict per row, the JSON columns parsed once by orjson
        from their text, see `rows.job_from_text_row`)."""
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=tuple_row, binary=True) as cur,
        ):
            await cur.execute(sql, params)
            return [job_from_text_row(r) for r in await cur.fetchall()]

    async def execute(self, sql: str, params: Any = None) -> int:
        """Run one statement; its row count."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return cur.rowcount


class WakeConnection:
    """The wake path's own connection: the at-most-once mark of a row a wake-up handed
    over (`Writes.mark_first`) runs on it instead of a pooled one.

    A pool checkout and return cost a lock, the checkout check and their loop steps on
    the path from the enqueue's commit to the handler; and on a connection of its own the
    statement is prepared once and stays so. One statement at a time uses it: while it is
    busy (another partition's mark) a call takes a pooled connection as before.

    It connects on first use. Before each use it costs one `select()`: a socket that is
    readable while idle means the server sent something (FATAL after a restart or
    `pg_terminate_backend`), so the connection is replaced first. A call that fails on it
    drops it (the next call connects again) and raises, as a pooled call would.
    """

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
    """Whether the socket of an idle connection has something to read."""
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    return bool(readable)


def _idle(conn: Conn) -> bool:
    return conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
