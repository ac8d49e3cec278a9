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

The store is put together from its parts: the connections and the write lock
(`base.py`), the write path (`writes.py`), the coordination rows (`coordination.py`),
the read models, the log and checkpoints (`read_models.py`); this module keeps its life
cycle, the lanes' queue reads and the change feed.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import Change, Job, Lane
from jobledger.domain.timeutil import iso
from jobledger.storage import rows
from jobledger.storage.feed import LocalFeed, Subscription
from jobledger.storage.jsontext import loads as load_json
from jobledger.storage.port import Store
from jobledger.storage.sqlite.base import Conn
from jobledger.storage.sqlite.coordination import Coordination
from jobledger.storage.sqlite.encode import decode_job
from jobledger.storage.sqlite.read_models import ReadModels
from jobledger.storage.sqlite.schema import migrate as migrate_schema
from jobledger.storage.sqlite.statements import JOB_COLUMNS_SQL, JOB_SELECT, job_array_sql
from jobledger.storage.sqlite.writes import WritePath

logger = logging.getLogger("jobledger.storage")


class SqliteStore(WritePath, Coordination, ReadModels, Store):
    name = "sqlite"
    #: the changes one group commit of a pod takes (`reactors.commit`; 1,000 elsewhere):
    #: a commit here re-writes every index page its rows touch, and each long step of it
    #: waits for the GIL, so fewer, larger commits drain faster; larger still (3,000)
    #: drained little more and stalled the loop longer (docs/performance.md)
    group_commit_changes = 2000

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
        self.offload = offload
        self.watch_interval = watch_interval
        self.busy_timeout_ms = busy_timeout_ms
        self._writer: Conn | None = None
        self._reader: Conn | None = None
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None
        self._staged: list[Change] = []  # applied inside the open business transaction
        self._watcher: asyncio.Task[None] | None = None
        self._data_version = 0
        self._feed = LocalFeed(DataVersionWatch(self))

    # --- life cycle ------------------------------------------------------------------------
    async def open(self) -> None:
        if self._writer is not None:
            return
        self._writer = Conn(
            self.path,
            name="jobledger-sqlite-w",
            offload=self.offload,
            busy_ms=self.busy_timeout_ms,
            writer=True,
        )
        await self._writer.run(self._enable_wal)
        await self.migrate()
        self._reader = Conn(
            self.path, name="jobledger-sqlite-r", offload=self.offload, busy_ms=self.busy_timeout_ms
        )
        self._data_version = await self._writer.run(self._read_data_version)

    def _enable_wal(self) -> None:
        mode = self._w.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            logger.warning("sqlite %s: journal mode is %s, not wal", self.path, mode)

    async def migrate(self) -> int:
        """Apply missing schema migrations (idempotent; safe when processes race)."""
        now = iso(datetime.now(UTC))
        async with self._writing():
            return await self._w.run(lambda: migrate_schema(self._w.conn, now))

    async def close(self) -> None:
        await self._stop_watching()
        self._feed.close()
        async with self._lock:
            for conn in (self._reader, self._writer):
                if conn is not None:
                    conn.close()
            self._reader = self._writer = None

    # --- the queue ---------------------------------------------------------------------------
    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        sql = (
            f"{JOB_SELECT} INDEXED BY jobs_fast_pending"
            " WHERE status = 'PENDING' AND lane = 'fast' AND \"partition\" = ?"
            + (" AND order_key > ?" if after_key is not None else "")
            + " ORDER BY order_key, version, id LIMIT ?"
        )
        params: tuple[Any, ...] = (
            (partition, after_key, limit) if after_key is not None else (partition, limit)
        )
        page = await self._job_rows(sql, params)
        # the order the aggregate kept (SQLite feeds it the subquery's rows in order);
        # sorting an already sorted page is one pass
        page.sort(key=lambda j: (j.order_key, j.version, j.id))
        return page

    async def _job_rows(self, sql: str, params: Sequence[Any]) -> list[Job]:
        """The jobs a `JOB_SELECT` statement finds, read as one JSON array: one step of
        the SQLite engine, where a fetch takes one per row and each gives the reader
        thread's GIL back and waits for its next turn while the event loop runs; the
        rows are decoded here, on the loop thread."""
        text = await self._read(lambda c: c.execute(job_array_sql(sql), params).fetchone()[0])
        return [decode_job(r) for r in load_json(text)]

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        at = iso(now)
        sql = (
            f"SELECT * FROM (SELECT {JOB_COLUMNS_SQL} FROM jobs INDEXED BY jobs_long_pending"
            " WHERE status = 'PENDING' AND lane = 'long' AND next_run_at <= ?"
            " ORDER BY next_run_at, id LIMIT ?)"
            f" UNION ALL SELECT * FROM (SELECT {JOB_COLUMNS_SQL} FROM jobs"
            " INDEXED BY jobs_running_lease WHERE status = 'RUNNING' AND lane = 'long'"
            " AND lease_until <= ? ORDER BY next_run_at, id LIMIT ?)"
            " ORDER BY next_run_at, id LIMIT ?"
        )
        params = (at, limit, at, limit, limit)
        return await self._read(lambda c: [decode_job(r) for r in c.execute(sql, params)])

    async def running_codes(self, now: datetime) -> set[str]:
        sql = (
            "SELECT running_code FROM jobs INDEXED BY jobs_running_code WHERE status = 'RUNNING'"
            " AND running_code IS NOT NULL AND lease_until > ?"
        )
        return await self._read(lambda c: {r[0] for r in c.execute(sql, (iso(now),))})

    async def inflight(self, partition: int) -> list[Job]:
        sql = (
            f"{JOB_SELECT} INDEXED BY jobs_inflight"
            ' WHERE inflight_token IS NOT NULL AND "partition" = ?'
            " AND lane = 'fast' ORDER BY id"
        )
        return await self._read(lambda c: [decode_job(r) for r in c.execute(sql, (partition,))])

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        def work(conn: sqlite3.Connection) -> datetime | None:
            if lane == Lane.LONG:
                found = [
                    conn.execute(
                        "SELECT min(next_run_at) FROM jobs INDEXED BY jobs_long_pending"
                        " WHERE status = 'PENDING' AND lane = 'long'"
                    ).fetchone()[0]
                ]
            else:
                # one index seek per partition (jobs_fast_due), not a scan of the backlog
                found = [
                    conn.execute(
                        "SELECT min(next_run_at) FROM jobs INDEXED BY jobs_fast_due"
                        " WHERE status = 'PENDING'"
                        " AND lane = 'fast' AND \"partition\" = ?",
                        (p,),
                    ).fetchone()[0]
                    for p in sorted(set(partitions))
                ]
            times = [t for t in found if t is not None]
            return rows.as_utc(min(times)) if times else None

        return await self._read(work)

    # --- the change feed ------------------------------------------------------------------------
    def feed(self) -> Subscription:
        return self._feed.subscribe()

    async def _start_watching(self) -> None:
        if self._watcher is not None or self._writer is None:
            return
        self._data_version = await self._writer.run(self._read_data_version)
        self._watcher = asyncio.create_task(self._watch(), name="jobledger-sqlite-watch")

    async def _stop_watching(self) -> None:
        await cancel_and_wait(self._watcher)
        self._watcher = None

    @staticmethod
    def _data_version_of(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def _read_data_version(self) -> int:
        return self._data_version_of(self._w.conn)

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
        if self._lock.locked():
            return False
        async with self._lock:
            version = await self._w.run(self._read_data_version)
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
