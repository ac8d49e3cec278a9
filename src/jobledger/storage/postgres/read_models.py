"""Reads of the PostgreSQL store's read models and log, its checkpoints, and the
rebuild of the read models (`replace_read_models`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

from jobledger.domain.chain import LogRow
from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.domain.timeutil import iso
from jobledger.storage import jsontext
from jobledger.storage.port import JobFilter
from jobledger.storage.postgres import encode, statements
from jobledger.storage.postgres.base import PgBase
from jobledger.storage.rows import (
    actor_from_json,
    as_utc,
    event_from_dict,
    schedule_from_dict,
    schedule_to_dict,
)


class ReadModels(PgBase):
    async def get_job(self, job_id: str) -> Job | None:
        found = await self._jobs(
            f"SELECT {statements.JOB_SELECT} FROM {self.s}.jobs WHERE id = %s", (job_id,)
        )
        return found[0] if found else None

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
        page_sql, count_sql, params = self.list_sql(
            flt, before=before, after=after, count_limit=count_limit
        )
        page = await self._jobs(page_sql, {**params, "offset": offset, "limit": limit})
        total = await self._value(count_sql, params) if count_limit != 0 else 0
        return page, int(total)

    def list_sql(
        self,
        flt: JobFilter,
        *,
        before: str | None = None,
        after: str | None = None,
        count_limit: int | None = None,
    ) -> tuple[str, str, dict[str, Any]]:
        """(page query, count query, parameters) of the admin listing, newest first
        (`after`: oldest first), keyset cursors on the id, the count capped when asked.

        Only the filters given appear in the SQL, so each one can use its index.
        """
        where: list[str] = ["TRUE"]
        params: dict[str, Any] = {}
        for name in ("status", "target", "code", "key"):
            value = getattr(flt, name)
            if value is not None:
                where.append(f"{name} = %({name})s")
                params[name] = str(value)
        cond = " AND ".join(where)
        keyset = ""
        if before is not None:
            keyset += " AND id < %(before)s"
            params["before"] = before
        if after is not None:
            keyset += " AND id > %(after)s"
            params["after"] = after
        page = (
            f"SELECT {statements.JOB_SELECT} FROM {self.s}.jobs WHERE {cond}{keyset}"
            f" ORDER BY id {'ASC' if after is not None else 'DESC'}"
            " OFFSET %(offset)s LIMIT %(limit)s"
        )
        if count_limit is None:
            return page, f"SELECT count(*) FROM {self.s}.jobs WHERE {cond}", params
        params["count_limit"] = count_limit
        count = (
            f"SELECT count(*) FROM (SELECT 1 FROM {self.s}.jobs WHERE {cond}"
            " LIMIT %(count_limit)s) AS capped"
        )
        return page, count, params

    async def all_jobs(self) -> list[Job]:
        return await self._jobs(f"SELECT {statements.JOB_SELECT} FROM {self.s}.jobs ORDER BY id")

    async def get_schedule(self, code: str) -> Schedule | None:
        rows = await self._rows(
            f"SELECT {statements.SCHEDULE_COLUMNS} FROM {self.s}.schedules WHERE code = %s",
            (code,),
        )
        return schedule_from_dict(rows[0]) if rows else None

    async def list_schedules(self) -> list[Schedule]:
        rows = await self._rows(
            f"SELECT {statements.SCHEDULE_COLUMNS} FROM {self.s}.schedules ORDER BY code"
        )
        return [schedule_from_dict(r) for r in rows]

    # --- the log -------------------------------------------------------------------------
    async def read_stream(self, stream: str) -> list[Event]:
        rows = await self._rows(
            f"SELECT {statements.EVENT_COLUMNS} FROM {self.s}.events WHERE stream = %s"
            " ORDER BY version",
            (stream,),
        )
        return [event_from_dict(r) for r in rows]

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))
        if not places:
            return []
        rows = await self._rows(
            f"SELECT {statements.EVENT_COLUMNS} FROM {self.s}.events"
            " WHERE (stream, version) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
            ([p[0] for p in places], [p[1] for p in places]),
        )
        return [event_from_dict(r) for r in rows]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        return [_event(row) for row in await self._log_page(after, limit)]

    async def read_log_rows(self, after: int, *, limit: int) -> list[LogRow]:
        return [_log_row(row) for row in await self._log_page(after, limit)]

    async def _log_page(self, after: int, limit: int) -> list[tuple[Any, ...]]:
        """The `EVENT_COLUMNS` of a page of the log, the JSON columns as their text."""
        # Two statements on purpose: the running transactions are listed before the
        # snapshot that reads the events is taken (see statements.horizon).
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.sql.running)
            found = await cur.fetchone()
            assert found is not None
            below = statements.horizon(int(found[0]), [int(x) for x in found[1]])
            # psycopg's json loader is the standard library's, called through Python per
            # value: the text is parsed below with orjson, as the SQLite store does
            cur.adapters.register_loader("json", TextLoader)
            params = {"after": after, "below": below, "limit": limit}
            await cur.execute(self.sql.read_log, params)
            return await cur.fetchall()

    async def read_log_by_stream(self, after: tuple[str, int], *, limit: int) -> list[Event]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.adapters.register_loader("json", TextLoader)  # parsed by `_event` (orjson)
            await cur.execute(
                f"SELECT {statements.EVENT_COLUMNS} FROM {self.s}.events"
                " WHERE (stream, version) > (%s, %s) ORDER BY stream, version LIMIT %s",
                (*after, limit),
            )
            return [_event(row) for row in await cur.fetchall()]

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        rows = await self._rows(
            f"SELECT {statements.EVENT_COLUMNS} FROM {self.s}.events WHERE position < %s"
            " ORDER BY position DESC LIMIT %s",
            (before if before is not None else 2**63 - 1, limit),
        )
        return [event_from_dict(r) for r in rows]

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        rows = await self._rows(
            f"SELECT e.stream FROM {self.s}.events e WHERE e.stream LIKE 'job:%%'"
            " GROUP BY e.stream HAVING max(e.at) < %s AND NOT EXISTS"
            f" (SELECT 1 FROM {self.s}.jobs j WHERE j.id = substr(e.stream, 5)) LIMIT %s",
            (before, limit),
        )
        return [r["stream"] for r in rows]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        if not streams:
            return 0
        return await self._exec(
            f"DELETE FROM {self.s}.events WHERE stream = ANY(%s)", (list(streams),)
        )

    # --- checkpoints -----------------------------------------------------------------------
    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        rows = await self._rows(
            f"SELECT position, state FROM {self.s}.checkpoints WHERE name = %s", (name,)
        )
        return (int(rows[0]["position"]), rows[0]["state"]) if rows else (0, None)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        await self._exec(
            f"INSERT INTO {self.s}.checkpoints (name, position, state) VALUES (%s, %s, %s)"
            " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
            " state = excluded.state",
            (name, position, Jsonb(state)),
        )

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        job_rows = jsontext.dumps([encode.job_record(j) for j in jobs])
        schedule_rows = jsontext.dumps([schedule_to_dict(s) for s in schedules])
        job_cols = f"{statements.JOB_COLUMNS}, order_key"
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(f"DELETE FROM {self.s}.jobs")
            await conn.execute(f"DELETE FROM {self.s}.schedules")
            await conn.execute(
                f"INSERT INTO {self.s}.jobs ({job_cols}) SELECT {job_cols}"
                f" FROM json_populate_recordset(NULL::{self.s}.jobs, %s::json)",
                (job_rows,),
            )
            await conn.execute(
                f"INSERT INTO {self.s}.schedules ({statements.SCHEDULE_COLUMNS})"
                f" SELECT {statements.SCHEDULE_COLUMNS}"
                f" FROM json_populate_recordset(NULL::{self.s}.schedules, %s::json)",
                (schedule_rows,),
            )
            await conn.execute("SELECT pg_notify(%s, '*')", (self.sql.channel,))


def _event(row: tuple[Any, ...]) -> Event:
    """An event from a `_log_page` row (`EVENT_COLUMNS`, JSON as text)."""
    position, stream, version, kind, data, at, actor, trace_id, prev_hash, hash_ = row
    return Event(
        stream,
        version,
        kind,
        jsontext.loads(data),
        _at(at),
        None if actor is None else actor_from_json(jsontext.loads(actor)),
        trace_id,
        prev_hash,
        hash_,
        position,
    )


def _at(value: datetime) -> datetime:
    at = as_utc(value)
    assert at is not None  # a NOT NULL column
    return at


def _log_row(row: tuple[Any, ...]) -> LogRow:
    """`domain.chain.event_row(_event(row))` without the `Event` (verify's read)."""
    position, stream, version, kind, data, at, actor, trace_id, prev_hash, hash_ = row
    return (
        position,
        stream,
        version,
        kind,
        jsontext.loads(data),
        iso(_at(at)),
        None if actor is None else actor_from_json(jsontext.loads(actor)),
        trace_id,
        prev_hash,
        hash_,
    )
