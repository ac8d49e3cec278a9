"""The handle of a business transaction opened through `Store.transaction()`, and the
two helpers every adapter shares: the caller's native handle, the after-commit hooks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("jobledger.storage")


def run_after_commit(tx: Transaction) -> None:
    """Run `tx`'s hooks in order; a failing hook is logged and the rest still run."""
    for hook in tx.hooks:
        try:
            hook()
        except Exception:
            logger.exception("after-commit hook failed")


@dataclass(slots=True)
class Transaction:
    """A transaction opened through `Store.transaction()`.

    `native` is the driver's own handle (what `append_in` accepts too), so business
    code writes its rows on it; `after_commit` registers a hook that runs once the
    commit succeeded — never after a rollback — and whose failure is logged, not raised."""

    native: Any
    hooks: list[Callable[[], Any]] = field(default_factory=list)

    def after_commit(self, hook: Callable[[], Any]) -> None:
        self.hooks.append(hook)


def native_handle(tx: Any) -> Any:
    return tx.native if isinstance(tx, Transaction) else tx


#: what to enqueue with instead, by the module of a handle the async API does not take
_HINTS = {
    "sqlalchemy": "a SQLAlchemy session or connection: enqueue with"
    " jobledger.integrations.sqlalchemy (`await jobs.enqueue_async(app, session, ...)`)",
    "django": "a Django connection: enqueue with jobledger.integrations.django",
}


def caller_hint(native: Any) -> str:
    """A clause for a store's TypeError naming the entry point that takes `native`, when
    it is a handle a caller commonly passes by mistake (empty otherwise)."""
    cls = type(native)
    module = cls.__module__.partition(".")[0]
    if module == "psycopg" and cls.__name__ == "Connection":
        return (
            ": this is a sync psycopg Connection, enqueue on it with"
            " `app.enqueue_sync(..., tx=conn)` (jobledger.integrations.sync)"
        )
    if module == "sqlite3":
        return ": a sqlite3 connection enqueues into a SQLite store only"
    hint = _HINTS.get(module)
    if hint is not None:
        return f": this is {hint}"
    if cls.__name__ == "coroutine":
        return ": this is a coroutine, an `await` is missing where the handle was made"
    return f", not {cls.__name__}"
