from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from jobledger.storage.memory import MemoryStore
from jobledger.storage.port import Store


@asynccontextmanager
async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]:
    store = MemoryStore(partitions)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
