"""Enqueue inside a (sync) SQLAlchemy `Session`'s or `Connection`'s transaction
(docs/sync-callers.md).

    with Session(engine) as session, session.begin():
        session.add(User(name="ada"))
        jobs.enqueue(app, session, "mail:welcome", {"user": "ada"})

The job is written with the driver connection under the session (`sqlite3` for
`sqlite://`, psycopg 3 for `postgresql+psycopg://`) by `jobledger.integrations.sync`,
so it commits and rolls back with the session's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from jobledger.domain.jobs import NewJob
from jobledger.engine import Engine, Enqueued
from jobledger.integrations import sync


def enqueue(
    app: sync.HasEngine | Engine,
    bind: Session | Connection,
    target: str,
    payload: Any = None,
    **options: Any,
) -> Enqueued:
    """`sync.enqueue` inside `bind`'s transaction (options as `App.enqueue`)."""
    return enqueue_many(app, bind, [NewJob(target, payload, **options)])[0]


def enqueue_many(
    app: sync.HasEngine | Engine, bind: Session | Connection, items: Sequence[NewJob]
) -> list[Enqueued]:
    return sync.enqueue_many(app, driver_connection(bind), items)


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
