"""The change feed: the wake-up hint a commit publishes (`Wake`), fanned out in process
to every subscriber.

Hints coalesce: a subscriber that is busy gets one merged `Wake` when it next reads,
never an unbounded backlog. Adapters with an out-of-process feed (NOTIFY, change
streams) publish what they receive into one of these.

A feed may have a `FeedSource` (the PostgreSQL LISTEN connection, the SQLite
`data_version` watcher): it runs only while someone is subscribed, so a process that
only enqueues listens to nothing. `Subscription.open()` returns once the source runs:
every commit after that wakes the subscription.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from jobledger.domain.jobs import Change, Job, Lane

logger = logging.getLogger("jobledger.storage")


@dataclass(frozen=True, slots=True)
class Wake:
    """A hint from the change feed. The database stays the truth.

    `partitions` None means "anything may have changed" (after a reconnect, or from
    a store that cannot tell); `schedules` says a schedule row changed.
    """

    partitions: frozenset[int] | None = None
    lanes: frozenset[Lane] | None = None
    schedules: bool = False
    #: rows the commit opened, as it wrote them (a single enqueue on PostgreSQL): an
    #: idle fast-lane worker may mark one through `Writes.mark_first` without a read
    jobs: tuple[Job, ...] = ()


EVERYTHING = Wake(None, None, True)

#: rows a merged hint keeps (`Wake.jobs`); past this the subscriber reads
MAX_HINTED_JOBS = 32


def merge(a: Wake | None, b: Wake) -> Wake:
    """Two hints as one. The rows they carry stay only while both name their partitions
    and, together, they are few: a reader that is handed rows reads nothing else."""
    if a is None:
        return b
    parts = None if a.partitions is None or b.partitions is None else a.partitions | b.partitions
    lanes = None if a.lanes is None or b.lanes is None else a.lanes | b.lanes
    jobs = a.jobs + b.jobs if parts is not None else ()
    if len(jobs) > MAX_HINTED_JOBS:
        jobs = ()
    return Wake(parts, lanes, a.schedules or b.schedules, jobs)


def wake_of(applied: Sequence[Change]) -> Wake | None:
    """The hint a commit of `applied` changes publishes (None when nothing changed)."""
    if not applied:
        return None
    parts = frozenset(c.partition for c in applied if c.partition is not None)
    lanes = frozenset(c.row.lane for c in applied if isinstance(c.row, Job))
    schedules = any(c.stream.startswith("schedule:") for c in applied)
    return Wake(parts, lanes, schedules)


class FeedSource(Protocol):
    """What brings other processes' commits into a feed; runs while anyone subscribes."""

    async def start(self) -> None:
        """Return once commits made from now on will be published (idempotent)."""

    async def stop(self) -> None: ...


class Subscription:
    """One subscriber's wake-ups: an async iterator that ends when the feed closes.

    `open()` subscribes (and starts the feed's source if it is the first subscriber);
    the first read opens it too. Leaving — `aclose()`, the reading task cancelled while
    it waits, the feed closed — stops the source when no subscriber is left.
    """

    def __init__(self, feed: LocalFeed) -> None:
        self._feed = feed
        self.pending: Wake | None = None
        self.event = asyncio.Event()
        self._open = False
        #: when set, each wake-up is handed to it as it is published (no task switch;
        #: it must not block nor raise); the iterator then only ends with the feed
        self.on_wake: Callable[[Wake], None] | None = None

    async def open(self) -> Subscription:
        if not self._open:
            self._open = True
            await self._feed._join(self)
        return self

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            await self._feed._leave(self)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Wake:
        try:
            await self.open()
            while not self._feed.closed:
                await self.event.wait()
                self.event.clear()
                if self.pending is not None:
                    wake, self.pending = self.pending, None
                    return wake
        except asyncio.CancelledError:
            await asyncio.shield(self.aclose())
            raise
        await self.aclose()
        raise StopAsyncIteration


class LocalFeed:
    def __init__(self, source: FeedSource | None = None) -> None:
        self._subscribers: set[Subscription] = set()
        self.source = source
        self._source_lock = asyncio.Lock()
        self.closed = False

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, wake: Wake) -> None:
        for sub in self._subscribers:
            if sub.on_wake is not None:
                try:
                    sub.on_wake(wake)
                    continue
                except Exception:  # the subscriber's iterator gets it instead
                    logger.exception("a wake-up callback failed; queueing the wake-up")
            sub.pending = merge(sub.pending, wake)
            sub.event.set()

    def publish_everything(self) -> None:
        self.publish(EVERYTHING)

    def close(self) -> None:
        """End every subscription (the store stops its source itself)."""
        self.closed = True
        for sub in self._subscribers:
            sub.event.set()

    def subscribe(self) -> Subscription:
        return Subscription(self)

    async def _join(self, sub: Subscription) -> None:
        self._subscribers.add(sub)
        if self.source is not None and not self.closed:
            async with self._source_lock:
                await self.source.start()

    async def _leave(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)
        if self.source is not None and not self._subscribers:
            async with self._source_lock:
                if not self._subscribers:
                    await self.source.stop()
