"""The admin reads of the PostgreSQL store's read models."""

from __future__ import annotations

from typing import Any

from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.port import AdminReads, JobFilter
from jobledger.storage.postgres.connections import PgConnections
from jobledger.storage.postgres.sql import Statements, list_jobs_sql
from jobledger.storage.postgres.writes import holders_of
from jobledger.storage.rows import schedule_from_dict


class PgAdmin(AdminReads):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql

    async def get_job(self, job_id: str) -> Job | None:
        found = await self.connections.jobs(self.sql.get_job, (job_id,))
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
        page = await self.connections.jobs(page_sql, {**params, "offset": offset, "limit": limit})
        total = await self.connections.value(count_sql, params) if count_limit != 0 else 0
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
        params: dict[str, Any] = {}
        for name in ("status", "target", "code", "key"):
            value = getattr(flt, name)
            if value is not None:
                params[name] = str(value)
        filters = list(params)
        if before is not None:
            params["before"] = before
        if after is not None:
            params["after"] = after
        if count_limit is not None:
            params["count_limit"] = count_limit
        page, count = list_jobs_sql(
            self.sql.schema,
            filters,
            before=before is not None,
            after=after is not None,
            count_limit=count_limit is not None,
        )
        return page, count, params

    async def get_schedule(self, code: str) -> Schedule | None:
        rows = await self.connections.rows(self.sql.get_schedule, (code,))
        return schedule_from_dict(rows[0]) if rows else None

    async def list_schedules(self) -> list[Schedule]:
        rows = await self.connections.rows(self.sql.list_schedules)
        return [schedule_from_dict(r) for r in rows]

    async def dedupe_holder(self, key: str) -> str | None:
        rows = await self.connections.tuples(self.sql.dedupe_holders, {"keys": [key]})
        return holders_of((str(k), str(s)) for k, s in rows).get(key)
