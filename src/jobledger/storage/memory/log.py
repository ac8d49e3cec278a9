"""The memory store's log: reads by stream and position, and the archive's cut."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime

from jobledger.domain.events import Event
from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.port import LogReads, Retention


class MemoryLog(LogReads):
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        wanted = set(keys)
        return [e for e in self.tables.events if (e.stream, e.version) in wanted]

    async def read_stream(self, stream: str) -> list[Event]:
        return [e for e in self.tables.events if e.stream == stream]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        log = self.tables.events
        start = bisect.bisect_right(log, after, key=_position)
        return log[start : start + limit]

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        log = self.tables.events
        end = len(log) if before is None else bisect.bisect_left(log, before, key=_position)
        return log[max(end - limit, 0) : end][::-1]


class MemoryRetention(Retention):
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        newest: dict[str, datetime] = {}
        for event in self.tables.events:
            if event.stream.startswith("job:"):
                newest[event.stream] = event.at
        jobs = self.tables.jobs
        closed = [
            stream
            for stream, at in newest.items()
            if at < before and stream.removeprefix("job:") not in jobs
        ]
        return closed[:limit]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        tables = self.tables
        doomed = set(streams)
        kept = [e for e in tables.events if e.stream not in doomed]
        for event in tables.events:
            if event.stream in doomed and event.type == "JobEnqueued":
                tables.dedupe.pop(str(event.data.get("dedupe_key")), None)
        removed = len(tables.events) - len(kept)
        tables.events = kept
        return removed


def _position(event: Event) -> int:
    return event.position or 0
