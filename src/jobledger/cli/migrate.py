"""`jobledger migrate`: open the store, which applies its idempotent migrations, and
report the schema version."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from jobledger.cli._audit import run_on_store
from jobledger.storage.port import Store


async def schema_version(store: Store) -> Any:
    """The store's schema version, from the adapter's idempotent `migrate()` (SQLite,
    PostgreSQL: it returns the version it left the schema at) or a `schema_version`
    attribute; None when the adapter keeps no schema (memory)."""
    value = getattr(store, "migrate", None) or getattr(store, "schema_version", None)
    if callable(value):
        value = value()
    if inspect.isawaitable(value):
        value = await value
    return value


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "migrate",
        help="create or upgrade the store's schema and report its version",
        description=__doc__,
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        version = await schema_version(store)
        shown = "none (this store keeps no schema)" if version is None else version
        print(f"{store.name}: schema version {shown}")
        return 0

    return run_on_store(args, work, ticking_label="migrate")
