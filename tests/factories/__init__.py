"""One module per adapter, each exposing

    @asynccontextmanager
    async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]

that yields an opened store with an empty state, or calls `pytest.skip(reason)` when
its server is not reachable. `tests/stores.py` lists them; every contract test runs on
each one.
"""
