"""An in-process change feed: wake-up hints fanned out to every subscriber.

Hints coalesce: a subscriber that is busy gets one merged `Wake` when it next reads,
never an unbounded backlog. Adapters with an out-of-process feed (NOTIFY, change
streams) publish what they receive into one of these.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from jobledger.domain.jobs import Change, Job
from jobledger.storage.port import EVERYTHING, Wake


def merge(a: Wake | None, b: Wake) -> Wake:
    if a is None:
        return b
    parts = None if a.partitions is None or b.partitions is None else a.partitions | b.partitions
    lanes = None if a.lanes is None or b.lanes is None else a.lanes | b.lanes
    return Wake(parts, lanes, a.schedules or b.schedules)


def wake_of(applied: Sequence[Change]) -> Wake | None:
    """The hint a commit of `applied` changes publishes (None when nothing changed)."""
    if not applied:
        return None
    parts = frozenset(c.partition for c in applied if c.partition is not None)
    lanes = frozenset(c.row.lane for c in applied if isinstance(c.row, Job))
    schedules = any(c.stream.startswith("schedule:") for c in applied)
    return Wake(parts, lanes, schedules)


class _Subscriber:
    def __init__(self) -> None:
        self.pending: Wake | None = None
        self.event = asyncio.Event()


class LocalFeed:
    def __init__(self) -> None:
        self._subscribers: set[_Subscriber] = set()
        self._closed = False

    def publish(self, wake: Wake) -> None:
        for sub in self._subscribers:
            sub.pending = merge(sub.pending, wake)
            sub.event.set()

    def publish_everything(self) -> None:
        self.publish(EVERYTHING)

    def close(self) -> None:
        self._closed = True
        for sub in self._subscribers:
            sub.event.set()

    async def subscribe(self) -> AsyncIterator[Wake]:
        sub = _Subscriber()
        self._subscribers.add(sub)
        try:
            while not self._closed:
                await sub.event.wait()
                sub.event.clear()
                if sub.pending is not None:
                    wake, sub.pending = sub.pending, None
                    yield wake
        finally:
            self._subscribers.discard(sub)
