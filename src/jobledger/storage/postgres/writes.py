"""The write path of the PostgreSQL store: `apply`, `append_in`, the enqueue path and
the first mark — and the same enqueue on a caller's **sync** psycopg `Connection`
(Django, Flask, SQLAlchemy: `jobledger.integrations`).

Each write call is one set-based statement (see `sql.py`), run in autocommit — a single
statement is its own transaction — unless the call needs several statements or
savepoints, when it opens an explicit transaction. A large enqueue batch inside a
transaction is COPYed in a savepoint instead (`_copy`). See docs/postgres.md.

The sync path runs the same statement and parameters as the async enqueue path
(`Statements.enqueue` over `encode.opening_params`): the events with `ON CONFLICT DO
NOTHING` on the dedupe index, the job rows and `pg_notify`, all on the caller's
connection inside the caller's transaction. NOTIFY is transactional, so the workers are
woken when — and only if — the caller commits. Nothing here commits a caller's
transaction.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.jobs import TRANSITION_FIELDS, Change
from jobledger.storage.port import LeaseGuard, Transaction, Writes, native_handle, run_after_commit
from jobledger.storage.postgres import encode, schema
from jobledger.storage.postgres.connections import Conn, PgConnections
from jobledger.storage.postgres.sql import Statements
from jobledger.storage.transaction import caller_hint

#: events one statement may carry: positions keep 20 bits for the ordinal in a transaction
MAX_EVENTS_PER_STATEMENT = (1 << schema.ORDINAL_BITS) // 2

#: from this many new jobs in one call inside a transaction, they are COPYed: measured
#: faster from ~300 (~15-20% at 1,000), even at 200, slower at 100 (docs/postgres.md)
COPY_FROM = 300


SyncConn = psycopg.Connection[Any]


def holders_of(rows: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The job id by dedupe key, from `Statements.dedupe_holders`' rows."""
    return {key: stream.removeprefix("job:") for key, stream in rows}


def _can_copy(conn: Conn) -> bool:
    """COPY needs a savepoint, so a transaction block, a connection not in pipeline mode,
    and UTF-8 as the client encoding (the JSON values go pre-encoded in UTF-8)."""
    return (
        conn.info.transaction_status == pq.TransactionStatus.INTRANS
        and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
        and conn.info.encoding == "utf-8"
    )


def check_in_transaction(conn: Conn | SyncConn) -> None:
    """Refuse (InvalidArgument), before any statement runs, a caller's connection on
    which the job would not commit with the caller's rows: in autocommit mode outside a
    transaction block (each statement commits by itself), or inside a failed transaction
    (every statement is refused until the caller rolls back). The one rule of the sync and
    the async path; a closed connection goes on to the driver's own error."""
    status = conn.pgconn.transaction_status
    if status == _IDLE and conn.autocommit:
        block = "with conn.transaction():"
        if isinstance(conn, psycopg.AsyncConnection):
            block = f"async {block}"
        raise InvalidArgument(
            "enqueue needs a connection inside a transaction, not autocommit: open one first"
            f" (`{block}`, or a connection with autocommit off)"
        )
    if status == _INERROR:
        raise InvalidArgument(
            "enqueue on a connection whose transaction failed: roll it back (or back to a"
            " savepoint) first; nothing was written"
        )


_IDLE = pq.TransactionStatus.IDLE
_INERROR = pq.TransactionStatus.INERROR

#: the caller connections seen to reach a store's tables, and which schema's (weak: the
#: store keeps no caller's connection alive)
_REACHED: weakref.WeakKeyDictionary[Conn | SyncConn, str] = weakref.WeakKeyDictionary()
#: the probe: a lookup by name, which returns NULL (never an error) for a missing table,
#: so it cannot leave the caller's transaction failed
_HAS_TABLES = "SELECT to_regclass(%s) IS NOT NULL"


def _check_database(conn: Conn | SyncConn, store_dsn: str) -> None:
    """Refuse (ConfigError) a connection to another database than the store's DSN names."""
    wanted = _dbname(store_dsn)
    if wanted is not None and conn.info.dbname != wanted:
        raise ConfigError(
            f"this connection is to database {conn.info.dbname!r}, the store's is"
            f" {wanted!r}: a job commits with your rows only in the same database"
        )


def _reached(conn: Conn | SyncConn, sql: Statements, probe: tuple[Any, ...] | None) -> None:
    """Remember that `conn` reaches the store's tables, or refuse it (ConfigError) when the
    probe found none."""
    if not (probe and probe[0]):
        raise _no_tables(sql, conn.info.dbname)
    _REACHED[conn] = sql.schema


def _cursor(conn: Conn) -> psycopg.AsyncCursor[Any]:
    """A plain cursor on a caller's connection, whatever its `cursor_factory` and
    `row_factory` (the statements take `%s` placeholders and read tuples)."""
    return psycopg.AsyncCursor(conn, row_factory=tuple_row)


class PgWrites(Writes):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        async with self.connections.pool.connection() as conn:
            tx = Transaction(conn)
            async with conn.transaction():
                yield tx
        run_after_commit(tx)

    async def _callers(self, tx: Any) -> Conn:
        """The caller's connection (`tx` itself or the native handle of a `Transaction`),
        refused before any write unless the job would commit with the caller's rows:
        `check_in_transaction`, the store's database, the store's tables (probed once per
        connection, by a lookup that cannot fail the caller's transaction)."""
        conn = native_handle(tx)
        if not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError(
                "the PostgreSQL store takes a psycopg AsyncConnection in a transaction"
                f" (or the Transaction of its own transaction()){caller_hint(conn)}"
            )
        check_in_transaction(conn)
        if _REACHED.get(conn) != self.sql.schema:
            _check_database(conn, self.connections.conninfo)
            async with _cursor(conn) as cur:
                await cur.execute(_HAS_TABLES, (f"{self.sql.schema}.events",))
                _reached(conn, self.sql, await cur.fetchone())
        return conn

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        conn = await self._callers(tx)
        if len(changes) == 1 and encode.opens_one(changes[0]):
            return [await self._enqueue_one(conn, changes[0])]  # `engine.enqueue`'s path
        return await self._apply_on(conn, changes, None)

    async def next_version(self, tx: Any, key: str) -> int:
        async with _cursor(await self._callers(tx)) as cur:
            await cur.execute(self.sql.next_version, (key,))
            row = await cur.fetchone()
        assert row is not None  # an upsert's RETURNING gives its one row
        return int(row[0])

    async def dedupe_holders(self, tx: Any, keys: Sequence[str]) -> dict[str, str]:
        conn: Conn = native_handle(tx)
        async with _cursor(conn) as cur:
            await cur.execute(self.sql.dedupe_holders, {"keys": list(keys)})
            return holders_of(await cur.fetchall())

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        if not changes:
            return []
        async with self.connections.pool.connection() as conn:
            if guard is not None and len(changes) == 1 and encode.is_guarded_update(changes[0]):
                # an at-most-once mark alone: one lean statement, its own transaction
                params = encode.guarded_update_params(changes[0], guard.pod, guard.now)
                async with _cursor(conn) as cur:
                    await cur.execute(self.sql.guarded_update, params)
                    return [await cur.fetchone() is not None]
            plan = encode.rounds(changes)
            if len(plan) == 1 and not any(map(encode.is_running_code, changes)):
                # one statement in autocommit: it is its own transaction
                flags = [False] * len(changes)
                for i in await self._statement(conn, plan[0], guard):
                    flags[i] = True
                return flags
            async with conn.transaction():
                return await self._apply_on(conn, changes, guard, plan)

    async def mark_first(self, change: Change, guard: LeaseGuard) -> bool:
        """`Statements.first_mark`, its own transaction, on the wake connection."""
        if not encode.is_guarded_update(change):
            return False
        params = encode.guarded_update_params(change, guard.pod, guard.now)
        at = 5 + len(TRANSITION_FIELDS)  # after the guard, the row, its id and version
        params[at:at] = encode.first_mark_params(change.row)
        connections = self.connections
        wake = connections.wake.connection(connections.pool)
        async with wake as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.sql.first_mark, params, prepare=True)
            return await cur.fetchone() is not None

    async def _apply_on(
        self,
        conn: Conn,
        changes: Sequence[Change],
        guard: LeaseGuard | None,
        plan: list[list[tuple[int, Change]]] | None = None,
    ) -> list[bool]:
        """Apply `changes` on `conn` round by round (`plan`: `encode.rounds(changes)`,
        when the caller has it already)."""
        flags = [False] * len(changes)
        for items in encode.rounds(changes) if plan is None else plan:
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
        """The enqueue path (new job streams of one event each): one job goes through
        its own statement with scalar parameters, a large batch inside a transaction
        block is COPYed, anything else goes through the enqueue statement."""
        changes = [c for _, c in items]
        if len(changes) == 1 and encode.opens_one(changes[0]):
            return [items[0][0]] if await self._enqueue_one(conn, changes[0]) else []
        if len(changes) >= COPY_FROM and _can_copy(conn) and await self._copy(conn, changes):
            return [i for i, _ in items]
        opening = encode.opening_params(changes)
        return [items[k][0] for k in await self._winners(conn, self.sql.enqueue, opening)]

    async def _enqueue_one(self, conn: Conn, change: Change) -> bool:
        """`Statements.enqueue_one` for a change that passes `encode.opens_one`; whether
        the job was written (False: its dedupe key was taken)."""
        sql = (
            self.sql.enqueue_one_dedupe
            if encode.has_own_dedupe_key(change)
            else self.sql.enqueue_one
        )
        async with _cursor(conn) as cur:
            await cur.execute(sql, encode.one_params(change))
            return cur.rowcount == 1  # the wake-up's row: there is one when the job was written

    async def _copy(self, conn: Conn, changes: list[Change]) -> bool:
        """COPY new jobs and their events inside a savepoint, then the wake-up.

        False, with nothing written, when a dedupe key (or a stream, an id) is already
        taken: the savepoint is rolled back and the caller writes the batch with the
        statement, which skips those jobs alone. A conflict with a transaction still
        open waits for it, as the statement's insert does. Any other error also rolls
        the savepoint back before it is raised, so the call leaves nothing behind.
        """
        async with _cursor(conn) as cur:
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
        await cur.execute(self.sql.last_position, (len(changes),))
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
        async with _cursor(conn) as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
        return list(row[0]) if row else []


# --- the enqueue path on a caller's sync connection --------------------------------------


def check_reaches(conn: SyncConn, sql: Statements, store_dsn: str) -> None:
    """`PgWrites._callers`' checks on a sync connection: in a usable transaction, to the
    store's database, which has the store's tables (looked up once per connection)."""
    check_in_transaction(conn)
    if _REACHED.get(conn) == sql.schema:
        return
    _check_database(conn, store_dsn)
    with psycopg.Cursor(conn, row_factory=tuple_row) as cur:
        cur.execute(_HAS_TABLES, (f"{sql.schema}.events",))
        row = cur.fetchone()
    _reached(conn, sql, row)


@functools.cache
def _dbname(dsn: str) -> str | None:
    name = conninfo_to_dict(dsn).get("dbname")
    return str(name) if name else None


def _no_tables(sql: Statements, dbname: str) -> ConfigError:
    return ConfigError(
        f"no jobledger tables in schema {sql.schema} of database {dbname!r}: run"
        " `jobledger migrate` (or `await app.start()`) against it"
    )


def append_sync(conn: SyncConn, sql: Statements, changes: Sequence[Change]) -> list[bool]:
    """Write new-job `changes` (each `encode.opens_job`) inside `conn`'s transaction;
    per change, whether it was written (False: its dedupe key is already taken)."""
    if not all(encode.opens_job(c) for c in changes):
        raise ValueError("the sync path writes new jobs only (one JobEnqueued each)")
    flags = [False] * len(changes)
    for start in range(0, len(changes), MAX_EVENTS_PER_STATEMENT):
        chunk = changes[start : start + MAX_EVENTS_PER_STATEMENT]
        # a plain Cursor: server-side binding whatever the connection's cursor_factory
        # (Django installs a client-side one)
        with psycopg.Cursor(conn, row_factory=tuple_row) as cur:
            _run(cur, sql, sql.enqueue, encode.opening_params(chunk))
            row = cur.fetchone()
        for k in row[0] if row else []:
            flags[start + k] = True
    return flags


def holders_sync(conn: SyncConn, sql: Statements, keys: Sequence[str]) -> dict[str, str]:
    """`PgWrites.dedupe_holders` on a sync connection."""
    with psycopg.Cursor(conn, row_factory=tuple_row) as cur:
        _run(cur, sql, sql.dedupe_holders, {"keys": list(keys)})
        return holders_of(cur.fetchall())


def next_version_sync(conn: SyncConn, sql: Statements, key: str) -> int:
    """`PgWrites.next_version` on a sync connection."""
    with psycopg.Cursor(conn, row_factory=tuple_row) as cur:
        _run(cur, sql, sql.next_version, (key,))
        row = cur.fetchone()
    assert row is not None  # an upsert's RETURNING gives its one row
    return int(row[0])


def _run(cur: psycopg.Cursor[Any], sql: Statements, query: str, params: Any) -> None:
    try:
        cur.execute(query, params)
    except pg_errors.UndefinedTable as exc:
        raise _no_tables(sql, cur.connection.info.dbname) from exc
