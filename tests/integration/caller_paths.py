"""Every way a caller enqueues inside its own transaction, behind one interface, so the
transaction rule's contract (test_transaction_rule.py) runs the same steps on each.

A `Caller` is one open transaction of one path: `write` a business row, `enqueue`,
then `end(commit=...)`. Sync paths run each step in one thread of their own (Django's
connection and `atomic()` block belong to the thread that opened them).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from jobledger import App
from jobledger.engine import Enqueued
from jobledger.integrations import sync

T = TypeVar("T")

PATHS = [
    "app.transaction",
    "own connection",
    "sync helper",
    "enqueue_sync",
    "sqlalchemy",
    "sqlalchemy async",
    "django",
]


class Boom(Exception):
    """What a caller raises to roll its transaction back."""


@dataclass
class Database:
    """Where a caller's transaction runs: the app that enqueues, a sync DBAPI connection
    factory of the same database, its business table, parameter mark, SQLAlchemy URL and
    (SQLite) file; `store` is "memory", "sqlite" or "postgres"."""

    store: str
    app: App
    connect: Callable[[], Any] | None
    table: str
    mark: str
    url: str
    path: str | None = None  # SQLite: the database file
    dsn: str | None = None  # PostgreSQL: the database's DSN


class Caller:
    """One open transaction of a path."""

    async def write(self, name: str) -> None:
        raise NotImplementedError

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        raise NotImplementedError

    async def end(self, *, commit: bool) -> None:
        raise NotImplementedError


class _Threaded(Caller):
    """A sync caller: every step in the one thread of its own executor."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.thread = ThreadPoolExecutor(1)

    async def call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn)

    def insert(self, conn: Any, name: str) -> None:
        conn.execute(f"INSERT INTO {self.db.table} (name) VALUES ({self.db.mark})", (name,))

    async def close(self) -> None:
        self.thread.shutdown(wait=True)


class AppTransaction(Caller):
    def __init__(self, db: Database) -> None:
        self.db = db
        self.cm: AbstractAsyncContextManager[Any] = db.app.transaction()

    async def open(self) -> AppTransaction:
        self.tx = await self.cm.__aenter__()
        return self

    async def write(self, name: str) -> None:
        native = self.tx.native
        if self.db.store == "memory":
            native.insert("users", name)
        elif self.db.store == "sqlite":
            native.execute(f"INSERT INTO {self.db.table} (name) VALUES (?)", (name,))
        else:
            await native.execute(f"INSERT INTO {self.db.table} (name) VALUES (%s)", (name,))

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        return await self.db.app.enqueue(target, payload, tx=self.tx, **options)

    async def end(self, *, commit: bool) -> None:
        if commit:
            await self.cm.__aexit__(None, None, None)
            return
        with suppress(Boom):
            await self.cm.__aexit__(Boom, Boom(), None)


class OwnConnection(Caller):
    """`await app.enqueue(..., tx=conn)` on the caller's own connection: `sqlite3` on
    SQLite, psycopg's `AsyncConnection` on PostgreSQL."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(self) -> OwnConnection:
        if self.db.store == "sqlite":
            assert self.db.connect is not None
            self.conn = self.db.connect()
        else:
            import psycopg

            assert self.db.dsn is not None
            self.conn = await psycopg.AsyncConnection.connect(self.db.dsn)
        return self

    async def write(self, name: str) -> None:
        query = f"INSERT INTO {self.db.table} (name) VALUES ({self.db.mark})"
        if self.db.store == "sqlite":
            self.conn.execute(query, (name,))
        else:
            await self.conn.execute(query, (name,))

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        return await self.db.app.enqueue(target, payload, tx=self.conn, **options)

    async def end(self, *, commit: bool) -> None:
        if self.db.store == "sqlite":
            self.conn.commit() if commit else self.conn.rollback()
            self.conn.close()
            return
        await (self.conn.commit() if commit else self.conn.rollback())
        await self.conn.close()


class SyncHelper(_Threaded):
    """`jobledger.integrations.sync.enqueue` (or `app.enqueue_sync`) on a sync DBAPI
    connection."""

    def __init__(self, db: Database, *, via_app: bool) -> None:
        super().__init__(db)
        self.via_app = via_app

    async def open(self) -> SyncHelper:
        assert self.db.connect is not None
        self.conn = await self.call(self.db.connect)
        return self

    async def write(self, name: str) -> None:
        await self.call(lambda: self.insert(self.conn, name))

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        app = self.db.app
        if self.via_app:
            return await self.call(
                lambda: app.enqueue_sync(target, payload, tx=self.conn, **options)
            )
        return await self.call(lambda: sync.enqueue(app, self.conn, target, payload, **options))

    async def end(self, *, commit: bool) -> None:
        def finish() -> None:
            self.conn.commit() if commit else self.conn.rollback()
            self.conn.close()

        await self.call(finish)
        await self.close()


class SqlAlchemySync(_Threaded):
    async def open(self) -> SqlAlchemySync:
        from sqlalchemy import create_engine
        from sqlalchemy.orm import Session

        def begin() -> None:
            self.engine = create_engine(self.db.url)
            self.session = Session(self.engine)
            self.session.begin()

        await self.call(begin)
        return self

    async def write(self, name: str) -> None:
        from sqlalchemy import text

        await self.call(
            lambda: self.session.execute(
                text(f"INSERT INTO {self.db.table} (name) VALUES (:name)"), {"name": name}
            )
        )

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        from jobledger.integrations import sqlalchemy as jobs

        app = self.db.app
        return await self.call(lambda: jobs.enqueue(app, self.session, target, payload, **options))

    async def end(self, *, commit: bool) -> None:
        def finish() -> None:
            self.session.commit() if commit else self.session.rollback()
            self.session.close()
            self.engine.dispose()

        await self.call(finish)
        await self.close()


class SqlAlchemyAsync(Caller):
    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(self) -> SqlAlchemyAsync:
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        url = self.db.url.replace("sqlite://", "sqlite+aiosqlite://")
        self.engine = create_async_engine(url)
        self.session = AsyncSession(self.engine)
        await self.session.begin()
        return self

    async def write(self, name: str) -> None:
        from sqlalchemy import text

        await self.session.execute(
            text(f"INSERT INTO {self.db.table} (name) VALUES (:name)"), {"name": name}
        )

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        from jobledger.integrations import sqlalchemy as jobs

        return await jobs.enqueue_async(self.db.app, self.session, target, payload, **options)

    async def end(self, *, commit: bool) -> None:
        await (self.session.commit() if commit else self.session.rollback())
        await self.session.close()
        await self.engine.dispose()


class Django(_Threaded):
    async def open(self) -> Django:
        from django.db import connections, transaction

        self.using = "default" if self.db.store == "sqlite" else "pg"
        if self.db.store == "sqlite":
            connections.settings["default"]["NAME"] = self.db.path
        self.block = transaction.atomic(using=self.using)
        await self.call(self.block.__enter__)
        return self

    async def write(self, name: str) -> None:
        from django.db import connections

        def insert() -> None:
            with connections[self.using].cursor() as cursor:
                cursor.execute(f"INSERT INTO {self.db.table} (name) VALUES (%s)", [name])

        await self.call(insert)

    async def enqueue(self, target: str, payload: Any, **options: Any) -> Enqueued:
        from jobledger.integrations import django as jobs

        app, using = self.db.app, self.using
        return await self.call(lambda: jobs.enqueue(app, target, payload, using=using, **options))

    async def end(self, *, commit: bool) -> None:
        from django.db import connections

        def finish() -> None:
            try:
                if commit:
                    self.block.__exit__(None, None, None)
                else:
                    self.block.__exit__(Boom, Boom(), None)
            finally:
                connections.close_all()

        await self.call(finish)
        await self.close()


async def open_caller(path: str, db: Database) -> Caller:
    """A transaction of `path` on `db`, begun."""
    if path == "app.transaction":
        return await AppTransaction(db).open()
    if path == "own connection":
        return await OwnConnection(db).open()
    if path in ("sync helper", "enqueue_sync"):
        return await SyncHelper(db, via_app=path == "enqueue_sync").open()
    if path == "sqlalchemy":
        return await SqlAlchemySync(db).open()
    if path == "sqlalchemy async":
        return await SqlAlchemyAsync(db).open()
    if path == "django":
        return await Django(db).open()
    raise ValueError(path)


def users(db: Database) -> list[str]:
    """The business rows committed in `db`, by name."""
    if db.store == "memory":
        tables = db.app.pod.store.writes.tables  # type: ignore[attr-defined]
        return sorted(tables.business.get("users", []))
    assert db.connect is not None
    conn = db.connect()
    try:
        rows = conn.execute(f"SELECT name FROM {db.table} ORDER BY name").fetchall()
        conn.rollback()
    finally:
        conn.close()
    return [r[0] for r in rows]


def sqlite_connect(path: str) -> Callable[[], sqlite3.Connection]:
    return lambda: sqlite3.connect(path)
