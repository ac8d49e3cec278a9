"""The adapter's three ways of running a transaction, and the labels that drive them.

* `retried(client, body)`: `AsyncClientSession.with_transaction` — on a
  `TransientTransactionError` (a write conflict, a primary stepping down) the attempt is
  aborted and `body` runs again from a fresh snapshot, with PyMongo's backoff between
  attempts, for up to 120 s. Lane commits and `MongoStore.run_in_transaction` use it.
* `one_attempt(client, body)`: one attempt; a `TransientTransactionError` aborts it and
  returns `None` instead of waiting for the writer it conflicted with. Sequencing steps
  use it (decisions D41): a step that meets another step — live, or dead and not yet
  aborted by the server — gives way at once.
* `commit(session)`: the commit of a transaction the adapter started itself, retried
  while its outcome is unknown (`UnknownTransactionCommitResult`), as `with_transaction`
  retries it.

`explain_conflict(exc)` adds the one-line note a business block under `async with
store.writes.transaction()` shows when such an error escapes it (decisions D40).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import PyMongoError

from jobledger.storage.mongodb.codec import Client, transaction_options

logger = logging.getLogger("jobledger.storage.mongodb")
T = TypeVar("T")

TRANSIENT = "TransientTransactionError"
UNKNOWN_COMMIT = "UnknownTransactionCommitResult"
COMMIT_RETRY_S = 120.0  # as long as with_transaction retries a commit

Body = Callable[[AsyncClientSession], Awaitable[T]]

CONFLICT_NOTE = (
    "jobledger: this MongoDB transaction met a concurrent one (the same dedupe key or "
    "next_version key, a failover) and was aborted; a `with` block cannot be re-run: "
    "pass the block as a callback to store.run_in_transaction(callback), which runs it again"
)


def is_transient(exc: BaseException) -> bool:
    """Whether the server (or the driver) labelled `exc` TransientTransactionError: the
    whole transaction may succeed if run again."""
    return isinstance(exc, PyMongoError) and exc.has_error_label(TRANSIENT)


def explain_conflict(exc: BaseException) -> None:
    """Add `CONFLICT_NOTE` to a transient error leaving a business block (once)."""
    if is_transient(exc) and CONFLICT_NOTE not in getattr(exc, "__notes__", ()):
        exc.add_note(CONFLICT_NOTE)


async def retried(client: Client, body: Body[T]) -> T:
    """Run `body(session)` in an engine-owned transaction, re-run on transient errors
    (`AsyncClientSession.with_transaction`)."""
    async with client.start_session() as session:
        result: T = await session.with_transaction(body, **transaction_options())
        return result


async def one_attempt(client: Client, body: Body[T]) -> T | None:
    """Run `body(session)` once in an engine-owned transaction: its result once
    committed, `None` when a transient error (a write conflict) aborted it."""
    async with client.start_session() as session:
        await session.start_transaction(**transaction_options())
        try:
            result = await body(session)
        except BaseException as exc:
            if session.in_transaction:
                await session.abort_transaction()
            if is_transient(exc):
                return None
            raise
        try:
            await commit(session)
        except PyMongoError as exc:
            if is_transient(exc):
                return None
            raise
        return result


async def commit(session: AsyncClientSession) -> None:
    """Commit, retrying while the outcome is unknown (as `with_transaction` does)."""
    deadline = time.monotonic() + COMMIT_RETRY_S
    while True:
        try:
            await session.commit_transaction()
            return
        except PyMongoError as exc:
            if not exc.has_error_label(UNKNOWN_COMMIT) or time.monotonic() > deadline:
                raise
            logger.warning("transaction commit result unknown (%s); committing again", exc)
