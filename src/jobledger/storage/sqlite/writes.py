"""The write path of the SQLite store: business transactions, `append_in` and `apply`,
the per-change compare-and-set they share, and `next_version`'s counter. The module's
functions take a connection or cursor, so the sync enqueue path (`integrations.sync`)
runs the very code `append_in` runs on a caller's own `sqlite3` connection."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import orjson

from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.jobs import TRANSITION_FIELDS, Change
from jobledger.domain.timeutil import iso
from jobledger.storage import rows
from jobledger.storage.feed import LocalFeed, wake_of
from jobledger.storage.jsontext import loads as load_json
from jobledger.storage.port import LeaseGuard, Transaction, Writes, native_handle, run_after_commit
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections, rollback
from jobledger.storage.sqlite.encode import chunks, encode, encode_event
from jobledger.storage.transaction import caller_hint

A = TypeVar("A")
T = TypeVar("T")


def _callers(tx: Any) -> sqlite3.Connection:
    """The caller's connection: `tx` itself or the native handle of a `Transaction`."""
    native = native_handle(tx)
    if not isinstance(native, sqlite3.Connection):
        raise TypeError(
            f"the SQLite store takes a sqlite3.Connection (or its Transaction){caller_hint(native)}"
        )
    return native


def _is_writer(connections: Connections, conn: sqlite3.Connection) -> bool:
    """Whether `conn` is the store's own writer connection (its `transaction()`'s)."""
    writer = connections.writer
    return writer is not None and conn is writer.conn


def check_reaches(conn: sqlite3.Connection, path: str) -> None:
    """Refuse, before any statement of the enqueue runs, a caller's connection on which
    the job would not commit with the caller's rows: one to another database file than
    the store's (ConfigError), or one in autocommit mode (InvalidArgument: Python 3.12's
    `autocommit=True`, whose `commit()` commits nothing; `isolation_level=None` outside a
    transaction is `append_on`'s to refuse, as it may be inside one)."""
    cursor = conn.cursor()
    cursor.row_factory = None  # the caller's connection may have its own row factory
    main = next(row[2] for row in cursor.execute("PRAGMA database_list") if row[1] == "main")
    if not main or os.path.realpath(main) != os.path.realpath(path):
        raise ConfigError(
            f"this connection is to {main or 'an in-memory database'!r}, the store's file is"
            f" {path!r}: a job commits with your rows only in the same database"
        )
    if getattr(conn, "autocommit", None) is True:
        raise InvalidArgument(_NOT_IN_TRANSACTION)


def no_tables(path: str, exc: sqlite3.OperationalError) -> Exception:
    """The error for `exc`, raised by a write on a caller's connection: ConfigError naming
    the cure when the store's tables are missing, else `exc` itself."""
    if "no such table" not in str(exc):
        return exc
    return ConfigError(
        f"{path} has no jobledger tables: run `jobledger migrate` (or `await app.start()`)"
        " against it"
    )


def write_migrated(
    path: str, write: Callable[[sqlite3.Connection, A], T], conn: sqlite3.Connection, argument: A
) -> T:
    """`write(conn, argument)` on a caller's own connection; missing tables are a
    ConfigError naming the cure (`no_tables`)."""
    try:
        return write(conn, argument)
    except sqlite3.OperationalError as exc:
        raise no_tables(path, exc) from exc


_NOT_IN_TRANSACTION = (
    "enqueue needs a connection inside a transaction, not autocommit: BEGIN first (or a"
    " connection in the sqlite3 module's default mode)"
)


class SqliteWrites(Writes):
    def __init__(self, connections: Connections, feed: LocalFeed) -> None:
        self.connections = connections
        self._feed = feed
        self._staged: list[Change] = []  # applied inside the open business transaction

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        connections = self.connections
        async with connections.writing() as conn:
            writer = connections.w
            await writer.run(lambda: conn.execute("BEGIN IMMEDIATE"))
            tx = Transaction(conn)
            self._staged = []
            try:
                yield tx
            except BaseException:
                self._staged = []
                await writer.run(lambda: rollback(conn))
                raise
            try:
                await writer.run(lambda: conn.execute("COMMIT"))
            except BaseException:
                self._staged = []
                await writer.run(lambda: rollback(conn))
                raise
            applied, self._staged = self._staged, []
        self._publish(applied)
        run_after_commit(tx)

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        native = _callers(tx)
        connections = self.connections
        if _is_writer(connections, native):
            flags = append_on(native, changes)
            if connections.owner is not None:
                self._staged.extend(c for c, ok in zip(changes, flags, strict=True) if ok)
            return flags
        return self._on_callers(native, append_on, changes)

    async def next_version(self, tx: Any, key: str) -> int:
        native = _callers(tx)
        if _is_writer(self.connections, native):
            return next_version_on(native, key)
        return self._on_callers(native, next_version_on, key)

    def _on_callers(
        self, conn: sqlite3.Connection, write: Callable[[sqlite3.Connection, A], T], argument: A
    ) -> T:
        """`write(conn, argument)` on a caller's own connection, once `check_reaches`
        passed it; missing tables are a ConfigError naming the cure."""
        check_reaches(conn, self.connections.path)
        return write_migrated(self.connections.path, write, conn, argument)

    async def dedupe_holders(self, tx: Any, keys: Sequence[str]) -> dict[str, str]:
        cursor = native_handle(tx).cursor()
        cursor.row_factory = None
        return dedupe_holders_on(cursor, keys)

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        if not changes:
            return []

        def work(conn: sqlite3.Connection) -> list[bool]:
            cursor = conn.cursor()
            held = held_partitions(cursor, guard) if guard is not None else None
            flags = [False] * len(changes)
            group: dict[str, int] = {}  # job id -> index: a run of updates, one per stream
            for index, change in enumerate(changes):
                if (
                    held is not None
                    and change.partition is not None
                    and change.partition not in held
                ):
                    continue
                job_id = _batched_job(change)
                if job_id is not None and job_id not in group:
                    group[job_id] = index
                    continue
                apply_group(cursor, changes, group, flags)
                group = {}
                if job_id is not None:
                    group[job_id] = index
                else:
                    flags[index] = apply_change(cursor, change)
            apply_group(cursor, changes, group, flags)
            return flags

        flags = await self.connections.write(work)
        self._publish([c for c, ok in zip(changes, flags, strict=True) if ok])
        return flags

    def _publish(self, applied: Sequence[Change]) -> None:
        wake = wake_of(applied)
        if wake is not None:
            self._feed.publish(wake)


# --- the write path shared by apply() and append_in() ---------------------------------------


def held_partitions(cursor: sqlite3.Cursor, guard: LeaseGuard) -> set[int]:
    """The partitions `guard.pod` holds, read in one step (a row each would be a step
    each: see `_write_group`)."""
    text = cursor.execute(sql.HELD_PARTITIONS, (guard.pod, iso(guard.now))).fetchone()[0]
    return set(cast(list[int], load_json(text)))


def append_on(native: sqlite3.Connection, changes: Sequence[Change]) -> list[bool]:
    """`append_in` on a caller's connection (sync: the sync enqueue path calls it too).

    In the module's default mode (implicit transactions) this opens the transaction the
    first INSERT would have opened, as `BEGIN IMMEDIATE`: its first statements read (the
    dedupe keys), and a deferred transaction that reads before it writes fails at once
    with "database is locked" when another connection commits in between (WAL: its
    snapshot is stale), where IMMEDIATE waits for the write lock (`busy_timeout`). A
    connection in autocommit mode outside a transaction is refused, since a savepoint
    there would commit by itself.
    """
    if not changes:
        return []
    cursor = native.cursor()
    cursor.row_factory = None  # the caller's connection may have its own row factory
    if not native.in_transaction:
        if native.isolation_level is None:
            raise InvalidArgument(_NOT_IN_TRANSACTION)
        cursor.execute("BEGIN IMMEDIATE")
    keys = [c.dedupe_key for c in changes if c.is_new and c.dedupe_key]
    seen = seen_keys(cursor, keys)
    flags: list[bool] = []
    for change in changes:
        key = change.dedupe_key if change.is_new else None
        if key is not None and key in seen:
            flags.append(False)
            continue
        ok = apply_change(cursor, change)
        if ok and key is not None:
            seen.add(key)
        flags.append(ok)
    return flags


def dedupe_holders_on(cursor: sqlite3.Cursor, keys: Sequence[str]) -> dict[str, str]:
    """The job id holding each of `keys` in the log (keys nobody holds left out)."""
    held: dict[str, str] = {}
    for chunk in chunks(keys):
        found = cursor.execute(sql.dedupe_holders_sql(len(chunk)), tuple(chunk))
        held.update((k, s.removeprefix("job:")) for k, s in found)
    return held


def seen_keys(cursor: sqlite3.Cursor, keys: Sequence[str]) -> set[str]:
    return set(dedupe_holders_on(cursor, keys))


def stream_version(cursor: sqlite3.Cursor, stream: str) -> int:
    """The stream's current version: its row's, or — once the row left the read model
    (a finished job) — its last event's."""
    kind, _, ident = stream.partition(":")
    query = sql.JOB_STREAM_VERSION if kind == "job" else sql.SCHEDULE_STREAM_VERSION
    row = cursor.execute(query, (ident,)).fetchone()
    if row is not None:
        return int(row[0])
    last = cursor.execute(sql.LAST_VERSION, (stream,)).fetchone()
    return int(last[0] or 0)


def apply_change(cursor: sqlite3.Cursor, change: Change) -> bool:
    """Apply one change inside the open transaction, or leave no trace and return False.

    Compare-and-set on the stream's version, the dedupe key for a new job, then the
    writes in a savepoint: a unique index that still objects (running_code among RUNNING
    rows, a racing dedupe key) rolls back this change alone, never the transaction. Any
    other error rolls the change back too before it propagates: on a caller's connection
    the caller may catch it and commit, and must not commit half a change (an event
    without its job row).
    """
    if stream_version(cursor, change.stream) != change.expected_version:
        return False
    if change.is_new and change.dedupe_key and seen_keys(cursor, [change.dedupe_key]):
        return False
    cursor.execute("SAVEPOINT jobledger_change")
    try:
        write_change(cursor, change)
    except BaseException as exc:
        cursor.execute("ROLLBACK TO jobledger_change")
        cursor.execute("RELEASE jobledger_change")
        if isinstance(exc, sqlite3.IntegrityError):
            return False
        raise
    cursor.execute("RELEASE jobledger_change")
    return True


def write_change(cursor: sqlite3.Cursor, change: Change) -> None:
    cursor.executemany(sql.INSERT_EVENT, [encode_event(e) for e in change.events])
    kind, _, ident = change.stream.partition(":")
    row = change.row
    if kind == "job":
        if row is None:
            cursor.execute(sql.DELETE_JOB, (ident,))
            return
        if not change.is_new:  # an update writes only what a transition can change (D12)
            record = rows.job_transition_dict(row)
            cursor.execute(sql.UPDATE_JOB, (*encode(record, TRANSITION_FIELDS), ident))
            if cursor.rowcount == 1:
                return
        cursor.execute(sql.UPSERT_JOB, encode(rows.job_to_dict(row), sql.JOB_COLUMNS))
    elif row is None:
        cursor.execute(sql.DELETE_SCHEDULE, (ident,))
    else:
        cursor.execute(
            sql.UPSERT_SCHEDULE, encode(rows.schedule_to_dict(row), rows.SCHEDULE_FIELDS)
        )


# --- outcome batches: the lanes' group commits, set-based --------------------------------


def _batched_job(change: Change) -> str | None:
    """The job id of a change `apply_group` can take (a transition of an open job's row),
    else None (new jobs, schedules and closed streams take `apply_change`)."""
    if change.is_new or change.closed_stream or not change.stream.startswith("job:"):
        return None
    return change.stream[4:]


def apply_group(
    cursor: sqlite3.Cursor, changes: Sequence[Change], group: dict[str, int], flags: list[bool]
) -> None:
    """Apply the changes at `group`'s indexes (one per job stream) as `apply_change` would
    one by one, with a statement per kind of write instead of five per change.

    The compare-and-set reads every row's version in one statement (a change whose row
    is gone goes to `apply_change`, which also looks at the log). The writes share one
    savepoint; if a unique index objects, it is rolled back and the same changes are
    applied one by one, so exactly the one that conflicts loses, as before.
    """
    if not group:
        return
    versions = _versions(cursor, list(group))
    accepted: list[int] = []
    for job_id, index in group.items():
        version = versions.get(job_id)
        if version is None:
            flags[index] = apply_change(cursor, changes[index])
        elif version == changes[index].expected_version:
            accepted.append(index)
    if not accepted:
        return
    cursor.execute("SAVEPOINT jobledger_batch")
    try:
        _write_group(cursor, [changes[i] for i in accepted])
    except sqlite3.IntegrityError:
        cursor.execute("ROLLBACK TO jobledger_batch")
        cursor.execute("RELEASE jobledger_batch")
        for index in accepted:
            flags[index] = apply_change(cursor, changes[index])
        return
    cursor.execute("RELEASE jobledger_batch")
    for index in accepted:
        flags[index] = True


def _versions(cursor: sqlite3.Cursor, ids: list[str]) -> dict[str, int]:
    """The `stream_version` of each row of `ids` still there, read in one step."""
    text = json_array(ids)
    if text is not None:
        found = cursor.execute(sql.JOB_VERSIONS_JSON, (text,)).fetchone()[0]
        return cast(dict[str, int], load_json(found))
    versions: dict[str, int] = {}
    for chunk in chunks(ids):
        versions.update(cursor.execute(sql.job_versions_sql(len(chunk)), chunk).fetchall())
    return versions


def json_array(values: Sequence[Any]) -> str | None:
    """`values` as one JSON array for the `*_JSON` statements, or None when JSON would
    not carry them exactly (what orjson refuses — integers past 64 bits, lone
    surrogates — and text holding NUL): the caller then binds them one by one."""
    try:
        data = orjson.dumps(values)
    except orjson.JSONEncodeError:
        return None
    return None if b"\\u0000" in data else data.decode()


def _write_group(cursor: sqlite3.Cursor, group: Sequence[Change]) -> None:
    """One statement per kind of write, whatever the batch size: the rows go in as one
    JSON array (`sql.INSERT_EVENTS_JSON` and its siblings). A statement is one step
    of the SQLite engine, and every step gives the GIL back and takes it again, which on
    a busy event loop makes the writer thread wait for its next turn (up to the 5 ms
    switch interval) each time; `executemany` would take one a row, multi-row VALUES
    one per 100 rows. Values JSON cannot carry exactly go the multi-row way."""
    events = [encode_event(e) for c in group for e in c.events]
    gone = [c.stream[4:] for c in group if c.row is None]
    kept = [
        (c.stream[4:], *encode(rows.job_transition_dict(c.row), TRANSITION_FIELDS))
        for c in group
        if c.row is not None
    ]
    texts = [json_array(part) if part else "[]" for part in (events, gone, kept)]
    if None in texts:
        _write_group_rows(cursor, events, gone, kept)
        return
    events_text, gone_text, kept_text = texts
    cursor.execute(sql.INSERT_EVENTS_JSON, (events_text,))
    if gone:
        cursor.execute(sql.DELETE_JOBS_JSON, (gone_text,))
    if kept:  # every row is there: its version was just read in this transaction
        cursor.execute(sql.UPDATE_JOBS_JSON, (kept_text,))


def _write_group_rows(
    cursor: sqlite3.Cursor,
    events: Sequence[tuple[Any, ...]],
    gone: Sequence[str],
    kept: Sequence[tuple[Any, ...]],
) -> None:
    """`_write_group` with bound parameters: multi-row statements of
    `sql.ROWS_PER_STATEMENT`."""
    step = sql.ROWS_PER_STATEMENT
    for start in range(0, len(events), step):
        chunk = events[start : start + step]
        cursor.execute(sql.insert_events_sql(len(chunk)), [v for row in chunk for v in row])
    for ids in chunks(gone):
        cursor.execute(sql.delete_jobs_sql(len(ids)), ids)
    for start in range(0, len(kept), step):
        chunk = kept[start : start + step]
        cursor.execute(sql.update_jobs_sql(len(chunk)), [v for row in chunk for v in row])


def next_version_on(conn: sqlite3.Connection, key: str) -> int:
    """The key's next number on `conn` (a sync caller's connection or the store's own):
    its row in `counters` counted up inside the open transaction (SQLite has one writer:
    a second transaction begins only once this one has ended)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    (value,) = cursor.execute(sql.NEXT_VERSION, (key,)).fetchone()
    return int(value)
