"""Checkpointed projections: fold the log from a saved position, save state and position.

A `Projection` is pure: `initial()` and `apply(state, event)`; its state must be plain
JSON (dicts with string keys, lists, numbers, strings) because the store keeps it next
to the position (`ProjectionState.save_checkpoint`). The `ProjectionRunner` reads the log from
the checkpoint a page at a time, folds, and saves state and position together after
each page, so a crash between pages redoes at most one page and never counts an event
twice. Several pods may run the same projection: any saved (position, state) pair is
consistent, so a race costs repeated work, not wrong numbers.

The runner is woken by the store's change feed and, in case a notification is lost,
by a jittered safety poll. After each page it reports how many events it had read
but not yet folded through `Observers.projection_lag` (0 once caught up).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from jobledger.core.clock import Clock, SystemClock
from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.events import Event
from jobledger.observability.observe import Observer
from jobledger.projections.log import DEFAULT_PAGE
from jobledger.storage.port import Store

logger = logging.getLogger("jobledger.projections")


class Projection(Protocol):
    name: str

    def initial(self) -> Any: ...

    def apply(self, state: Any, event: Event) -> Any: ...


@runtime_checkable
class PagedProjection(Protocol):
    """A fold that needs a few earlier events a page does not show (the stats
    projection: a job's JobEnqueued and the event before the page). `places(events)`
    names them as (stream, version); the runner reads them with one
    `LogReads.read_events_at` call and passes those that exist to `apply_page`. A state
    `accepts` refuses (an older layout) is folded again from the start of the log."""

    name: str

    def initial(self) -> Any: ...

    def accepts(self, state: Any) -> bool: ...

    def places(self, events: Sequence[Event]) -> list[tuple[str, int]]: ...

    def apply_page(
        self, state: Any, events: Sequence[Event], found: Mapping[tuple[str, int], Event]
    ) -> Any: ...


def fold_events(projection: Projection, state: Any, events: list[Event]) -> Any:
    for event in events:
        state = projection.apply(state, event)
    return state


async def fold_page(
    store: Store, projection: Projection | PagedProjection, state: Any, events: list[Event]
) -> Any:
    """Fold one page of the log, looking up what a paged projection asks for."""
    if isinstance(projection, PagedProjection):
        places = projection.places(events)
        found = await store.log.read_events_at(places) if places else []
        return projection.apply_page(state, events, {(e.stream, e.version): e for e in found})
    return fold_events(projection, state, events)


class ProjectionRunner:
    def __init__(
        self,
        store: Store,
        projection: Projection | PagedProjection,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        page: int = DEFAULT_PAGE,
        safety_poll_s: float = 30.0,
    ) -> None:
        self.store = store
        self.projection = projection
        self.clock: Clock = clock or SystemClock()
        self.observer = observer or Observer()
        self.page = page
        self.safety_poll_s = safety_poll_s
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.passes = 0

    @property
    def name(self) -> str:
        return self.projection.name

    async def state(self) -> tuple[int, Any]:
        position, state = await self.store.projections.load_checkpoint(self.name)
        if state is None or (
            isinstance(self.projection, PagedProjection) and not self.projection.accepts(state)
        ):
            return 0, self.projection.initial()
        return position, state

    async def catch_up(self, *, max_events: int | None = None) -> int:
        """Fold the events after the checkpoint, a page at a time, until the log is read
        or — with `max_events` — once that many were folded (for a caller that must
        answer in bounded time while the log grows faster than it folds); returns how
        many were folded."""
        position, state = await self.state()
        folded = 0
        while True:
            events = await self.store.log.read_log(position, limit=self.page)
            if not events:
                break
            self.observer.projection_lag(self.name, len(events))
            state = await fold_page(self.store, self.projection, state, events)
            last = events[-1].position
            if last is None or last <= position:
                raise RuntimeError(f"{self.store.name}: read_log made no progress after {position}")
            position = last
            await self.store.projections.save_checkpoint(self.name, position, state)
            folded += len(events)
            if len(events) < self.page or (max_events is not None and folded >= max_events):
                break
        self.observer.projection_lag(self.name, 0)
        self.passes += 1
        return folded

    # --- running in the background -------------------------------------------------------
    async def start(self) -> None:
        """Run in the background (the runtime's reactor protocol)."""
        if self._tasks:
            return
        self._wake.set()  # catch up once at start
        self._tasks = [
            asyncio.create_task(self._listen(), name=f"projection:{self.name}:feed"),
            asyncio.create_task(self._poll(), name=f"projection:{self.name}:poll"),
            asyncio.create_task(self._loop(), name=f"projection:{self.name}"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(*tasks)

    async def _listen(self) -> None:
        async for _wake in self.store.feed():
            self._wake.set()

    async def _poll(self) -> None:
        while True:
            await self.clock.sleep(self.safety_poll_s * random.uniform(0.8, 1.2))
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.catch_up()
            except Exception:
                logger.exception("projection %s failed; retrying at the next wake", self.name)
