"""The memory store's admin reads of its read models."""

from __future__ import annotations

from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.port import AdminReads, JobFilter


class MemoryAdmin(AdminReads):
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    async def get_job(self, job_id: str) -> Job | None:
        return self.tables.jobs.get(job_id)

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
        rows = [
            j
            for j in self.tables.jobs.values()
            if (flt.status is None or j.status == flt.status)
            and (flt.target is None or j.target == flt.target)
            and (flt.code is None or j.code == flt.code)
            and (flt.key is None or j.key == flt.key)
        ]
        total = len(rows) if count_limit is None else min(len(rows), count_limit)
        page = [
            j for j in rows if (before is None or j.id < before) and (after is None or j.id > after)
        ]
        page.sort(key=lambda j: j.id, reverse=after is None)
        return page[offset : offset + limit], total

    async def get_schedule(self, code: str) -> Schedule | None:
        return self.tables.schedules.get(code)

    async def list_schedules(self) -> list[Schedule]:
        schedules = self.tables.schedules
        return [schedules[c] for c in sorted(schedules)]

    async def dedupe_holder(self, key: str) -> str | None:
        stream = self.tables.dedupe.get(key)
        return None if stream is None else stream.removeprefix("job:")
