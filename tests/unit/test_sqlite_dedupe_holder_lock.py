"""A viewer's dedupe-key lookup on SQLite takes no write lock.

`/api/v1/finished?dedupe_key=` and `/admin/find?q=` used to open `store.writes.transaction()`,
which on SQLite is `BEGIN IMMEDIATE`: while any other connection held the write lock
(a worker's commit, a business transaction) the GET waited for the busy timeout and
answered 500 after about 10 s (found by the review helper). `AdminReads.dedupe_holder`
reads on the reader connection instead.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from jobledger.config.settings import Settings
from jobledger.engine import Engine
from jobledger.storage.sqlite import SqliteStore


async def test_the_lookup_answers_while_another_connection_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobledger.db"
    store = SqliteStore(str(path), partitions=4)
    await store.open()
    try:
        engine = Engine(store, settings=Settings(partitions=4))
        engine.targets.register("x:t", "fast", lambda job: None)
        async with engine.transaction() as tx:
            held = await engine.enqueue("x:t", {"v": 1}, dedupe_key="order-1", tx=tx)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # a writer somewhere else holds the lock
        try:
            found = await asyncio.wait_for(store.admin.dedupe_holder("order-1"), 3)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert found == held.job_id
    finally:
        await store.close()
