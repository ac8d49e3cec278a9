"""The MongoDB adapter in the contract suite.

Runs when JOBLEDGER_TEST_MONGO_URI names a replica set (transactions and change streams
need one); otherwise every MongoDB test skips and says why. No MongoDB server can be
installed on the project's own machines, and no container engine runs there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from jobledger.storage.port import Store, native_handle

SKIP_REASON = (
    "MongoDB tests skipped: JOBLEDGER_TEST_MONGO_URI is not set (no MongoDB server can be "
    "installed on this machine and no container engine runs here; point it at a replica "
    "set, e.g. mongodb://localhost:27017/?replicaSet=rs0&directConnection=true)"
)


_current: dict[str, str] = {}


def mongo_uri() -> str | None:
    return os.environ.get("JOBLEDGER_TEST_MONGO_URI") or None


@asynccontextmanager
async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]:
    uri = mongo_uri()
    if uri is None:
        pytest.skip(SKIP_REASON)
    from jobledger.storage.mongodb import MongoStore

    database = f"jobledger_test_{uuid.uuid4().hex[:12]}"
    _current["database"] = database
    store = MongoStore(uri, partitions=partitions, database=database)
    await store.open()
    try:
        yield store
    finally:
        await store.client.drop_database(database)
        await store.close()


async def business_write(tx: Any, value: Any) -> None:
    """The business module's own write, in the caller's session and transaction."""
    session = native_handle(tx)
    await session.client[_current["database"]].business.insert_one({"value": value}, session=session)


async def business_count(store: Store) -> int:
    from jobledger.storage.mongodb import MongoStore

    assert isinstance(store, MongoStore)
    return int(await store.db.business.count_documents({}))
