"""The log of the SQLite store: reads on the reader connection, and the archive's cut
(closed streams, their removal through the writer)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobledger.domain.chain import LogRow
from jobledger.domain.events import Event
from jobledger.domain.timeutil import iso
from jobledger.storage.port import LogReads, Retention
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.encode import decode_event, decode_log_row

T = TypeVar("T")


class SqliteLog(LogReads):
    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    async def read_stream(self, stream: str) -> list[Event]:
        return await self.connections.read(
            lambda c: [decode_event(r) for r in c.execute(sql.READ_STREAM, (stream,))]
        )

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))

        def work(conn: sqlite3.Connection) -> list[Event]:
            found: list[Event] = []
            for start in range(0, len(places), sql.EVENTS_AT_CHUNK):
                chunk = places[start : start + sql.EVENTS_AT_CHUNK]
                flat = [item for place in chunk for item in place]
                found.extend(
                    decode_event(r) for r in conn.execute(sql.events_at_sql(len(chunk)), flat)
                )
            return found

        return await self.connections.read(work)

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        return await self._tuples(decode_event, sql.READ_LOG, (after, limit))

    async def read_log_rows(self, after: int, *, limit: int) -> list[LogRow]:
        return await self._tuples(decode_log_row, sql.READ_LOG, (after, limit))

    async def read_log_by_stream(self, after: tuple[str, int], *, limit: int) -> list[Event]:
        return await self._tuples(decode_event, sql.READ_LOG_BY_STREAM, (*after, limit))

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        bound = before if before is not None else 2**63 - 1
        return await self._tuples(decode_event, sql.READ_LOG_NEWEST, (bound, limit))

    async def _tuples(
        self, decode: Callable[[Any], T], query: str, params: Sequence[Any]
    ) -> list[T]:
        """The rows of `query` as plain tuples (cheaper than `sqlite3.Row` per event),
        each through `decode`."""

        def work(conn: sqlite3.Connection) -> list[T]:
            cursor = conn.cursor()
            cursor.row_factory = None
            return [decode(r) for r in cursor.execute(query, params)]

        return await self.connections.read(work)


class SqliteRetention(Retention):
    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        return await self.connections.read(
            lambda c: [r[0] for r in c.execute(sql.CLOSED_STREAMS, (iso(before), limit))]
        )

    async def delete_streams(self, streams: Sequence[str]) -> int:
        def work(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            conn.executemany(sql.DELETE_STREAM, [(s,) for s in streams])
            return conn.total_changes - before

        return await self.connections.write(work) if streams else 0
