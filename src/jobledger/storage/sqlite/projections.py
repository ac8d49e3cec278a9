"""The projection state of the SQLite store: checkpoints, and the read models rebuilt by
`replay --apply` (both written through the writer connection)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.storage import rows
from jobledger.storage.feed import LocalFeed
from jobledger.storage.port import ProjectionState
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.encode import dumps, encode


class SqliteProjections(ProjectionState):
    def __init__(self, connections: Connections, feed: LocalFeed) -> None:
        self.connections = connections
        self._feed = feed

    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        def work(conn: sqlite3.Connection) -> tuple[int, Any]:
            row = conn.execute(sql.LOAD_CHECKPOINT, (name,)).fetchone()
            if row is None:
                return 0, None
            return int(row[0]), json.loads(row[1]) if row[1] is not None else None

        return await self.connections.read(work)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        text = dumps(state)
        await self.connections.write(
            lambda c: c.execute(sql.SAVE_CHECKPOINT, (name, position, text))
        )

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        job_values = [encode(rows.job_to_dict(j), sql.JOB_COLUMNS) for j in jobs]
        schedule_values = [
            encode(rows.schedule_to_dict(s), rows.SCHEDULE_FIELDS) for s in schedules
        ]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(sql.DELETE_JOBS)
            conn.execute(sql.DELETE_SCHEDULES)
            conn.executemany(sql.UPSERT_JOB, job_values)
            conn.executemany(sql.UPSERT_SCHEDULE, schedule_values)

        await self.connections.write(work)
        self._feed.publish_everything()
