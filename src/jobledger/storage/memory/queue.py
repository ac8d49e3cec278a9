"""The memory store's queue reads, through the indexes `MemoryTables` keeps."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime

from jobledger.domain.jobs import Job, JobStatus, Lane
from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.port import QueueReads

_PENDING = JobStatus.PENDING


class MemoryQueue(QueueReads):
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        tables = self.tables
        queued = tables.queued.get(partition)
        if not queued:
            return []
        i = 0 if after_key is None else bisect.bisect_right(queued, after_key, key=_order_of)
        jobs = tables.jobs
        page: list[Job] = []
        while len(page) < limit and i < len(queued):
            ident = queued[i][2]
            job = jobs.get(ident)
            if job is not None and job.status == _PENDING:  # lane and partition are fixed
                page.append(job)
                i += 1
            else:  # the row left the queue since it was put in
                del queued[i]
                tables.queued_ids.discard(ident)
        return page

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        rows = [
            j
            for j in self.tables.rows(self.tables.long_ids)
            if (
                (j.status == JobStatus.PENDING and j.next_run_at <= now)
                or (
                    j.status == JobStatus.RUNNING
                    and j.lease_until is not None
                    and j.lease_until <= now
                )
            )
        ]
        rows.sort(key=lambda j: (j.next_run_at, j.id))
        return rows[:limit]

    async def running_codes(self, now: datetime) -> set[str]:
        return {
            j.running_code
            for j in self.tables.jobs.values()
            if j.status == JobStatus.RUNNING
            and j.running_code
            and j.lease_until is not None
            and j.lease_until > now
        }

    async def inflight(self, partition: int) -> list[Job]:
        return [j for j in self.tables.fast_rows((partition,)) if j.inflight_token is not None]

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        tables = self.tables
        rows = (
            tables.rows(tables.long_ids) if lane == Lane.LONG else tables.fast_rows(set(partitions))
        )
        times = [j.next_run_at for j in rows if j.status == JobStatus.PENDING]
        return min(times, default=None)


def _order_of(key: tuple[str, int, str]) -> str:
    return key[0]
