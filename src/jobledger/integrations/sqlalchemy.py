"""Enqueue inside a SQLAlchemy `Session`'s or `Connection`'s transaction, sync or
async (docs/sync-callers.md, docs/frameworks.md).

    with Session(engine) as session, session.begin():
        session.add(User(name="ada"))
        jobs.enqueue(app, session, "mail:welcome", {"user": "ada"})

    async with AsyncSession(engine) as session, session.begin():
        session.add(User(name="ada"))
        await jobs.enqueue_async(app, session, "mail:welcome", {"user": "ada"})

The job is written with the driver connection under the session, so it commits and
rolls back with the session's transaction: sync, `sqlite3` for `sqlite://` and psycopg 3
for `postgresql+psycopg://`, through `jobledger.integrations.sync`; async, psycopg 3's
`AsyncConnection` for `postgresql+psycopg://`, through `App.enqueue`. An async SQLite
engine (aiosqlite) is refused: its connection lives in a thread of aiosqlite's own that
the store's write path cannot run in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session, SessionTransaction

from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import NewJob
from jobledger.engine import Engine, Enqueued, EnqueueOptions
from jobledger.integrations import sync
from jobledger.storage.port import Transaction, run_after_commit


def enqueue(
    app: sync.HasEngine | Engine,
    bind: Session | Connection,
    target: str,
    payload: Any = None,
    **options: Unpack[EnqueueOptions],
) -> Enqueued:
    """`sync.enqueue` inside `bind`'s transaction (options as `App.enqueue`)."""
    return enqueue_many(app, bind, [sync.engine_of(app).new_job(target, payload, **options)])[0]


def enqueue_many(
    app: sync.HasEngine | Engine, bind: Session | Connection, items: Sequence[NewJob]
) -> list[Enqueued]:
    """On a `Session`, what runs after the commit (the enqueue metrics) waits for the
    session's commit and is dropped by a rollback of the transaction (or savepoint) the
    job was enqueued in; on a `Connection` it runs at once, as on a bare connection."""
    conn = driver_connection(bind)
    if not isinstance(bind, Session):
        return sync.enqueue_many(app, conn, items)
    tx = Transaction(conn)
    results = sync.enqueue_many(app, tx, items)
    if tx.hooks:
        _after_commit(bind, tx)
    return results


def next_version(app: sync.HasEngine | Engine, bind: Session | Connection, key: str) -> int:
    """`sync.next_version` inside `bind`'s transaction: pass it as `version=` to an
    enqueue in the same transaction to order a key's jobs in commit order."""
    return sync.next_version(app, driver_connection(bind), key)


async def enqueue_async(
    app: sync.HasEngine | Engine,
    bind: AsyncSession | AsyncConnection,
    target: str,
    payload: Any = None,
    **options: Unpack[EnqueueOptions],
) -> Enqueued:
    """`App.enqueue` inside an `AsyncSession`'s or `AsyncConnection`'s transaction
    (options as `App.enqueue`)."""
    item = sync.engine_of(app).new_job(target, payload, **options)
    return (await enqueue_many_async(app, bind, [item]))[0]


async def enqueue_many_async(
    app: sync.HasEngine | Engine, bind: AsyncSession | AsyncConnection, items: Sequence[NewJob]
) -> list[Enqueued]:
    """`enqueue_many` for async code: as on a sync `Session`, what runs after the commit
    waits for an `AsyncSession`'s commit and is dropped by its rollback."""
    engine = sync.engine_of(app)
    conn = await async_driver_connection(bind)
    if not isinstance(bind, AsyncSession):
        return list(await engine.enqueue_many(items, tx=conn))
    tx = Transaction(conn)
    results = await engine.enqueue_many(items, tx=tx)
    if tx.hooks:
        _after_commit(bind.sync_session, tx)
    return list(results)


async def next_version_async(
    app: sync.HasEngine | Engine, bind: AsyncSession | AsyncConnection, key: str
) -> int:
    """`App.next_version` inside an `AsyncSession`'s or `AsyncConnection`'s transaction."""
    return int(await sync.engine_of(app).next_version(key, tx=await async_driver_connection(bind)))


async def async_driver_connection(bind: AsyncSession | AsyncConnection) -> Any:
    """The driver's async connection under `bind`, with `bind`'s transaction begun (as
    `driver_connection` does for sync binds): psycopg's `AsyncConnection`. An aiosqlite
    connection is refused (InvalidArgument), before anything is written."""
    if isinstance(bind, AsyncSession):
        connection = await bind.connection()
    elif isinstance(bind, AsyncConnection):
        connection = bind
        if not connection.in_transaction():
            await connection.begin()
    else:
        raise TypeError(
            f"an AsyncSession or AsyncConnection, not {type(bind).__name__}"
            " (a sync Session or Connection: jobledger.integrations.sqlalchemy.enqueue)"
        )
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    if type(driver).__module__.partition(".")[0] == "aiosqlite":
        raise InvalidArgument(
            "an async SQLite engine (aiosqlite) cannot enqueue: its connection runs in"
            " aiosqlite's own thread; use a sync Session (jobs.enqueue) or app.transaction()"
        )
    return driver


_PENDING = "jobledger.after_commit"  # session.info: [(SessionTransaction, Transaction)]


def _after_commit(session: Session, tx: Transaction) -> None:
    if not event.contains(session, "after_commit", _run_pending):
        event.listen(session, "after_commit", _run_pending)
        event.listen(session, "after_soft_rollback", _drop_rolled_back)
    current = session.get_nested_transaction() or session.get_transaction()
    session.info.setdefault(_PENDING, []).append((current, tx))


def _run_pending(session: Session) -> None:
    if session.get_nested_transaction() is not None:  # a savepoint released, not the root
        return
    for _, tx in session.info.pop(_PENDING, []):
        run_after_commit(tx)


def _drop_rolled_back(session: Session, previous_transaction: SessionTransaction) -> None:
    """A rollback of `previous_transaction` drops what was enqueued in it or in a
    savepoint inside it."""
    pending = session.info.get(_PENDING)
    if pending:
        session.info[_PENDING] = [
            (where, tx) for where, tx in pending if not _inside(where, previous_transaction)
        ]


def _inside(where: SessionTransaction | None, rolled_back: SessionTransaction) -> bool:
    while where is not None:
        if where is rolled_back:
            return True
        where = where.parent
    return False


def driver_connection(bind: Session | Connection) -> Any:
    """The driver's connection under `bind`, with `bind`'s transaction begun: a
    session's as a query would begin it, a connection's if it has none yet (its
    `commit()` then commits the job)."""
    if isinstance(bind, Session):
        connection = bind.connection()
    elif isinstance(bind, Connection):
        connection = bind
        if not connection.in_transaction():
            connection.begin()
    else:
        raise TypeError(f"a SQLAlchemy Session or Connection, not {type(bind).__name__}")
    return connection.connection.driver_connection
