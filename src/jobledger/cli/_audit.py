"""Shared by the audit commands (replay, verify, export, migrate, archive): open the
store named by `--store` (or the settings' `store_url`: JOBLEDGER_STORE, the config
file), run one coroutine on it, close it.

replay, verify and export read a log that must already exist: on a database that does
not exist (or holds no jobledger log) they stop with one line and exit 2 instead of
creating an empty store and reporting that its zero chains hold. Only `migrate` creates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from jobledger.cli.progress import ticking
from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.timeutil import at_ms
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store, store_url

if TYPE_CHECKING:
    from jobledger.storage.postgres import PostgresStore


def run_on_store(
    args: argparse.Namespace,
    work: Callable[[Store], Awaitable[int]],
    *,
    existing: bool = False,
    ticking_label: str | None = None,
) -> int:
    """Run `work` on the store; `existing`: refuse a store that holds no jobledger log
    (the commands that only read one); `ticking_label`: show the time spent opening
    the store and working on a terminal (`migrate`: opening is the migration)."""

    async def main() -> int:
        store = configured_store(args)
        await (require_existing(store) if existing else reach(store))
        shown: AbstractAsyncContextManager[object] = (
            ticking(ticking_label) if ticking_label else contextlib.nullcontext()
        )
        async with shown:
            await store.open()
            try:
                return await work(store)
            finally:
                await store.close()

    return asyncio.run(main())


def configured_store(args: argparse.Namespace) -> Store:
    """The store `--store` names, else the config file's or environment's `store_url`,
    with the `partitions`, `postgres_schema` and `mongodb_dead_ttl_seconds` settings
    (`--config`); not yet open."""
    from jobledger.config.load import load_settings

    settings = load_settings(file=getattr(args, "config", None))
    return open_store(
        store_url(getattr(args, "store", None) or settings.store_url),
        partitions=settings.partitions,
        schema=settings.postgres_schema,
        mongodb_dead_ttl_seconds=settings.mongodb_dead_ttl_seconds,
    )


async def reach(store: Store) -> None:
    """Raise ConfigError (one line, exit 2) when the store's server cannot be reached:
    a PostgreSQL server that is down, refuses us or has no such database fails in one
    line within the connect timeout instead of the pool's 30 s wait and a traceback;
    a MongoDB deployment that does not answer within 5 s likewise."""
    if store.name == "postgres":
        await _probe_postgres(cast("PostgresStore", store), need_log=False)
    elif store.name == "mongodb" and isinstance(url := getattr(store, "url", None), str):
        await ping_mongo(url, "the MongoDB store")


#: how long a MongoDB server may take to answer before a command gives up
MONGO_REACH_MS = 5000


async def ping_mongo(url: str, what: str) -> None:
    """Raise ConfigError (one line) unless the MongoDB deployment at `url` answers a
    ping within MONGO_REACH_MS (the driver would wait 30 s, then print a traceback)."""
    from pymongo import AsyncMongoClient
    from pymongo.errors import PyMongoError

    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        url, serverSelectionTimeoutMS=MONGO_REACH_MS
    )
    try:
        await client.admin.command("ping")
    except PyMongoError as exc:
        raise ConfigError(f"cannot reach {what}: {mongo_error_line(exc)}") from exc
    finally:
        await client.close()


def mongo_error_line(exc: BaseException) -> str:
    """The first line of a driver error, without its topology description."""
    return str(exc).split(", Timeout:")[0].splitlines()[0]


async def require_existing(store: Store) -> None:
    """Raise ConfigError (one line, exit 2) unless `store` already holds a jobledger log.

    Checked before `store.open()`, which would create the file or schema and migrate it.
    """
    from jobledger.storage.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        _require_sqlite_log(store.path)
        return
    if store.name == "postgres":
        await _probe_postgres(cast("PostgresStore", store), need_log=True)
        return
    await reach(store)  # MongoDB: at least a deployment that answers


def _require_sqlite_log(path: str) -> None:
    if not Path(path).is_file():
        raise ConfigError(f"no SQLite database at {path} (nothing was created)")
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path} is not a readable SQLite database: {exc}") from exc
    if found is None:
        raise ConfigError(f"{path} holds no jobledger log (run `jobledger migrate` to create one)")


async def _probe_postgres(store: PostgresStore, *, need_log: bool) -> None:
    import psycopg

    try:
        async with await psycopg.AsyncConnection.connect(
            store.dsn, autocommit=True, connect_timeout=5
        ) as conn:
            cur = await conn.execute("SELECT to_regclass(%s)", (f"{store.s}.events",))
            row = await cur.fetchone()
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot reach the PostgreSQL store: {first}") from exc
    if need_log and (row is None or row[0] is None):
        raise ConfigError(
            f"the PostgreSQL schema {store.schema} holds no jobledger log"
            " (run `jobledger migrate` to create one)"
        )


def parse_time(text: str) -> datetime:
    """An ISO 8601 time for --since/--until; a time without an offset is read as UTC."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidArgument(f"not an ISO 8601 time: {text!r}") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return at_ms(value)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
