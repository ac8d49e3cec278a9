"""The admin reads of the SQLite store's read models, on the reader connection."""

from __future__ import annotations

import sqlite3
from typing import Any

from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.port import AdminReads, JobFilter
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.encode import decode_job, decode_schedule
from jobledger.storage.sqlite.writes import dedupe_holders_on


class SqliteAdmin(AdminReads):
    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    async def get_job(self, job_id: str) -> Job | None:
        def work(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(sql.GET_JOB, (job_id,)).fetchone()
            return decode_job(row) if row is not None else None

        return await self.connections.read(work)

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
                where.append(f"{sql.q(column)} = ?")
                params.append(str(value))
        cursor = [(c, v) for c, v in (("id < ?", before), ("id > ?", after)) if v is not None]
        page_sql, count_sql = sql.list_jobs_sql(
            where,
            [c for c, _ in cursor],
            oldest_first=after is not None,
            capped=count_limit is not None,
        )
        page_params = [*params, *(v for _, v in cursor), limit, offset]
        count_params = params if count_limit is None else [*params, count_limit]

        def work(conn: sqlite3.Connection) -> tuple[list[Job], int]:
            conn.execute("BEGIN")  # one snapshot for the page and the total
            try:
                page = [decode_job(r) for r in conn.execute(page_sql, page_params)]
                total = conn.execute(count_sql, count_params).fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return page, int(total)

        return await self.connections.read(work)

    async def get_schedule(self, code: str) -> Schedule | None:
        def work(conn: sqlite3.Connection) -> Schedule | None:
            row = conn.execute(sql.GET_SCHEDULE, (code,)).fetchone()
            return decode_schedule(row) if row is not None else None

        return await self.connections.read(work)

    async def list_schedules(self) -> list[Schedule]:
        return await self.connections.read(
            lambda c: [decode_schedule(r) for r in c.execute(sql.LIST_SCHEDULES)]
        )

    async def dedupe_holder(self, key: str) -> str | None:
        # on the reader connection: a transaction of the writer would take the write lock
        return await self.connections.read(
            lambda conn: dedupe_holders_on(conn.cursor(), [key]).get(key)
        )
