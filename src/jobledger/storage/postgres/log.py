"""The log of the PostgreSQL store: reads by stream and by position — a page never
passes a transaction that may still commit (`horizon`) — and the archive's cut."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row
from psycopg.types.string import TextLoader

from jobledger.domain.chain import LogRow
from jobledger.domain.events import Event
from jobledger.domain.timeutil import iso
from jobledger.storage import jsontext
from jobledger.storage.port import LogReads, Retention
from jobledger.storage.postgres.connections import PgConnections
from jobledger.storage.postgres.schema import ORDINAL_BITS
from jobledger.storage.postgres.sql import Statements
from jobledger.storage.rows import actor_from_json, as_utc, event_from_dict


def horizon(xmax: int, running: list[int]) -> int:
    """The first event position a log read must not return yet.

    `xmax` is the xid8 every transaction below had been assigned when the running ones
    were listed; `running` are their 32-bit xids. A transaction below the lowest
    running one that is not listed had finished before the list was read, so the next
    statement's snapshot sees all its events. A listed xid at or above `xmax` (assigned
    after the snapshot) does not lower the horizon.
    """
    lowest = xmax
    for xid in running:
        behind = (xmax - xid) % (1 << 32)
        if 0 < behind < (1 << 31):
            lowest = min(lowest, xmax - behind)
    return lowest << ORDINAL_BITS


class PgLog(LogReads):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql

    async def read_stream(self, stream: str) -> list[Event]:
        rows = await self.connections.rows(self.sql.read_stream, (stream,))
        return [event_from_dict(r) for r in rows]

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))
        if not places:
            return []
        rows = await self.connections.rows(
            self.sql.read_events_at, ([p[0] for p in places], [p[1] for p in places])
        )
        return [event_from_dict(r) for r in rows]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        return [_event(row) for row in await self._log_page(after, limit)]

    async def read_log_rows(self, after: int, *, limit: int) -> list[LogRow]:
        return [_log_row(row) for row in await self._log_page(after, limit)]

    async def _log_page(self, after: int, limit: int) -> list[tuple[Any, ...]]:
        """The `EVENT_COLUMNS` of a page of the log, the JSON columns as their text."""
        # Two statements on purpose: the running transactions are listed before the
        # snapshot that reads the events is taken (see `horizon`).
        pool = self.connections.pool
        async with pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.sql.running)
            found = await cur.fetchone()
            assert found is not None
            below = horizon(int(found[0]), [int(x) for x in found[1]])
            # psycopg's json loader is the standard library's, called through Python per
            # value: the text is parsed below with orjson, as the SQLite store does
            cur.adapters.register_loader("json", TextLoader)
            params = {"after": after, "below": below, "limit": limit}
            await cur.execute(self.sql.read_log, params)
            return await cur.fetchall()

    async def read_log_by_stream(self, after: tuple[str, int], *, limit: int) -> list[Event]:
        pool = self.connections.pool
        async with pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.adapters.register_loader("json", TextLoader)  # parsed by `_event` (orjson)
            await cur.execute(self.sql.read_log_by_stream, (*after, limit))
            return [_event(row) for row in await cur.fetchall()]

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        rows = await self.connections.rows(
            self.sql.read_log_newest, (before if before is not None else 2**63 - 1, limit)
        )
        return [event_from_dict(r) for r in rows]


class PgRetention(Retention):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        rows = await self.connections.rows(self.sql.closed_streams, (before, limit))
        return [r["stream"] for r in rows]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        if not streams:
            return 0
        return await self.connections.execute(self.sql.delete_streams, (list(streams),))


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
