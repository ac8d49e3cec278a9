from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jobledger.domain.jobs import Job
from jobledger.storage.memory import MemoryStore
from jobledger.storage.port import Store, native_handle


@asynccontextmanager
async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]:
    store = MemoryStore(partitions)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def open_peer(store: Store) -> AsyncIterator[Store]:
    """The memory "database" lives in one object: a peer is that same store."""
    yield store


async def business_write(tx: Any, value: str) -> None:
    native_handle(tx).insert("business", value)


async def business_count(store: Store) -> int:
    assert isinstance(store, MemoryStore)
    return len(store.tables.business.get("business", []))


async def all_jobs(store: Store) -> list[Job]:
    """Every job row, by id."""
    assert isinstance(store, MemoryStore)
    return sorted(store.tables.jobs.values(), key=lambda j: j.id)
