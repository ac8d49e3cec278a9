"""The projection state of the PostgreSQL store: checkpoints, and the read models
rebuilt by `replay --apply` in one transaction that wakes every pod."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.storage import jsontext
from jobledger.storage.port import ProjectionState
from jobledger.storage.postgres import encode
from jobledger.storage.postgres.connections import PgConnections
from jobledger.storage.postgres.sql import Statements
from jobledger.storage.rows import schedule_to_dict


class PgProjections(ProjectionState):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql

    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        rows = await self.connections.rows(self.sql.load_checkpoint, (name,))
        return (int(rows[0]["position"]), rows[0]["state"]) if rows else (0, None)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        await self.connections.execute(self.sql.save_checkpoint, (name, position, Jsonb(state)))

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        job_rows = jsontext.dumps([encode.job_record(j) for j in jobs])
        schedule_rows = jsontext.dumps([schedule_to_dict(s) for s in schedules])
        sql = self.sql
        async with self.connections.pool.connection() as conn, conn.transaction():
            await conn.execute(sql.delete_jobs)
            await conn.execute(sql.delete_schedules)
            await conn.execute(sql.insert_jobs, (job_rows,))
            await conn.execute(sql.rebuild_inflight)
            await conn.execute(sql.insert_schedules, (schedule_rows,))
            await conn.execute(sql.notify_everything, (sql.channel,))
