"""Sync enqueue on the caller's own connection: `sqlite3.Connection` or psycopg
`Connection` (docs/sync-callers.md).

    with sqlite3.connect("shop.db") as conn:          # the caller's transaction
        conn.execute("INSERT INTO users VALUES (?)", ("ada",))
        job = sync.enqueue(app, conn, "mail:welcome", {"user": 1})

The job is validated and built exactly as `await app.enqueue(...)` does it
(`Engine.plan_enqueue` / `settle_enqueue`: the same input rules, dedupe, ids and
results) and written with the store's own row encoding on the caller's connection,
inside the caller's transaction; nothing here commits or rolls back (a `sqlite3`
connection not yet in a transaction is begun, as its first INSERT would have begun it
— IMMEDIATE — and the caller commits it). The workers learn of the commit as of any other connection's: PostgreSQL's
NOTIFY goes out with the commit, SQLite workers see `PRAGMA data_version` move on their
next watch tick (25 ms). The connection must reach the app's store: the same SQLite
file, the same PostgreSQL database (the store's schema is named in every statement).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, Unpack

from jobledger.domain.enqueue_rules import check_counter_key
from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.jobs import Change, NewJob
from jobledger.engine import Engine, Enqueued, EnqueueOptions
from jobledger.storage.port import Store, native_handle
from jobledger.storage.sqlite import SqliteStore
from jobledger.storage.sqlite.writes import (
    append_on,
    check_reaches,
    dedupe_holders_on,
    next_version_on,
    write_migrated,
)


class Writer(NamedTuple):
    """A store's write path on a sync caller's connection (`writer_for`)."""

    append: Callable[[Sequence[Change]], list[bool]]
    holders: Callable[[Sequence[str]], dict[str, str]]
    next_version: Callable[[str], int]


class HasEngine(Protocol):
    """`jobledger.App` (or anything with the `engine` it enqueues through)."""

    @property
    def engine(self) -> Any: ...


def enqueue(
    app: HasEngine | Engine,
    conn: Any,
    target: str,
    payload: Any = None,
    **options: Unpack[EnqueueOptions],
) -> Enqueued:
    """Append one job inside `conn`'s transaction; options as `App.enqueue` (key,
    version, dedupe_key, run_at, headers, code). A dedupe hit returns the holder's id."""
    return enqueue_many(app, conn, [engine_of(app).new_job(target, payload, **options)])[0]


def engine_of(app: HasEngine | Engine) -> Engine:
    """The engine `app` enqueues through (`app` itself when it is one)."""
    engine: Engine = app if isinstance(app, Engine) else app.engine
    return engine


def enqueue_many(app: HasEngine | Engine, conn: Any, items: Sequence[NewJob]) -> list[Enqueued]:
    """`Engine.enqueue_many`, sync, on the caller's `sqlite3.Connection` or psycopg
    `Connection`. Every item is checked before anything is written.

    `conn` may be a `port.Transaction` around the connection, whose hooks the caller
    runs after its commit (`run_after_commit`): the enqueue metrics are then counted
    there (the Django helper does it with `on_commit`), else at once. Lossy targets
    are refused: their hand-over runs on the workers' event loop, not in this thread.
    """
    engine = engine_of(app)
    for item in items:
        target = engine.targets.find(item.target)
        if target is not None and target.lossy:
            raise InvalidArgument(
                f"target {item.target!r} is lossy: its jobs are handed over on the event"
                " loop after the commit, so sync code cannot enqueue them"
            )
    writer = writer_for(engine.store, native_handle(conn))
    plan = engine.plan_enqueue(items, tx=conn)
    flags = writer.append(plan.changes) if plan.changes else []
    lost = plan.lost_keys(flags)
    return engine.settle_enqueue(plan, flags, writer.holders(lost) if lost else {}, tx=conn)


def next_version(app: HasEngine | Engine, conn: Any, key: str) -> int:
    """`App.next_version`, sync: the next version of `key`, counted inside `conn`'s
    transaction (the one the job is enqueued in: a second transaction asking for the
    key waits until this one ends, so a key's versions follow commit order)."""
    engine = engine_of(app)
    check_counter_key(key)
    return writer_for(engine.store, native_handle(conn)).next_version(key)


def writer_for(store: Store, conn: Any) -> Writer:
    """The store's write path, dedupe lookup and counter on `conn`, once `conn` is known
    to reach `store` (raises TypeError or ConfigError naming the mismatch)."""
    if isinstance(conn, sqlite3.Connection):
        if not isinstance(store, SqliteStore):
            raise ConfigError(f"a sqlite3 connection cannot enqueue into the {store.name} store")
        return _sqlite_writer(store, conn)
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(conn, psycopg.Connection):
        return _postgres_writer(store, conn)
    if psycopg is not None and isinstance(conn, psycopg.AsyncConnection):
        raise TypeError("an async connection: use `await app.enqueue(..., tx=conn)`")
    raise TypeError(
        f"sync enqueue takes a sqlite3.Connection or a psycopg Connection, not"
        f" {type(conn).__name__} (SQLAlchemy and Django: jobledger.integrations.sqlalchemy"
        " and .django)"
    )


def _sqlite_writer(store: SqliteStore, conn: sqlite3.Connection) -> Writer:
    check_reaches(conn, store.path)

    def migrated(write: Callable[[sqlite3.Connection, Any], Any]) -> Callable[[Any], Any]:
        def run(argument: Any) -> Any:
            return write_migrated(store.path, write, conn, argument)

        return run

    def holders(keys: Sequence[str]) -> dict[str, str]:
        cursor = conn.cursor()
        cursor.row_factory = None
        return dedupe_holders_on(cursor, keys)

    return Writer(migrated(append_on), holders, migrated(next_version_on))


def _postgres_writer(store: Store, conn: Any) -> Writer:
    from jobledger.storage.postgres import PostgresStore
    from jobledger.storage.postgres.writes import (
        append_sync,
        check_reaches,
        holders_sync,
        next_version_sync,
    )

    if not isinstance(store, PostgresStore):
        raise ConfigError(f"a psycopg connection cannot enqueue into the {store.name} store")
    sql = store.sql
    check_reaches(conn, sql, store.dsn)
    return Writer(
        lambda changes: append_sync(conn, sql, changes),
        lambda keys: holders_sync(conn, sql, keys),
        lambda key: next_version_sync(conn, sql, key),
    )
