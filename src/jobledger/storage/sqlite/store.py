"""The SQLite adapter: the embedded default store (stdlib `sqlite3`, WAL, durable commits).

One file holds the log, the inline projections and the coordination rows. Design
(docs/storage.md has the reasons and the measurements):

* **One writer connection per store**, driven by one dedicated thread. Every write this
  process makes — `apply`, the coordination rows, checkpoints and the business
  transactions of `transaction()` — goes through it, serialised by an asyncio lock, so
  in-process writers queue fairly instead of spinning in SQLite's busy handler.
  Other processes are kept out by SQLite's own write lock (`BEGIN IMMEDIATE`, with
  `busy_timeout`).
* **One reader connection**, on its own thread: WAL readers never block the writer.
* **Positions are commit-ordered**: SQLite has one writer at a time and a position is
  handed out inside the writing transaction, so a later position always commits later.
* **The change feed**: this process's commits publish the partitions they touched; a
  watcher polls `PRAGMA data_version` on the writer connection — whose value changes
  only when *another* connection commits — and publishes `EVERYTHING` then. The
  watcher runs only while the feed has a subscriber: a process that only enqueues
  does not poll.

The store is the bundle of its roles, one class each over the shared `Connections`
(`connections.py`): the write path (`writes.py`), the queue reads (`queue.py`), the
coordination rows (`coordination.py`), the log and its archive cut (`log.py`), the admin
reads (`admin.py`) and the projection state (`projections.py`); every SQL text is in
`sql.py`. This module keeps the life cycle and the change feed.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import UTC, datetime

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.timeutil import iso
from jobledger.storage.feed import LocalFeed, Subscription
from jobledger.storage.port import Store
from jobledger.storage.sqlite.admin import SqliteAdmin
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.coordination import SqliteCoordination
from jobledger.storage.sqlite.liveness import token_folder
from jobledger.storage.sqlite.log import SqliteLog, SqliteRetention
from jobledger.storage.sqlite.projections import SqliteProjections
from jobledger.storage.sqlite.queue import SqliteQueue
from jobledger.storage.sqlite.schema import migrate as migrate_schema
from jobledger.storage.sqlite.writes import SqliteWrites

logger = logging.getLogger("jobledger.storage")


class SqliteStore(Store):
    name = "sqlite"
    #: the changes one group commit of a pod takes (`reactors.commit`; 1,000 elsewhere):
    #: a commit here re-writes every index page its rows touch, and each long step of it
    #: waits for the GIL, so fewer, larger commits drain faster; larger still (3,000)
    #: drained little more and stalled the loop longer (docs/performance.md)
    group_commit_changes = 2000
    #: loop turns a group commit waits for the workers its last commit answered
    #: (`reactors.commit`): a commit written while the loop computes waits for the GIL
    #: at each step; gathered, it runs while the loop is idle (docs/performance.md)
    group_commit_gather_turns = 8
    writes: SqliteWrites
    queue: SqliteQueue
    coordination: SqliteCoordination
    log: SqliteLog
    admin: SqliteAdmin
    retention: SqliteRetention
    projections: SqliteProjections

    def __init__(
        self,
        path: str,
        *,
        partitions: int = 64,
        offload: bool = True,
        watch_interval: float = 0.025,
        busy_timeout_ms: int = 10_000,
    ) -> None:
        """`offload`: run blocking calls on per-connection threads (keeps the event loop
        responsive, see docs/storage.md); `watch_interval`: seconds between checks for
        commits made by other processes."""
        self.path = path
        self.partitions = partitions
        self.watch_interval = watch_interval
        self.connections = connections = Connections(
            path, offload=offload, busy_timeout_ms=busy_timeout_ms
        )
        self._watcher: asyncio.Task[None] | None = None
        self._data_version = 0
        self._feed = LocalFeed(DataVersionWatch(self))
        self.writes = SqliteWrites(connections, self._feed)
        self.queue = SqliteQueue(connections)
        self.coordination = SqliteCoordination(connections, token_folder(path))
        self.log = SqliteLog(connections)
        self.admin = SqliteAdmin(connections)
        self.retention = SqliteRetention(connections)
        self.projections = SqliteProjections(connections, self._feed)

    # --- life cycle ------------------------------------------------------------------------
    async def open(self) -> None:
        connections = self.connections
        if connections.writer is not None:
            return
        writer = connections.open_writer()
        await writer.run(self._enable_wal)
        await self.migrate()
        connections.open_reader()
        self._data_version = await writer.run(self._read_data_version)

    def _enable_wal(self) -> None:
        mode = self.connections.w.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            logger.warning("sqlite %s: journal mode is %s, not wal", self.path, mode)

    async def migrate(self) -> int:
        """Apply missing schema migrations (idempotent; safe when processes race)."""
        now = iso(datetime.now(UTC))
        async with self.connections.writing() as conn:
            return await self.connections.w.run(lambda: migrate_schema(conn, now))

    async def close(self) -> None:
        await self.coordination.close()
        await self._stop_watching()
        self._feed.close()
        await self.connections.close()

    # --- the change feed ------------------------------------------------------------------------
    def feed(self) -> Subscription:
        return self._feed.subscribe()

    async def _start_watching(self) -> None:
        writer = self.connections.writer
        if self._watcher is not None or writer is None:
            return
        self._data_version = await writer.run(self._read_data_version)
        self._watcher = asyncio.create_task(self._watch(), name="jobledger-sqlite-watch")

    async def _stop_watching(self) -> None:
        await cancel_and_wait(self._watcher)
        self._watcher = None

    @staticmethod
    def _data_version_of(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def _read_data_version(self) -> int:
        return self._data_version_of(self.connections.w.conn)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.watch_interval)
            try:
                await self.check_foreign_commits()
            except sqlite3.Error:
                logger.exception("sqlite %s: data_version check failed", self.path)

    async def check_foreign_commits(self) -> bool:
        """Publish EVERYTHING if another connection (another process) committed since the
        last check; return whether it did. The watcher calls this every `watch_interval`.

        `PRAGMA data_version` on the writer connection changes only on commits made by
        other connections, so this process's own commits (already published with their
        partitions) never trigger it. Reads only; skips while a write holds the connection.
        """
        connections = self.connections
        if connections.lock.locked():
            return False
        async with connections.lock:
            version = await connections.w.run(self._read_data_version)
        if version == self._data_version:
            return False
        self._data_version = version
        self._feed.publish_everything()
        return True


class DataVersionWatch:
    """The feed's source: the `data_version` watcher, run while anyone subscribes."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def start(self) -> None:
        await self._store._start_watching()

    async def stop(self) -> None:
        await self._store._stop_watching()
