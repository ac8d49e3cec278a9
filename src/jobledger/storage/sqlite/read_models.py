"""Read models, the log and checkpoints of the SQLite store (reads on the reader
connection; checkpoints, archive deletes and rebuilt read models through the writer)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobledger.domain.chain import LogRow
from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.domain.timeutil import iso
from jobledger.storage import rows
from jobledger.storage.port import JobFilter
from jobledger.storage.sqlite.base import SqliteBase
from jobledger.storage.sqlite.encode import (
    decode_event,
    decode_job,
    decode_log_row,
    decode_schedule,
    dumps,
    encode,
)
from jobledger.storage.sqlite.statements import (
    EVENT_SELECT,
    JOB_COLUMNS,
    JOB_SELECT,
    SCHEDULE_SELECT,
    UPSERT_JOB,
    UPSERT_SCHEDULE,
    q,
)

T = TypeVar("T")


class ReadModels(SqliteBase):
    # --- read models ----------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        def work(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(f"{JOB_SELECT} WHERE id = ?", (job_id,)).fetchone()
            return decode_job(row) if row is not None else None

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
                where.append(f"{q(column)} = ?")
                params.append(str(value))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        cursor = [(c, v) for c, v in (("id < ?", before), ("id > ?", after)) if v is not None]
        page_where = " AND ".join([*where, *(c for c, _ in cursor)])
        page_sql = (
            f"{JOB_SELECT}{' WHERE ' + page_where if page_where else ''}"
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
                page = [decode_job(r) for r in conn.execute(page_sql, page_params)]
                total = conn.execute(count_sql, count_params).fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return page, int(total)

        return await self._read(work)

    async def all_jobs(self) -> list[Job]:
        return await self._read(
            lambda c: [decode_job(r) for r in c.execute(f"{JOB_SELECT} ORDER BY id")]
        )

    async def get_schedule(self, code: str) -> Schedule | None:
        def work(conn: sqlite3.Connection) -> Schedule | None:
            row = conn.execute(f"{SCHEDULE_SELECT} WHERE code = ?", (code,)).fetchone()
            return decode_schedule(row) if row is not None else None

        return await self._read(work)

    async def list_schedules(self) -> list[Schedule]:
        return await self._read(
            lambda c: [decode_schedule(r) for r in c.execute(f"{SCHEDULE_SELECT} ORDER BY code")]
        )

    # --- the log ------------------------------------------------------------------------------
    async def read_stream(self, stream: str) -> list[Event]:
        sql = f"{EVENT_SELECT} WHERE stream = ? ORDER BY version"
        return await self._read(lambda c: [decode_event(r) for r in c.execute(sql, (stream,))])

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))

        def work(conn: sqlite3.Connection) -> list[Event]:
            found: list[Event] = []
            for start in range(0, len(places), 400):
                chunk = places[start : start + 400]
                values = ", ".join("(?, ?)" for _ in chunk)
                sql = f"{EVENT_SELECT} WHERE (stream, version) IN (VALUES {values})"
                flat = [item for place in chunk for item in place]
                found.extend(decode_event(r) for r in conn.execute(sql, flat))
            return found

        return await self._read(work)

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        return await self._read_log(decode_event, after, limit)

    async def read_log_rows(self, after: int, *, limit: int) -> list[LogRow]:
        return await self._read_log(decode_log_row, after, limit)

    async def _read_log(self, decode: Callable[[Any], T], after: int, limit: int) -> list[T]:
        # one writer at a time: a position is only ever handed out after every smaller
        # one has committed, so "greater than the last seen" never skips a late commit
        sql = f"{EVENT_SELECT} WHERE position > ? ORDER BY position LIMIT ?"

        def work(conn: sqlite3.Connection) -> list[T]:
            cursor = conn.cursor()
            cursor.row_factory = None  # plain tuples: cheaper than sqlite3.Row per event
            return [decode(r) for r in cursor.execute(sql, (after, limit))]

        return await self._read(work)

    async def read_log_by_stream(self, after: tuple[str, int], *, limit: int) -> list[Event]:
        sql = f"{EVENT_SELECT} WHERE (stream, version) > (?, ?) ORDER BY stream, version LIMIT ?"

        def work(conn: sqlite3.Connection) -> list[Event]:
            cursor = conn.cursor()
            cursor.row_factory = None
            return [decode_event(r) for r in cursor.execute(sql, (*after, limit))]

        return await self._read(work)

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        sql = f"{EVENT_SELECT} WHERE position < ? ORDER BY position DESC LIMIT ?"
        bound = before if before is not None else 2**63 - 1

        def work(conn: sqlite3.Connection) -> list[Event]:
            cursor = conn.cursor()
            cursor.row_factory = None
            return [decode_event(r) for r in cursor.execute(sql, (bound, limit))]

        return await self._read(work)

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
        text = dumps(state)
        await self._write(lambda c: c.execute(sql, (name, position, text)))

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        job_values = [encode(rows.job_to_dict(j), JOB_COLUMNS) for j in jobs]
        schedule_values = [
            encode(rows.schedule_to_dict(s), rows.SCHEDULE_FIELDS) for s in schedules
        ]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM jobs")
            conn.execute("DELETE FROM schedules")
            conn.executemany(UPSERT_JOB, job_values)
            conn.executemany(UPSERT_SCHEDULE, schedule_values)

        await self._write(work)
        self._feed.publish_everything()
