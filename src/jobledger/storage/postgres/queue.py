"""The lanes' queue reads of the PostgreSQL store, one statement each (`sql.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobledger.domain.jobs import Job, Lane
from jobledger.storage.port import QueueReads
from jobledger.storage.postgres.connections import PgConnections
from jobledger.storage.postgres.sql import Statements
from jobledger.storage.rows import as_utc


class PgQueue(QueueReads):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql

    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        if after_key is None:
            params = {"p": partition, "limit": limit}
            return await self.connections.jobs(self.sql.fast_pending_first, params)
        params_after = {"p": partition, "limit": limit, "after": after_key.encode()}
        return await self.connections.jobs(self.sql.fast_pending_after, params_after)

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        return await self.connections.jobs(self.sql.long_candidates, {"now": now, "limit": limit})

    async def running_codes(self, now: datetime) -> set[str]:
        rows = await self.connections.rows(self.sql.running_codes, {"now": now})
        return {r["running_code"] for r in rows}

    async def inflight(self, partition: int) -> list[Job]:
        return await self.connections.jobs(self.sql.inflight, {"p": partition})

    async def inflight_in(self, partitions: Sequence[int]) -> list[Job]:
        return await self.connections.jobs(self.sql.inflight_in, {"parts": list(partitions)})

    async def pending_partitions(
        self, partitions: Sequence[int], *, due_by: datetime | None
    ) -> list[int]:
        """One statement: a probe of `jobs_fast_due` per partition (the safety poll)."""
        sql = self.sql.pending_partitions if due_by is None else self.sql.due_partitions
        rows = await self.connections.tuples(sql, {"parts": list(partitions), "due_by": due_by})
        return [r[0] for r in rows]

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        if lane == Lane.LONG:
            return as_utc(await self.connections.value(self.sql.next_due_long))
        params = {"parts": list(partitions)}
        return as_utc(await self.connections.value(self.sql.next_due_fast, params))
