"""The SQLite store on a fresh file under `tmp_path` (see tests/factories/__init__.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from jobledger.domain.jobs import Job
from jobledger.storage.port import Store, native_handle
from jobledger.storage.sqlite import SqliteStore
from jobledger.storage.sqlite.encode import decode_job
from jobledger.storage.sqlite.sql import JOB_SELECT


@asynccontextmanager
async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]:
    store = SqliteStore(str(tmp_path / "jobledger.db"), partitions=partitions)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def open_peer(store: Store) -> AsyncIterator[Store]:
    """A second store instance on the same database file (as another pod would open)."""
    assert isinstance(store, SqliteStore)
    peer = SqliteStore(store.path, partitions=store.partitions)
    await peer.open()
    try:
        yield peer
    finally:
        await peer.close()


async def business_write(tx: Any, value: str) -> None:
    """The caller's own business row, written on the transaction's native connection."""
    conn: sqlite3.Connection = native_handle(tx)
    conn.execute("CREATE TABLE IF NOT EXISTS business (value TEXT NOT NULL)")
    conn.execute("INSERT INTO business (value) VALUES (?)", (value,))


async def business_count(store: Store) -> int:
    """Committed business rows, read through a connection of its own."""
    assert isinstance(store, SqliteStore)
    with closing(sqlite3.connect(store.path)) as conn:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'business'"
        ).fetchone()
        if exists is None:
            return 0
        return int(conn.execute("SELECT count(*) FROM business").fetchone()[0])


async def all_jobs(store: Store) -> list[Job]:
    """Every job row, by id, read on the store's reader connection."""
    assert isinstance(store, SqliteStore)
    query = f"{JOB_SELECT} ORDER BY id"
    return await store.connections.read(lambda c: [decode_job(r) for r in c.execute(query)])
