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
  only when *another* connection commits — and publishes `EVERYTHING` then.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.events import Event
from jobledger.domain.jobs import TRANSITION_FIELDS, Change, Job, Lane
from jobledger.domain.schedule_row import Schedule
from jobledger.domain.timeutil import iso
from jobledger.storage import jsontext, rows
from jobledger.storage.feed import LocalFeed, wake_of
from jobledger.storage.port import (
    JobFilter,
    LeaseGuard,
    PartitionLease,
    Store,
    Transaction,
    Wake,
    logger,
    native_handle,
    run_after_commit,
)
from jobledger.storage.sqlite_schema import migrate as migrate_schema

T = TypeVar("T")

#: columns holding JSON text
_JSON_COLUMNS = frozenset({"payload", "headers", "actor", "data"})
_JOB_COLUMNS = (*rows.JOB_FIELDS, "order_key")
_EVENT_COLUMNS = (*(f for f in rows.EVENT_FIELDS if f != "position"), "dedupe_key")
_CHUNK = 500  # bound parameters per IN (...) list


def _q(name: str) -> str:
    return f'"{name}"'


def _upsert_sql(table: str, columns: Sequence[str], key: str) -> str:
    names = ", ".join(_q(c) for c in columns)
    marks = ", ".join("?" for _ in columns)
    updates = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in columns if c != key)
    return (
        f"INSERT INTO {table} ({names}) VALUES ({marks})"
        f" ON CONFLICT ({_q(key)}) DO UPDATE SET {updates}"
    )


_UPSERT_JOB = _upsert_sql("jobs", _JOB_COLUMNS, "id")
_UPDATE_JOB = f"UPDATE jobs SET {', '.join(f'{_q(c)} = ?' for c in TRANSITION_FIELDS)} WHERE id = ?"
_UPSERT_SCHEDULE = _upsert_sql("schedules", rows.SCHEDULE_FIELDS, "code")
_INSERT_EVENT = (
    f"INSERT INTO events ({', '.join(_q(c) for c in _EVENT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in _EVENT_COLUMNS)})"
)
_JOB_COLUMNS_SQL = ", ".join(_q(c) for c in rows.JOB_FIELDS)
_JOB_SELECT = f"SELECT {_JOB_COLUMNS_SQL} FROM jobs"
_SCHEDULE_SELECT = f"SELECT {', '.join(_q(c) for c in rows.SCHEDULE_FIELDS)} FROM schedules"
_EVENT_SELECT = f"SELECT {', '.join(_q(c) for c in rows.EVENT_FIELDS)} FROM events"


# --- (de)serialisation: rows.py dicts <-> SQLite values -----------------------------------


def _dumps(value: Any) -> str | None:
    return None if value is None else jsontext.dumps(value)


def _encode(record: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    """Column values for `record`: times as ISO text (sorts as time), JSON as text."""
    values: list[Any] = []
    for name in columns:
        value = record.get(name)
        if isinstance(value, datetime):
            value = iso(value)
        elif name in _JSON_COLUMNS:
            value = _dumps(value)
        values.append(value)
    return tuple(values)


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    record = dict(zip(row.keys(), row, strict=True))
    for name in _JSON_COLUMNS.intersection(record):
        text = record[name]
        record[name] = json.loads(text) if text is not None else None
    return record


def _job(row: sqlite3.Row) -> Job:
    return rows.job_from_dict(_decode(row))


def _schedule(row: sqlite3.Row) -> Schedule:
    return rows.schedule_from_dict(_decode(row))


def _event(row: sqlite3.Row) -> Event:
    return rows.event_from_dict(_decode(row))


def _chunks(items: Sequence[T]) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


# --- one connection and the thread that drives it ------------------------------------------


class _Conn:
    def __init__(self, path: str, *, name: str, offload: bool, busy_ms: int) -> None:
        self.conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_ms / 1000
        )
        self.conn.row_factory = sqlite3.Row
        self.conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        self.conn.execute("PRAGMA synchronous = FULL")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name) if offload else None

    async def run(self, work: Callable[[], T]) -> T:
        if self._pool is None:
            return work()
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.conn.close()


# --- the store -----------------------------------------------------------------------------


class SqliteStore(Store):
    name = "sqlite"

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
        self._writer: _Conn | None = None
        self._reader: _Conn | None = None
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None
        self._staged: list[Change] = []  # applied inside the open business transaction
        self._feed = LocalFeed()
        self._watcher: asyncio.Task[None] | None = None
        self._data_version = 0

    # --- life cycle ------------------------------------------------------------------------
    async def open(self) -> None:
        if self._writer is not None:
            return
        self._writer = _Conn(
            self.path, name="jobledger-sqlite-w", offload=self.offload, busy_ms=self.busy_timeout_ms
        )
        await self._writer.run(self._enable_wal)
        await self.migrate()
        self._reader = _Conn(
            self.path, name="jobledger-sqlite-r", offload=self.offload, busy_ms=self.busy_timeout_ms
        )
        self._data_version = await self._writer.run(self._read_data_version)
        self._watcher = asyncio.create_task(self._watch(), name="jobledger-sqlite-watch")

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
        await cancel_and_wait(self._watcher)
        self._watcher = None
        self._feed.close()
        async with self._lock:
            for conn in (self._reader, self._writer):
                if conn is not None:
                    conn.close()
            self._reader = self._writer = None

    @property
    def _w(self) -> _Conn:
        if self._writer is None:
            raise RuntimeError("the SQLite store is not open")
        return self._writer

    @property
    def _r(self) -> _Conn:
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
            return await self._w.run(lambda: _in_transaction(conn, work))

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._r.conn
        return await self._r.run(lambda: work(conn))

    # --- writes ---------------------------------------------------------------------------
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        async with self._writing() as conn:
            await self._w.run(lambda: conn.execute("BEGIN IMMEDIATE"))
            tx = Transaction(conn)
            self._staged = []
            try:
                yield tx
            except BaseException:
                self._staged = []
                await self._w.run(lambda: _rollback(conn))
                raise
            try:
                await self._w.run(lambda: conn.execute("COMMIT"))
            except BaseException:
                self._staged = []
                await self._w.run(lambda: _rollback(conn))
                raise
            applied, self._staged = self._staged, []
        self._publish(applied)
        run_after_commit(tx)

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        native = native_handle(tx)
        if not isinstance(native, sqlite3.Connection):
            raise TypeError("the SQLite store takes a sqlite3.Connection (or its Transaction)")
        if not changes:
            return []
        cursor = native.cursor()
        cursor.row_factory = None  # the caller's connection may have its own row factory
        if not native.in_transaction:
            if native.isolation_level is None:
                raise InvalidArgument(
                    "append_in needs a connection inside a transaction (BEGIN first)"
                )
            cursor.execute("BEGIN")  # what the sqlite3 module does before any DML
        keys = [c.dedupe_key for c in changes if c.is_new and c.dedupe_key]
        seen = _seen_keys(cursor, keys)
        flags: list[bool] = []
        for change in changes:
            key = change.dedupe_key if change.is_new else None
            if key is not None and key in seen:
                flags.append(False)
                continue
            ok = _apply_change(cursor, change)
            if ok and key is not None:
                seen.add(key)
            flags.append(ok)
        if native is self._w.conn and self._owner is not None:
            self._staged.extend(c for c, ok in zip(changes, flags, strict=True) if ok)
        return flags

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        if not changes:
            return []

        def work(conn: sqlite3.Connection) -> list[bool]:
            cursor = conn.cursor()
            held = _held_partitions(cursor, guard) if guard is not None else None
            flags = []
            for change in changes:
                if (
                    held is not None
                    and change.partition is not None
                    and change.partition not in held
                ):
                    flags.append(False)
                    continue
                flags.append(_apply_change(cursor, change))
            return flags

        flags = await self._write(work)
        self._publish([c for c, ok in zip(changes, flags, strict=True) if ok])
        return flags

    def _publish(self, applied: Sequence[Change]) -> None:
        wake = wake_of(applied)
        if wake is not None:
            self._feed.publish(wake)

    # --- the queue ---------------------------------------------------------------------------
    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        sql = (
            f"{_JOB_SELECT} INDEXED BY jobs_fast_pending"
            " WHERE status = 'PENDING' AND lane = 'fast' AND \"partition\" = ?"
            + (" AND order_key > ?" if after_key is not None else "")
            + " ORDER BY order_key, version, id LIMIT ?"
        )
        params: tuple[Any, ...] = (
            (partition, after_key, limit) if after_key is not None else (partition, limit)
        )
        return await self._read(lambda c: [_job(r) for r in c.execute(sql, params)])

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        at = iso(now)
        sql = (
            f"SELECT * FROM (SELECT {_JOB_COLUMNS_SQL} FROM jobs INDEXED BY jobs_long_pending"
            " WHERE status = 'PENDING' AND lane = 'long' AND next_run_at <= ?"
            " ORDER BY next_run_at, id LIMIT ?)"
            f" UNION ALL SELECT * FROM (SELECT {_JOB_COLUMNS_SQL} FROM jobs"
            " INDEXED BY jobs_running_lease WHERE status = 'RUNNING' AND lane = 'long'"
            " AND lease_until <= ? ORDER BY next_run_at, id LIMIT ?)"
            " ORDER BY next_run_at, id LIMIT ?"
        )
        params = (at, limit, at, limit, limit)
        return await self._read(lambda c: [_job(r) for r in c.execute(sql, params)])

    async def running_codes(self, now: datetime) -> set[str]:
        sql = (
            "SELECT running_code FROM jobs INDEXED BY jobs_running_code WHERE status = 'RUNNING'"
            " AND running_code IS NOT NULL AND lease_until > ?"
        )
        return await self._read(lambda c: {r[0] for r in c.execute(sql, (iso(now),))})

    async def inflight(self, partition: int) -> list[Job]:
        sql = (
            f"{_JOB_SELECT} INDEXED BY jobs_inflight"
            ' WHERE inflight_token IS NOT NULL AND "partition" = ?'
            " AND lane = 'fast' ORDER BY id"
        )
        return await self._read(lambda c: [_job(r) for r in c.execute(sql, (partition,))])

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

    # --- coordination -------------------------------------------------------------------------
    async def seed_partitions(self, count: int) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                'INSERT OR IGNORE INTO partitions ("partition") VALUES (?)',
                ((p,) for p in range(count)),
            )

        await self._write(work)

    async def heartbeat(self, pod: str, now: datetime) -> None:
        sql = (
            "INSERT INTO workers (pod, heartbeat_at) VALUES (?, ?)"
            " ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        )
        await self._write(lambda c: c.execute(sql, (pod, iso(now))))

    async def remove_worker(self, pod: str) -> None:
        await self._write(lambda c: c.execute("DELETE FROM workers WHERE pod = ?", (pod,)))

    async def live_workers(self, since: datetime) -> list[str]:
        sql = "SELECT pod FROM workers WHERE heartbeat_at > ? ORDER BY pod"
        return await self._read(lambda c: [r[0] for r in c.execute(sql, (iso(since),))])

    async def leases(self) -> list[PartitionLease]:
        sql = 'SELECT "partition", owner, lease_until FROM partitions ORDER BY "partition"'
        return await self._read(
            lambda c: [PartitionLease(r[0], r[1], rows.as_utc(r[2])) for r in c.execute(sql)]
        )

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        sql = (
            'UPDATE partitions SET owner = ?, lease_until = ? WHERE "partition" = ?'
            " AND (owner IS NULL OR owner = ? OR lease_until <= ?)"
        )
        params = (pod, iso(until), partition, pod, iso(now))
        return await self._write(lambda c: c.execute(sql, params).rowcount == 1)

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        wanted = list(dict.fromkeys(partitions))

        def work(conn: sqlite3.Connection) -> set[int]:
            held: set[int] = set()
            for chunk in _chunks(wanted):
                sql = (
                    "UPDATE partitions SET lease_until = ? WHERE owner = ? AND lease_until > ?"
                    f' AND "partition" IN ({", ".join("?" for _ in chunk)}) RETURNING "partition"'
                )
                held.update(r[0] for r in conn.execute(sql, (iso(until), pod, iso(now), *chunk)))
            return held

        held = await self._write(work) if wanted else set()
        return [p for p in partitions if p in held]

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        wanted = list(dict.fromkeys(partitions))

        def work(conn: sqlite3.Connection) -> None:
            for chunk in _chunks(wanted):
                conn.execute(
                    "UPDATE partitions SET owner = NULL, lease_until = NULL WHERE owner = ?"
                    f' AND "partition" IN ({", ".join("?" for _ in chunk)})',
                    (pod, *chunk),
                )

        if wanted:
            await self._write(work)

    # --- read models ----------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        def work(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(f"{_JOB_SELECT} WHERE id = ?", (job_id,)).fetchone()
            return _job(row) if row is not None else None

        return await self._read(work)

    async def list_jobs(
        self,
        flt: JobFilter,
        *,
        offset: int,
        limit: int,
        before: str | None = None,
        after: str | None = None,
        count_limit: int | None = None,
    ) -> tuple[list[Job], int]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("status", flt.status),
            ("target", flt.target),
            ("code", flt.code),
            ("key", flt.key),
        ):
            if value is not None:
                where.append(f"{_q(column)} = ?")
                params.append(str(value))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        cursor = [(c, v) for c, v in (("id < ?", before), ("id > ?", after)) if v is not None]
        page_where = " AND ".join([*where, *(c for c, _ in cursor)])
        page_sql = (
            f"{_JOB_SELECT}{' WHERE ' + page_where if page_where else ''}"
            f" ORDER BY id {'ASC' if after is not None else 'DESC'} LIMIT ? OFFSET ?"
        )
        page_params = [*params, *(v for _, v in cursor), limit, offset]
        if count_limit is None:
            count_sql, count_params = f"SELECT count(*) FROM jobs{clause}", params
        else:
            count_sql = f"SELECT count(*) FROM (SELECT 1 FROM jobs{clause} LIMIT ?)"
            count_params = [*params, count_limit]

        def work(conn: sqlite3.Connection) -> tuple[list[Job], int]:
            conn.execute("BEGIN")  # one snapshot for the page and the total
            try:
                page = [_job(r) for r in conn.execute(page_sql, page_params)]
                total = conn.execute(count_sql, count_params).fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return page, int(total)

        return await self._read(work)

    async def all_jobs(self) -> list[Job]:
        return await self._read(
            lambda c: [_job(r) for r in c.execute(f"{_JOB_SELECT} ORDER BY id")]
        )

    async def get_schedule(self, code: str) -> Schedule | None:
        def work(conn: sqlite3.Connection) -> Schedule | None:
            row = conn.execute(f"{_SCHEDULE_SELECT} WHERE code = ?", (code,)).fetchone()
            return _schedule(row) if row is not None else None

        return await self._read(work)

    async def list_schedules(self) -> list[Schedule]:
        return await self._read(
            lambda c: [_schedule(r) for r in c.execute(f"{_SCHEDULE_SELECT} ORDER BY code")]
        )

    # --- the log ------------------------------------------------------------------------------
    async def read_stream(self, stream: str) -> list[Event]:
        sql = f"{_EVENT_SELECT} WHERE stream = ? ORDER BY version"
        return await self._read(lambda c: [_event(r) for r in c.execute(sql, (stream,))])

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))

        def work(conn: sqlite3.Connection) -> list[Event]:
            found: list[Event] = []
            for start in range(0, len(places), 400):
                chunk = places[start : start + 400]
                values = ", ".join("(?, ?)" for _ in chunk)
                sql = f"{_EVENT_SELECT} WHERE (stream, version) IN (VALUES {values})"
                flat = [item for place in chunk for item in place]
                found.extend(_event(r) for r in conn.execute(sql, flat))
            return found

        return await self._read(work)

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        # one writer at a time: a position is only ever handed out after every smaller
        # one has committed, so "greater than the last seen" never skips a late commit
        sql = f"{_EVENT_SELECT} WHERE position > ? ORDER BY position LIMIT ?"
        return await self._read(lambda c: [_event(r) for r in c.execute(sql, (after, limit))])

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        sql = (
            "SELECT stream FROM events WHERE stream LIKE 'job:%' GROUP BY stream"
            " HAVING max(at) < ? AND NOT EXISTS"
            " (SELECT 1 FROM jobs WHERE jobs.id = substr(stream, 5)) LIMIT ?"
        )
        return await self._read(lambda c: [r[0] for r in c.execute(sql, (iso(before), limit))])

    async def delete_streams(self, streams: Sequence[str]) -> int:
        def work(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            conn.executemany("DELETE FROM events WHERE stream = ?", [(s,) for s in streams])
            return conn.total_changes - before

        return await self._write(work) if streams else 0

    # --- checkpoints ----------------------------------------------------------------------------
    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        def work(conn: sqlite3.Connection) -> tuple[int, Any]:
            row = conn.execute(
                "SELECT position, state FROM checkpoints WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                return 0, None
            return int(row[0]), json.loads(row[1]) if row[1] is not None else None

        return await self._read(work)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        sql = (
            "INSERT INTO checkpoints (name, position, state) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
            " state = excluded.state"
        )
        text = _dumps(state)
        await self._write(lambda c: c.execute(sql, (name, position, text)))

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        job_values = [_encode(rows.job_to_dict(j), _JOB_COLUMNS) for j in jobs]
        schedule_values = [
            _encode(rows.schedule_to_dict(s), rows.SCHEDULE_FIELDS) for s in schedules
        ]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM jobs")
            conn.execute("DELETE FROM schedules")
            conn.executemany(_UPSERT_JOB, job_values)
            conn.executemany(_UPSERT_SCHEDULE, schedule_values)

        await self._write(work)
        self._feed.publish_everything()

    # --- the change feed ------------------------------------------------------------------------
    def feed(self) -> AsyncIterator[Wake]:
        return self._feed.subscribe()

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


# --- the write path shared by apply() and append_in() ---------------------------------------


def _in_transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
    except BaseException:
        _rollback(conn)
        raise
    conn.execute("COMMIT")
    return result


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _held_partitions(cursor: sqlite3.Cursor, guard: LeaseGuard) -> set[int]:
    sql = 'SELECT "partition" FROM partitions WHERE owner = ? AND lease_until > ?'
    return {r[0] for r in cursor.execute(sql, (guard.pod, iso(guard.now)))}


def _seen_keys(cursor: sqlite3.Cursor, keys: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    for chunk in _chunks(keys):
        sql = f"SELECT dedupe_key FROM events WHERE dedupe_key IN ({', '.join('?' for _ in chunk)})"
        seen.update(r[0] for r in cursor.execute(sql, tuple(chunk)))
    return seen


def _stream_version(cursor: sqlite3.Cursor, stream: str) -> int:
    """The stream's current version: its row's, or — once the row left the read model
    (a finished job) — its last event's."""
    kind, _, ident = stream.partition(":")
    if kind == "job":
        row = cursor.execute("SELECT stream_version FROM jobs WHERE id = ?", (ident,)).fetchone()
    else:
        row = cursor.execute(
            "SELECT stream_version FROM schedules WHERE code = ?", (ident,)
        ).fetchone()
    if row is not None:
        return int(row[0])
    last = cursor.execute("SELECT max(version) FROM events WHERE stream = ?", (stream,)).fetchone()
    return int(last[0] or 0)


def _apply_change(cursor: sqlite3.Cursor, change: Change) -> bool:
    """Apply one change inside the open transaction, or leave no trace and return False.

    Compare-and-set on the stream's version, the dedupe key for a new job, then the
    writes in a savepoint: a unique index that still objects (running_code among RUNNING
    rows, a racing dedupe key) rolls back this change alone, never the transaction.
    """
    if _stream_version(cursor, change.stream) != change.expected_version:
        return False
    if change.is_new and change.dedupe_key and _seen_keys(cursor, [change.dedupe_key]):
        return False
    cursor.execute("SAVEPOINT jobledger_change")
    try:
        _write_change(cursor, change)
    except sqlite3.IntegrityError:
        cursor.execute("ROLLBACK TO jobledger_change")
        cursor.execute("RELEASE jobledger_change")
        return False
    cursor.execute("RELEASE jobledger_change")
    return True


def _write_change(cursor: sqlite3.Cursor, change: Change) -> None:
    cursor.executemany(
        _INSERT_EVENT,
        [
            _encode({**rows.event_to_dict(e), "dedupe_key": rows.dedupe_key_of(e)}, _EVENT_COLUMNS)
            for e in change.events
        ],
    )
    kind, _, ident = change.stream.partition(":")
    row = change.row
    if kind == "job":
        if row is None:
            cursor.execute("DELETE FROM jobs WHERE id = ?", (ident,))
            return
        if not change.is_new:  # an update writes only what a transition can change (D12)
            record = rows.job_transition_dict(row)
            cursor.execute(_UPDATE_JOB, (*_encode(record, TRANSITION_FIELDS), ident))
            if cursor.rowcount == 1:
                return
        cursor.execute(_UPSERT_JOB, _encode(rows.job_to_dict(row), _JOB_COLUMNS))
    elif row is None:
        cursor.execute("DELETE FROM schedules WHERE code = ?", (ident,))
    else:
        cursor.execute(_UPSERT_SCHEDULE, _encode(rows.schedule_to_dict(row), rows.SCHEDULE_FIELDS))
