"""The PostgreSQL store: psycopg 3 async, a connection pool, LISTEN/NOTIFY wake-ups.

The decisions are the domain's; this adapter only stores them. Each write call is one
set-based statement (see `statements.py`), run in autocommit — a single statement is
its own transaction — unless the call needs several statements or savepoints, when it
opens an explicit transaction. A large enqueue batch inside a transaction is COPYed in
a savepoint instead (`_copy`). See docs/postgres.md.
"""

from __future__ import annotations

import select
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, Lane
from jobledger.domain.schedule_row import Schedule
from jobledger.storage import jsontext
from jobledger.storage.feed import LocalFeed
from jobledger.storage.port import (
    JobFilter,
    LeaseGuard,
    PartitionLease,
    Store,
    Transaction,
    Wake,
    native_handle,
    run_after_commit,
)
from jobledger.storage.postgres import encode, schema, statements
from jobledger.storage.postgres.listen import Listener
from jobledger.storage.rows import (
    as_utc,
    event_from_dict,
    job_from_row,
    schedule_from_dict,
    schedule_to_dict,
)

Conn = psycopg.AsyncConnection[Any]

#: events one statement may carry: positions keep 20 bits for the ordinal in a transaction
MAX_EVENTS_PER_STATEMENT = (1 << schema.ORDINAL_BITS) // 2

#: from this many new jobs in one call inside a transaction, they are COPYed: measured
#: faster from ~300 (~15-20% at 1,000), even at 200, slower at 100 (docs/postgres.md)
COPY_FROM = 300


#: seconds a new connection may take unless the DSN says otherwise (libpq's default is
#: to wait for the operating system, ~130 s against a server that never answers: a pod
#: stopping or reconnecting then outlives its stop deadline)
CONNECT_TIMEOUT_S = 5


def _bounded_connect(dsn: str) -> str:
    """`dsn` with `connect_timeout` set to CONNECT_TIMEOUT_S when it sets none."""
    if "connect_timeout" in conninfo_to_dict(dsn):
        return dsn
    return make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)


def _can_copy(conn: Conn) -> bool:
    """COPY needs a savepoint, so a transaction block, a connection not in pipeline mode,
    and UTF-8 as the client encoding (the JSON values go pre-encoded in UTF-8)."""
    return (
        conn.info.transaction_status == pq.TransactionStatus.INTRANS
        and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
        and conn.info.encoding == "utf-8"
    )


async def _check(conn: Conn) -> None:
    """Pool checkout check that costs one `select()` call when the connection is fine.

    An idle pooled connection has nothing to read; if its socket is readable the server
    has sent something (typically FATAL from `pg_terminate_backend` or a restart), so
    only then do we pay the round trip that proves the connection still works — the
    pool discards it if not and hands out another.
    """
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    if readable:
        await AsyncConnectionPool.check_connection(conn)


class PostgresStore(Store):
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
        self._pool: AsyncConnectionPool[Conn] | None = None

    # --- life cycle ----------------------------------------------------------------------
    async def open(self) -> None:
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            min_size=self._pool_min,
            max_size=self._pool_max,
            # UTC sessions: psycopg then hands out times in `datetime.UTC` itself, which
            # the row decoder passes through untouched
            kwargs={"autocommit": True, "options": "-c TimeZone=UTC"},
            check=_check,
            open=False,
            name=f"jobledger-{self.schema}",
        )
        await pool.open(wait=True)
        self._pool = pool
        async with pool.connection() as conn:
            await schema.migrate(conn, self.schema)
        await self._listener.start()

    async def migrate(self) -> int:
        async with self.pool.connection() as conn:
            return await schema.migrate(conn, self.schema)

    async def close(self) -> None:
        await self._listener.stop()
        self._feed.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    @property
    def listener(self) -> Listener:
        return self._listener

    # --- writes --------------------------------------------------------------------------
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        async with self.pool.connection() as conn:
            tx = Transaction(conn)
            async with conn.transaction():
                yield tx
        run_after_commit(tx)

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        conn = native_handle(tx)
        if not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError(
                "the PostgreSQL store takes a psycopg AsyncConnection in a transaction"
                " (or the Transaction of its own transaction())"
            )
        return await self._apply_on(conn, changes, None)

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        if not changes:
            return []
        async with self.pool.connection() as conn:
            plan = encode.rounds(changes)
            if len(plan) == 1 and not any(encode.is_running_code(c) for c in changes):
                # one statement in autocommit: it is its own transaction
                return await self._apply_on(conn, changes, guard)
            async with conn.transaction():
                return await self._apply_on(conn, changes, guard)

    async def _apply_on(
        self, conn: Conn, changes: Sequence[Change], guard: LeaseGuard | None
    ) -> list[bool]:
        flags = [False] * len(changes)
        for items in encode.rounds(changes):
            plain = [(i, c) for i, c in items if not encode.is_running_code(c)]
            if plain:
                for i in await self._statement(conn, plain, guard):
                    flags[i] = True
            for i, change in items:
                if not encode.is_running_code(change):
                    continue
                try:
                    async with conn.transaction():  # a savepoint: a collision drops it alone
                        won = await self._statement(conn, [(i, change)], guard)
                except pg_errors.UniqueViolation:
                    won = []
                flags[i] = bool(won)
        return flags

    async def _statement(
        self, conn: Conn, items: list[tuple[int, Change]], guard: LeaseGuard | None
    ) -> list[int]:
        if sum(len(c.events) for _, c in items) > MAX_EVENTS_PER_STATEMENT:
            raise ValueError(f"more than {MAX_EVENTS_PER_STATEMENT} events in one call")
        if guard is None and all(encode.opens_job(c) for _, c in items):
            return await self._enqueue(conn, items)
        params: dict[str, Any] = encode.encode(items)
        sql = self.sql.apply
        if guard is None and all(c.is_new for _, c in items):
            sql = self.sql.insert_new
        if guard is not None:
            sql = self.sql.apply_guarded
            params["pod"], params["now"] = guard.pod, guard.now
        return await self._winners(conn, sql, params)

    async def _enqueue(self, conn: Conn, items: list[tuple[int, Change]]) -> list[int]:
        """The enqueue path (new job streams of one event each): a large batch inside a
        transaction block is COPYed, anything else goes through the enqueue statement."""
        changes = [c for _, c in items]
        if len(changes) >= COPY_FROM and _can_copy(conn) and await self._copy(conn, changes):
            return [i for i, _ in items]
        opening = encode.opening_params(changes)
        return [items[k][0] for k in await self._winners(conn, self.sql.enqueue, opening)]

    async def _copy(self, conn: Conn, changes: list[Change]) -> bool:
        """COPY new jobs and their events inside a savepoint, then the wake-up.

        False, with nothing written, when a dedupe key (or a stream, an id) is already
        taken: the savepoint is rolled back and the caller writes the batch with the
        statement, which skips those jobs alone. A conflict with a transaction still
        open waits for it, as the statement's insert does. Any other error also rolls
        the savepoint back before it is raised, so the call leaves nothing behind.
        """
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute("SAVEPOINT jobledger_copy")
            try:
                await self._copy_rows(cur, changes)
            except Exception as exc:
                if conn.info.transaction_status != pq.TransactionStatus.INERROR:
                    raise
                await cur.execute("ROLLBACK TO SAVEPOINT jobledger_copy")
                await cur.execute("RELEASE SAVEPOINT jobledger_copy")
                if isinstance(exc, pg_errors.UniqueViolation):
                    return False
                raise
            await cur.execute("RELEASE SAVEPOINT jobledger_copy")
            await cur.execute(self.sql.notify_jobs, encode.wake_params(changes))
        return True

    async def _copy_rows(self, cur: psycopg.AsyncCursor[Any], changes: list[Change]) -> None:
        """The events at the next positions of this transaction, then the job rows."""
        await cur.execute(self.sql.last_position)
        found = await cur.fetchone()
        assert found is not None
        async with cur.copy(self.sql.copy_events) as copy:
            copy.set_types(self.sql.copy_event_types)
            for position, change in enumerate(changes, start=int(found[0]) + 1):
                await copy.write_row(encode.event_copy_row(change, position))
        async with cur.copy(self.sql.copy_jobs) as copy:
            copy.set_types(self.sql.copy_job_types)
            for change in changes:
                await copy.write_row(encode.job_copy_row(change))

    @staticmethod
    async def _winners(conn: Conn, sql: str, params: Any) -> list[int]:
        """Run one write statement; the indexes of the changes it applied."""
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
        return list(row[0]) if row else []

    # --- reads ---------------------------------------------------------------------------
    async def _rows(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def _value(self, sql: str, params: Any = None) -> Any:
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
        return row[0] if row else None

    async def _jobs(self, sql: str, params: Any = None) -> list[Job]:
        """Rows selected as `JOB_COLUMNS`, decoded straight from tuples (the lanes'
        reads go through here: no dict per row)."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql, params)
            return [job_from_row(r) for r in await cur.fetchall()]

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

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        if lane == Lane.LONG:
            return as_utc(await self._value(self.sql.next_due_long))
        return as_utc(await self._value(self.sql.next_due_fast, {"parts": list(partitions)}))

    # --- coordination --------------------------------------------------------------------
    async def seed_partitions(self, count: int) -> None:
        # the primary key makes duplicates impossible; racing seeders insert each row once
        await self._exec(
            f"INSERT INTO {self.s}.partitions (partition) SELECT generate_series(0, %s - 1)"
            " ON CONFLICT DO NOTHING",
            (count,),
        )

    async def _exec(self, sql: str, params: Any = None) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return cur.rowcount

    async def heartbeat(self, pod: str, now: datetime) -> None:
        await self._exec(
            f"INSERT INTO {self.s}.workers (pod, heartbeat_at) VALUES (%s, %s)"
            " ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            (pod, now),
        )

    async def remove_worker(self, pod: str) -> None:
        await self._exec(f"DELETE FROM {self.s}.workers WHERE pod = %s", (pod,))

    async def live_workers(self, since: datetime) -> list[str]:
        rows = await self._rows(
            f"SELECT pod FROM {self.s}.workers WHERE heartbeat_at > %s ORDER BY pod", (since,)
        )
        return [r["pod"] for r in rows]

    async def leases(self) -> list[PartitionLease]:
        rows = await self._rows(
            f"SELECT partition, owner, lease_until FROM {self.s}.partitions ORDER BY partition"
        )
        return [PartitionLease(r["partition"], r["owner"], as_utc(r["lease_until"])) for r in rows]

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        taken = await self._exec(
            f"UPDATE {self.s}.partitions SET owner = %(pod)s, lease_until = %(until)s"
            " WHERE partition = %(p)s"
            " AND (owner IS NULL OR owner = %(pod)s OR lease_until <= %(now)s)",
            {"pod": pod, "until": until, "p": partition, "now": now},
        )
        return taken == 1

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        rows = await self._rows(
            f"UPDATE {self.s}.partitions SET lease_until = %(until)s"
            " WHERE owner = %(pod)s AND partition = ANY(%(parts)s) AND lease_until > %(now)s"
            " RETURNING partition",
            {"pod": pod, "until": until, "parts": list(partitions), "now": now},
        )
        held = {r["partition"] for r in rows}
        return [p for p in partitions if p in held]

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        await self._exec(
            f"UPDATE {self.s}.partitions SET owner = NULL, lease_until = NULL"
            " WHERE owner = %s AND partition = ANY(%s)",
            (pod, list(partitions)),
        )

    # --- read models ---------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        found = await self._jobs(
            f"SELECT {statements.JOB_COLUMNS} FROM {self.s}.jobs WHERE id = %s", (job_id,)
        )
        return found[0] if found else None

    async def list_jobs(self, flt: JobFilter, *, offset: int, limit: int) -> tuple[list[Job], int]:
        page_sql, count_sql, params = self.list_sql(flt)
        page = await self._jobs(page_sql, {**params, "offset": offset, "limit": limit})
        total = await self._value(count_sql, params)
        return page, int(total)

    def list_sql(self, flt: JobFilter) -> tuple[str, str, dict[str, Any]]:
        """(page query, count query, parameters) of the admin listing, newest first.

        Only the filters given appear in the SQL, so each one can use its index.
        """
        where: list[str] = ["TRUE"]
        params: dict[str, Any] = {}
        for name in ("status", "target", "code", "key"):
            value = getattr(flt, name)
            if value is not None:
                where.append(f"{name} = %({name})s")
                params[name] = str(value)
        cond = " AND ".join(where)
        page = (
            f"SELECT {statements.JOB_COLUMNS} FROM {self.s}.jobs WHERE {cond}"
            " ORDER BY id DESC OFFSET %(offset)s LIMIT %(limit)s"
        )
        return page, f"SELECT count(*) FROM {self.s}.jobs WHERE {cond}", params

    async def all_jobs(self) -> list[Job]:
        return await self._jobs(f"SELECT {statements.JOB_COLUMNS} FROM {self.s}.jobs ORDER BY id")

    async def get_schedule(self, code: str) -> Schedule | None:
        rows = await self._rows(
            f"SELECT {statements.SCHEDULE_COLUMNS} FROM {self.s}.schedules WHERE code = %s",
            (code,),
        )
        return schedule_from_dict(rows[0]) if rows else None

    async def list_schedules(self) -> list[Schedule]:
        rows = await self._rows(
            f"SELECT {statements.SCHEDULE_COLUMNS} FROM {self.s}.schedules ORDER BY code"
        )
        return [schedule_from_dict(r) for r in rows]

    # --- the log -------------------------------------------------------------------------
    async def read_stream(self, stream: str) -> list[Event]:
        rows = await self._rows(
            f"SELECT {statements.EVENT_COLUMNS} FROM {self.s}.events WHERE stream = %s"
            " ORDER BY version",
            (stream,),
        )
        return [event_from_dict(r) for r in rows]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        # Two statements on purpose: the running transactions are listed before the
        # snapshot that reads the events is taken (see statements.horizon).
        async with self.pool.connection() as conn:
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(self.sql.running)
                found = await cur.fetchone()
            assert found is not None
            below = statements.horizon(int(found[0]), [int(x) for x in found[1]])
            async with conn.cursor(row_factory=dict_row) as cur:
                params = {"after": after, "below": below, "limit": limit}
                await cur.execute(self.sql.read_log, params)
                rows = await cur.fetchall()
        return [event_from_dict(r) for r in rows]

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        rows = await self._rows(
            f"SELECT e.stream FROM {self.s}.events e WHERE e.stream LIKE 'job:%%'"
            " GROUP BY e.stream HAVING max(e.at) < %s AND NOT EXISTS"
            f" (SELECT 1 FROM {self.s}.jobs j WHERE j.id = substr(e.stream, 5)) LIMIT %s",
            (before, limit),
        )
        return [r["stream"] for r in rows]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        if not streams:
            return 0
        return await self._exec(
            f"DELETE FROM {self.s}.events WHERE stream = ANY(%s)", (list(streams),)
        )

    # --- checkpoints -----------------------------------------------------------------------
    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        rows = await self._rows(
            f"SELECT position, state FROM {self.s}.checkpoints WHERE name = %s", (name,)
        )
        return (int(rows[0]["position"]), rows[0]["state"]) if rows else (0, None)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        await self._exec(
            f"INSERT INTO {self.s}.checkpoints (name, position, state) VALUES (%s, %s, %s)"
            " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
            " state = excluded.state",
            (name, position, Jsonb(state)),
        )

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        job_rows = jsontext.dumps([encode.job_record(j) for j in jobs])
        schedule_rows = jsontext.dumps([schedule_to_dict(s) for s in schedules])
        job_cols = f"{statements.JOB_COLUMNS}, order_key"
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(f"DELETE FROM {self.s}.jobs")
            await conn.execute(f"DELETE FROM {self.s}.schedules")
            await conn.execute(
                f"INSERT INTO {self.s}.jobs ({job_cols}) SELECT {job_cols}"
                f" FROM json_populate_recordset(NULL::{self.s}.jobs, %s::json)",
                (job_rows,),
            )
            await conn.execute(
                f"INSERT INTO {self.s}.schedules ({statements.SCHEDULE_COLUMNS})"
                f" SELECT {statements.SCHEDULE_COLUMNS}"
                f" FROM json_populate_recordset(NULL::{self.s}.schedules, %s::json)",
                (schedule_rows,),
            )
            await conn.execute("SELECT pg_notify(%s, '*')", (self.sql.channel,))

    # --- the change feed -----------------------------------------------------------------
    def feed(self) -> AsyncIterator[Wake]:
        return self._feed.subscribe()


__all__ = ["PostgresStore"]
