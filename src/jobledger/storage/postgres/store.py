"""The PostgreSQL store: psycopg 3 async, a connection pool, LISTEN/NOTIFY wake-ups.

The decisions are the domain's; this adapter only stores them. The store is put together
from its parts: the write path (`writes.py`: one set-based statement per call, COPY for
large enqueue batches), the coordination rows (`coordination.py`), the read models and
the log (`read_models.py`); this module keeps its life cycle, the lanes' queue reads and
the change feed. See docs/postgres.md.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from datetime import datetime

from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from jobledger.domain.jobs import Job, Lane
from jobledger.storage import jsontext
from jobledger.storage.feed import LocalFeed, Subscription
from jobledger.storage.port import Store
from jobledger.storage.postgres import schema, statements
from jobledger.storage.postgres.base import Conn
from jobledger.storage.postgres.coordination import Coordination
from jobledger.storage.postgres.cursors import CursorCache
from jobledger.storage.postgres.listen import Listener
from jobledger.storage.postgres.read_models import ReadModels
from jobledger.storage.postgres.wake_conn import WakeConnection
from jobledger.storage.postgres.writes import COPY_FROM, MAX_EVENTS_PER_STATEMENT, WritePath
from jobledger.storage.rows import as_utc

#: seconds a new connection may take unless the DSN says otherwise (libpq's default is
#: to wait for the operating system, ~130 s against a server that never answers: a pod
#: stopping or reconnecting then outlives its stop deadline)
CONNECT_TIMEOUT_S = 5


def _bounded_connect(dsn: str) -> str:
    """`dsn` with `connect_timeout` set to CONNECT_TIMEOUT_S when it sets none."""
    if "connect_timeout" in conninfo_to_dict(dsn):
        return dsn
    return make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)


async def _configure(conn: Conn) -> None:
    """jsonb columns (the lanes' job rows: payload, headers) parsed by orjson, with the
    standard library for what orjson refuses (`jsontext.loads`: the same values as
    psycopg's default `json.loads`, a third of its time per row)."""
    set_json_loads(jsontext.loads, conn)


def _utc_options(dsn: str) -> str:
    """The sessions' `options`: the DSN's own (e.g. `-csearch_path=billing`, which
    business SQL on `tx.native` relies on) followed by UTC."""
    own = conninfo_to_dict(dsn).get("options")
    return f"{own} -c TimeZone=UTC" if own else "-c TimeZone=UTC"


class PostgresStore(WritePath, Coordination, ReadModels, Store):
    name = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        partitions: int = 64,
        schema: str = "jobledger",
        pool_min: int = 1,
        pool_max: int = 10,
        listen_retry_s: float = 1.0,
    ) -> None:
        self.dsn = dsn
        self.partitions = partitions
        self.schema = schema
        self.sql = statements.build(schema)
        self.s = self.sql.schema
        self._pool_min = pool_min
        self._pool_max = pool_max
        self._feed = LocalFeed()
        self._conninfo = _bounded_connect(dsn)
        self._listener = Listener(
            self._conninfo, self.sql.channel, self._feed, retry_s=listen_retry_s
        )
        self._feed.source = self._listener  # LISTEN only while the feed has a subscriber
        self._wake = WakeConnection(self._conninfo, _utc_options(self._conninfo))
        self._cursors = CursorCache()
        self._pool: AsyncConnectionPool[Conn] | None = None

    # --- life cycle ----------------------------------------------------------------------
    async def open(self) -> None:
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            min_size=self._pool_min,
            max_size=self._pool_max,
            # UTC sessions: psycopg then hands out times in `datetime.UTC` itself, which
            # the row decoder passes through untouched
            kwargs={"autocommit": True, "options": _utc_options(self._conninfo)},
            check=self._check,
            configure=_configure,
            open=False,
            name=f"jobledger-{self.schema}",
        )
        await pool.open(wait=True)
        self._pool = pool
        async with pool.connection() as conn:
            await schema.migrate(conn, self.schema)

    async def _check(self, conn: Conn) -> None:
        """Pool checkout check that costs one `select()` call when the connection is fine.

        An idle pooled connection has nothing to read; if its socket is readable the server
        has sent something (typically FATAL from `pg_terminate_backend` or a restart), so
        only then do we pay the round trip that proves the connection still works.

        A dead one is rarely alone: a restart or a mass `pg_terminate_backend` ends every
        idle connection at once, and psycopg_pool's checkout loop backs off 1, 2, 4, 8,
        16 s per failed check, giving up with PoolTimeout at 30 s after five dead
        connections (the 80 s stall of issue 18). So a failed check first sweeps the
        idle connections (`pool.check()`: the dead ones are replaced), then fails: the
        loop's single 1 s back-off later finds a live connection.
        """
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        if not readable:
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if self._pool is not None:
                await self._pool.check()
            raise

    async def migrate(self) -> int:
        async with self.pool.connection() as conn:
            return await schema.migrate(conn, self.schema)

    async def close(self) -> None:
        await self._listener.stop()
        await self._wake.close()
        self._cursors.clear()
        self._feed.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def listener(self) -> Listener:
        return self._listener

    # --- the queue -----------------------------------------------------------------------
    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        if after_key is None:
            return await self._jobs(self.sql.fast_pending_first, {"p": partition, "limit": limit})
        params = {"p": partition, "limit": limit, "after": after_key.encode()}
        return await self._jobs(self.sql.fast_pending_after, params)

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        return await self._jobs(self.sql.long_candidates, {"now": now, "limit": limit})

    async def running_codes(self, now: datetime) -> set[str]:
        return {r["running_code"] for r in await self._rows(self.sql.running_codes, {"now": now})}

    async def inflight(self, partition: int) -> list[Job]:
        return await self._jobs(self.sql.inflight, {"p": partition})

    async def inflight_in(self, partitions: Sequence[int]) -> list[Job]:
        return await self._jobs(self.sql.inflight_in, {"parts": list(partitions)})

    async def pending_partitions(
        self, partitions: Sequence[int], *, due_by: datetime | None
    ) -> list[int]:
        """One statement: a probe of `jobs_fast_due` per partition (the safety poll)."""
        sql = self.sql.pending_partitions if due_by is None else self.sql.due_partitions
        rows = await self._tuples(sql, {"parts": list(partitions), "due_by": due_by})
        return [r[0] for r in rows]

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        if lane == Lane.LONG:
            return as_utc(await self._value(self.sql.next_due_long))
        return as_utc(await self._value(self.sql.next_due_fast, {"parts": list(partitions)}))

    # --- the change feed -----------------------------------------------------------------
    def feed(self) -> Subscription:
        return self._feed.subscribe()


__all__ = ["COPY_FROM", "MAX_EVENTS_PER_STATEMENT", "PostgresStore"]
