"""The lanes' queue reads of the PostgreSQL store, one statement each (`sql.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobledger.domain.jobs import Job, Lane
from jobledger.storage.port import QueueReads
from jobledger.storage.postgres.connections import PgConnections
from jobledger.storage.postgres.sql import Statements, with_limit
from jobledger.storage.rows import as_utc


class PgQueue(QueueReads):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql
        self._limited: dict[tuple[str, int], str] = {}

    def limited(self, template: str, limit: int) -> str:
        """`template` with its LIMIT written as `limit` (`sql.with_limit`), made once."""
        text = self._limited.get((template, limit))
        if text is None:
            text = self._limited[template, limit] = with_limit(template, limit)
        return text

    def fast_pending_statement(
        self, partition: int, *, after_key: str | None, limit: int
    ) -> tuple[str, dict[str, Any]]:
        """The statement and parameters `fast_pending` sends."""
        if after_key is None:
            return self.limited(self.sql.fast_pending_first, limit), {"p": partition}
        params = {"p": partition, "after": after_key.encode()}
        return self.limited(self.sql.fast_pending_after, limit), params

    def long_candidates_statement(self, now: datetime, *, limit: int) -> tuple[str, dict[str, Any]]:
        """The statement and parameters `long_candidates` sends."""
        return self.limited(self.sql.long_candidates, limit), {"now": now}

    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        sql, params = self.fast_pending_statement(partition, after_key=after_key, limit=limit)
        return await self.connections.jobs(sql, params)

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        sql, params = self.long_candidates_statement(now, limit=limit)
        return await self.connections.jobs(sql, params)

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
