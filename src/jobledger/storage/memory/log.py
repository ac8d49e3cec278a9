"""The memory store's log: reads by stream and position, retention, checkpoints."""

from __future__ import annotations

import bisect
import copy
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job


class MemoryLog:
    """The append-only log (events in position order) and the projections' checkpoints.

    The store appends to `log` when a transaction commits; `dedupe` holds the dedupe keys
    the log still carries (and the stream of each), so deleting a closed stream frees
    its key.
    """

    jobs: dict[str, Job]  # the store's rows: a stream whose job is open is never closed

    def __init__(self) -> None:
        self.log: list[Event] = []
        self.last_position = 0
        self.dedupe: dict[str, str] = {}  # dedupe key -> the stream that holds it
        self.checkpoints: dict[str, tuple[int, Any]] = {}

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        wanted = set(keys)
        return [e for e in self.log if (e.stream, e.version) in wanted]

    async def read_stream(self, stream: str) -> list[Event]:
        return [e for e in self.log if e.stream == stream]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        start = bisect.bisect_right(self.log, after, key=_position)
        return self.log[start : start + limit]

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        end = (
            len(self.log) if before is None else bisect.bisect_left(self.log, before, key=_position)
        )
        return self.log[max(end - limit, 0) : end][::-1]

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        newest: dict[str, datetime] = {}
        for event in self.log:
            if event.stream.startswith("job:"):
                newest[event.stream] = event.at
        closed = [
            stream
            for stream, at in newest.items()
            if at < before and stream.removeprefix("job:") not in self.jobs
        ]
        return closed[:limit]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        doomed = set(streams)
        kept = [e for e in self.log if e.stream not in doomed]
        for event in self.log:
            if event.stream in doomed and event.type == "JobEnqueued":
                self.dedupe.pop(str(event.data.get("dedupe_key")), None)
        removed = len(self.log) - len(kept)
        self.log = kept
        return removed

    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        position, state = self.checkpoints.get(name, (0, None))
        return position, copy.deepcopy(state)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        self.checkpoints[name] = (position, copy.deepcopy(state))


def _position(event: Event) -> int:
    return event.position or 0
