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
