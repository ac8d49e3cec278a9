"""Reading the log in pages, in position order (the only order projections use)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from jobledger.domain.chain import LogRow
from jobledger.domain.events import Event
from jobledger.storage.port import Store

DEFAULT_PAGE = 2000
T = TypeVar("T")

#: called with the number of events of each page a command has read (progress)
OnPage = Callable[[int], object]


async def pages(
    store: Store, *, after: int = 0, page: int = DEFAULT_PAGE
) -> AsyncIterator[list[Event]]:
    """Every event with a position greater than `after`, a page at a time.

    Each page starts after the last position of the one before, so a reader never
    skips an event: `LogReads.read_log` holds back positions that may still commit. The
    next page is read while the caller works on this one (one page ahead, no more: the
    memory held is two pages whatever the log's size).
    """
    async for events in _read_ahead(store, store.log.read_log, _event_position, after, page):
        yield events


async def row_pages(
    store: Store, *, after: int = 0, page: int = DEFAULT_PAGE
) -> AsyncIterator[list[LogRow]]:
    """`pages` in `LogReads.read_log_rows`' form (`domain.chain.LogRow`: verify's read)."""
    async for rows in _read_ahead(store, store.log.read_log_rows, _row_position, after, page):
        yield rows


def _event_position(event: Event) -> int | None:
    return event.position


def _row_position(row: LogRow) -> int | None:
    return row[0]


async def _read_ahead(
    store: Store,
    read: Callable[..., Awaitable[list[T]]],
    position_of: Callable[[T], int | None],
    after: int,
    page: int,
) -> AsyncIterator[list[T]]:
    if page < 1:
        raise ValueError("page must be at least 1")
    position = after
    items = await read(position, limit=page)
    while items:
        last = position_of(items[-1])
        if last is None or last <= position:
            raise RuntimeError(f"{store.name}: read_log returned no progress after {position}")
        position = last
        ahead = asyncio.ensure_future(read(position, limit=page))
        try:
            yield items
        except BaseException:  # the reader stopped early (or failed): drop the read ahead
            _drop(ahead)
            raise
        items = await ahead


def _drop(ahead: asyncio.Future[Any]) -> None:
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
