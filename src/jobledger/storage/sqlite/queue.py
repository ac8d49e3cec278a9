"""The lanes' queue reads of the SQLite store, on the reader connection, each through the
partial index it names (`INDEXED BY`: a plan that cannot drift to a scan)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobledger.domain.jobs import Job, Lane
from jobledger.domain.timeutil import iso
from jobledger.storage import rows
from jobledger.storage.jsontext import loads as load_json
from jobledger.storage.port import QueueReads
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.encode import decode_job


class SqliteQueue(QueueReads):
    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        params: tuple[Any, ...] = (
            (partition, after_key, limit) if after_key is not None else (partition, limit)
        )
        page = await self._job_rows(sql.fast_pending_sql(after_key is not None), params)
        # the order the aggregate kept (SQLite feeds it the subquery's rows in order);
        # sorting an already sorted page is one pass
        page.sort(key=lambda j: (j.order_key, j.version, j.id))
        return page

    async def _job_rows(self, query: str, params: Sequence[Any]) -> list[Job]:
        """The jobs a `JOB_SELECT` statement finds, read as one JSON array: one step of
        the SQLite engine, where a fetch takes one per row and each gives the reader
        thread's GIL back and waits for its next turn while the event loop runs; the
        rows are decoded here, on the loop thread."""
        array = sql.job_array_sql(query)
        text = await self.connections.read(lambda c: c.execute(array, params).fetchone()[0])
        return [decode_job(r) for r in load_json(text)]

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        at = iso(now)
        params = (at, limit, at, limit, limit)
        return await self.connections.read(
            lambda c: [decode_job(r) for r in c.execute(sql.LONG_CANDIDATES, params)]
        )

    async def running_codes(self, now: datetime) -> set[str]:
        return await self.connections.read(
            lambda c: {r[0] for r in c.execute(sql.RUNNING_CODES, (iso(now),))}
        )

    async def inflight(self, partition: int) -> list[Job]:
        return await self.connections.read(
            lambda c: [decode_job(r) for r in c.execute(sql.INFLIGHT, (partition,))]
        )

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        def work(conn: sqlite3.Connection) -> datetime | None:
            if lane == Lane.LONG:
                found = [conn.execute(sql.NEXT_DUE_LONG).fetchone()[0]]
            else:
                found = [
                    conn.execute(sql.NEXT_DUE_FAST, (p,)).fetchone()[0]
                    for p in sorted(set(partitions))
                ]
            times = [t for t in found if t is not None]
            return rows.as_utc(min(times)) if times else None

        return await self.connections.read(work)
