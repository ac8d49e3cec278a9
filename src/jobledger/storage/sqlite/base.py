"""What the parts of the SQLite store share: its two connections and the threads that
drive them, the write lock, and the helpers that run work on either connection (see
`store.SqliteStore`)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from jobledger.domain.jobs import Change
from jobledger.storage.feed import LocalFeed

T = TypeVar("T")


# --- one connection and the thread that drives it ------------------------------------------


#: the writer connection's page cache, KiB (SQLite's default is 2 MiB). An outcome batch
#: touches index pages all over the file (the ids, keys and codes it deletes are spread
#: over every index); with the default cache those pages are evicted and written to the
#: WAL more than once within one transaction. The cache grows only as far as it is used.
WRITER_CACHE_KIB = 65_536
#: WAL pages after which a commit checkpoints (SQLite's default is 1,000). Outcome
#: batches write thousands of pages each, so at the default nearly every commit also
#: copied its pages into the database file and synced it; at 10,000 (≈ 40 MiB of WAL at
#: 4 KiB pages) a page rewritten by several commits is copied once. Durability is the
#: same: a commit is durable once its WAL frames are synced (`synchronous = FULL`).
WAL_AUTOCHECKPOINT_PAGES = 10_000


class Conn:
    def __init__(
        self, path: str, *, name: str, offload: bool, busy_ms: int, writer: bool = False
    ) -> None:
        self.conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_ms / 1000
        )
        self.conn.row_factory = sqlite3.Row
        self.conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        self.conn.execute("PRAGMA synchronous = FULL")
        if writer:
            self.conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name) if offload else None

    async def run(self, work: Callable[[], T]) -> T:
        if self._pool is None:
            return work()
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.conn.close()


class SqliteBase:
    """The state every part of the store reads; `SqliteStore` sets it up."""

    path: str
    _writer: Conn | None
    _reader: Conn | None
    _lock: asyncio.Lock
    _owner: asyncio.Task[Any] | None
    _staged: list[Change]  # applied inside the open business transaction
    _feed: LocalFeed

    @property
    def _w(self) -> Conn:
        if self._writer is None:
            raise RuntimeError("the SQLite store is not open")
        return self._writer

    @property
    def _r(self) -> Conn:
        if self._reader is None:
            raise RuntimeError("the SQLite store is not open")
        return self._reader

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[sqlite3.Connection]:
        """Hold this process's write lock (the writer connection is ours until exit)."""
        task = asyncio.current_task()
        if task is not None and task is self._owner:
            raise RuntimeError(
                "this task holds the store's open transaction: a second write from it would"
                " wait for itself (write inside the transaction with append_in instead)"
            )
        async with self._lock:
            self._owner = task
            try:
                yield self._w.conn
            finally:
                self._owner = None

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in one IMMEDIATE transaction on the writer connection."""
        async with self._writing() as conn:
            return await self._w.run(lambda: in_transaction(conn, work))

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._r.conn
        return await self._r.run(lambda: work(conn))


def in_transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
    except BaseException:
        rollback(conn)
        raise
    conn.execute("COMMIT")
    return result


def rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
