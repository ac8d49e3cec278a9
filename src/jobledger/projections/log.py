"""Reading the log in pages, in position order (the only order projections use)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

from jobledger.domain.events import Event
from jobledger.storage.port import Store

DEFAULT_PAGE = 2000

#: called with the number of events of each page a command has read (progress)
OnPage = Callable[[int], object]


async def pages(
    store: Store, *, after: int = 0, page: int = DEFAULT_PAGE
) -> AsyncIterator[list[Event]]:
    """Every event with a position greater than `after`, a page at a time.

    Each page starts after the last position of the one before, so a reader never
    skips an event: `Store.read_log` holds back positions that may still commit. The
    next page is read while the caller works on this one (one page ahead, no more: the
    memory held is two pages whatever the log's size).
    """
    if page < 1:
        raise ValueError("page must be at least 1")
    position = after
    events = await store.read_log(position, limit=page)
    while events:
        last = events[-1].position
        if last is None or last <= position:
            raise RuntimeError(f"{store.name}: read_log returned no progress after {position}")
        position = last
        ahead = asyncio.ensure_future(store.read_log(position, limit=page))
        try:
            yield events
        except BaseException:  # the reader stopped early (or failed): drop the read ahead
            _drop(ahead)
            raise
        events = await ahead


def _drop(ahead: asyncio.Future[list[Event]]) -> None:
    if ahead.done():
        if not ahead.cancelled():
            ahead.exception()  # retrieved: no "exception was never retrieved" later
    else:
        ahead.cancel()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a whole log is read.

    Reading a log allocates an object graph per event, most of it freed at once by
    reference counting; the cyclic collector would still walk every live object (the
    replay's open rows, verify's last event of each stream) again and again as they
    grow, a cost that rises with the log. Event objects hold no cycles; one collection
    runs at the end.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect()
