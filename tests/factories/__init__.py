"""One module per adapter (`memory`, `sqlite`, `postgres`, `mongodb`), each exposing

    @asynccontextmanager
    async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]

that yields an opened store with an empty state, or calls `pytest.skip(reason)` when
its server is not reachable. `tests/stores.py` lists them; every contract test
(`tests/contract/`) runs on each one.

Each module also gives `async def all_jobs(store) -> list[Job]`: every job row, by id,
read from the store's own tables (`tests.stores.all_jobs` picks the module by
`store.name`; the port has no such read).

The contract suite also needs three adapter-specific helpers; a module without one
of them has the tests that need it skipped (with a reason), so add them:

    async def business_write(tx, value: str) -> None
        Write one "business row" holding `value` through the *native* handle of `tx`
        (a `port.Transaction` from `store.writes.transaction()`, or the native handle itself),
        exactly as a business module writes its own data in the same transaction:
        memory `MemoryTx.insert("business", value)`; SQLite / PostgreSQL an INSERT into a
        real `business` table (create it if missing); MongoDB an insert_one into a
        `business` collection with `session=`.

    async def business_count(store) -> int
        How many business rows are committed, read outside any transaction.

    @asynccontextmanager
    async def open_peer(store) -> AsyncIterator[Store]
        Another opened store instance on the *same* database, as a second pod would
        open it (its own connections / client). Memory yields the same object.
        Used for the racing tests (seeding, partition takes) and cross-instance wakes.
"""
