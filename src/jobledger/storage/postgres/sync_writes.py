"""The enqueue path on a caller's **sync** psycopg `Connection` (Django, Flask,
SQLAlchemy: `jobledger.integrations`).

The same statement and parameters as the async store's enqueue path
(`Statements.enqueue` over `encode.opening_params`): the events with
`ON CONFLICT DO NOTHING` on the dedupe index, the job rows and `pg_notify`, all on the
caller's connection inside the caller's transaction. NOTIFY is transactional, so the
workers are woken when — and only if — the caller commits. Nothing here commits.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.jobs import Change
from jobledger.storage.postgres import dedupe, encode
from jobledger.storage.postgres.statements import Statements
from jobledger.storage.postgres.writes import MAX_EVENTS_PER_STATEMENT

SyncConn = psycopg.Connection[Any]


#: the connections seen to reach a store's tables, and which schema's
_REACHED: weakref.WeakKeyDictionary[SyncConn, str] = weakref.WeakKeyDictionary()


def check_reaches(conn: SyncConn, sql: Statements, store_dsn: str) -> None:
    """Refuse (ConfigError) a connection to another database than the store's DSN names,
    or to one without the store's tables, before any statement of the enqueue runs: a
    failed statement would abort the caller's transaction, whose commit then silently
    rolls its own rows back. The tables are looked up once per connection."""
    wanted = _dbname(store_dsn)
    if wanted is not None and conn.info.dbname != wanted:
        raise ConfigError(
            f"this connection is to database {conn.info.dbname!r}, the store's is"
            f" {wanted!r}: a job commits with your rows only in the same database"
        )
    if _REACHED.get(conn) == sql.schema:
        return
    with psycopg.Cursor(conn, row_factory=tuple_row) as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{sql.schema}.events",))
        row = cur.fetchone()
    if not (row and row[0]):
        raise _no_tables(sql, conn.info.dbname)
    _REACHED[conn] = sql.schema


@functools.cache
def _dbname(dsn: str) -> str | None:
    name = conninfo_to_dict(dsn).get("dbname")
    return str(name) if name else None


def _no_tables(sql: Statements, dbname: str) -> ConfigError:
    return ConfigError(
        f"no jobledger tables in schema {sql.schema} of database {dbname!r}: run"
        " `jobledger migrate` (or start a worker once) against it"
    )


def append_sync(conn: SyncConn, sql: Statements, changes: Sequence[Change]) -> list[bool]:
    """Write new-job `changes` (each `encode.opens_job`) inside `conn`'s transaction;
    per change, whether it was written (False: its dedupe key is already taken)."""
    if not all(encode.opens_job(c) for c in changes):
        raise ValueError("the sync path writes new jobs only (one JobEnqueued each)")
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise InvalidArgument(
            "enqueue needs a connection inside a transaction: open one first"
            " (`with conn.transaction():`, or a connection with autocommit off)"
        )
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
    """`PostgresStore.dedupe_holders` on a sync connection."""
    with psycopg.Cursor(conn, row_factory=tuple_row) as cur:
        _run(cur, sql, dedupe.holders_sql(sql.schema), {"keys": list(keys)})
        return dedupe.holders_of(cur.fetchall())


def next_version_sync(conn: SyncConn, sql: Statements, key: str) -> int:
    """`PostgresStore.next_version` on a sync connection."""
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
