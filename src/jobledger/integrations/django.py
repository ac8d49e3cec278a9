"""Enqueue inside a Django transaction (docs/sync-callers.md).

    with transaction.atomic():
        user = User.objects.create(name="ada")
        jobs.enqueue(app, "mail:welcome", {"user": user.pk})

The job is written with the Django connection's driver connection (`sqlite3`, or
psycopg 3 for the PostgreSQL backend) by `jobledger.integrations.sync`, inside the
`atomic()` block, so it commits and rolls back with it (a savepoint of an inner block
included). Outside any `atomic()` block the enqueue is its own transaction, as a
`save()` is in Django's autocommit mode. The enqueue metrics are counted by
`transaction.on_commit`: a rolled-back block counts nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Unpack

from django.db import connections, transaction

from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import NewJob
from jobledger.engine import Engine, Enqueued, EnqueueOptions
from jobledger.integrations import sync
from jobledger.storage.port import Transaction, run_after_commit


def enqueue(
    app: sync.HasEngine | Engine,
    target: str,
    payload: Any = None,
    *,
    using: str = "default",
    **options: Unpack[EnqueueOptions],
) -> Enqueued:
    """`sync.enqueue` on Django's connection `using` (options as `App.enqueue`)."""
    item = sync.engine_of(app).new_job(target, payload, **options)
    return enqueue_many(app, [item], using=using)[0]


def enqueue_many(
    app: sync.HasEngine | Engine, items: Sequence[NewJob], *, using: str = "default"
) -> list[Enqueued]:
    connection = connections[using]
    if connection.in_atomic_block:
        return _enqueue_in_block(app, items, using)
    with transaction.atomic(using=using):
        return _enqueue_in_block(app, items, using)


def next_version(app: sync.HasEngine | Engine, key: str, *, using: str = "default") -> int:
    """`sync.next_version` on Django's connection `using`, inside the `atomic()` block
    that enqueues the job (outside one it would commit at once and order nothing)."""
    connection = connections[using]
    if not connection.in_atomic_block:
        raise InvalidArgument(
            "next_version counts inside the transaction that enqueues the job: call both"
            " inside transaction.atomic()"
        )
    connection.ensure_connection()
    return sync.next_version(app, connection.connection, key)


def _enqueue_in_block(
    app: sync.HasEngine | Engine, items: Sequence[NewJob], using: str
) -> list[Enqueued]:
    """Enqueue on the block's connection; what runs after the commit (the enqueue
    metrics) goes to Django's `on_commit`, so a rolled-back block (or savepoint) runs
    none of it."""
    connection = connections[using]
    connection.ensure_connection()
    tx = Transaction(connection.connection)
    results = sync.enqueue_many(app, tx, items)
    if tx.hooks:
        transaction.on_commit(functools.partial(run_after_commit, tx), using=using)
    return results
