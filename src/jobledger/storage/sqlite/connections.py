"""The SQLite store's connections, which every role of the store shares: the writer and
the reader, each driven by a thread of its own, the write lock, and the helpers that run
work on either connection (see `store.SqliteStore`)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

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


class Connections:
    """The writer and reader connections of one database file and this process's write
    lock. `open()` connects both (the writer first, so migrations run before any read);
    every write goes through `writing()` or `write()`, every read through `read()`."""

    def __init__(self, path: str, *, offload: bool, busy_timeout_ms: int) -> None:
        self.path = path
        self.offload = offload
        self.busy_timeout_ms = busy_timeout_ms
        self.writer: Conn | None = None
        self.reader: Conn | None = None
        self.lock = asyncio.Lock()
        #: the task holding the write lock (a business transaction's, or a write's)
        self.owner: asyncio.Task[Any] | None = None

    def open_writer(self) -> Conn:
        self.writer = Conn(
            self.path,
            name="jobledger-sqlite-w",
            offload=self.offload,
            busy_ms=self.busy_timeout_ms,
            writer=True,
        )
        return self.writer

    def open_reader(self) -> Conn:
        self.reader = Conn(
            self.path, name="jobledger-sqlite-r", offload=self.offload, busy_ms=self.busy_timeout_ms
        )
        return self.reader

    async def close(self) -> None:
        async with self.lock:
            for conn in (self.reader, self.writer):
                if conn is not None:
                    conn.close()
            self.reader = self.writer = None

    @property
    def w(self) -> Conn:
        if self.writer is None:
            raise RuntimeError("the SQLite store is not open")
        return self.writer

    @property
    def r(self) -> Conn:
        if self.reader is None:
            raise RuntimeError("the SQLite store is not open")
        return self.reader

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[sqlite3.Connection]:
        """Hold this process's write lock (the writer connection is ours until exit)."""
        task = asyncio.current_task()
        if task is not None and task is self.owner:
            raise RuntimeError(
                "this task holds the store's open transaction: a second write from it would"
                " wait for itself (write inside the transaction with append_in instead)"
            )
        async with self.lock:
            self.owner = task
            try:
                yield self.w.conn
            finally:
                self.owner = None

    async def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in one IMMEDIATE transaction on the writer connection."""
        async with self.writing() as conn:
            return await self.w.run(lambda: in_transaction(conn, work))

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self.r.conn
        return await self.r.run(lambda: work(conn))


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
