"""Reading the log in pages, in position order (the only order projections use)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from jobledger.domain.events import Event
from jobledger.storage.port import Store

DEFAULT_PAGE = 2000


async def pages(
    store: Store, *, after: int = 0, page: int = DEFAULT_PAGE
) -> AsyncIterator[list[Event]]:
    """Every event with a position greater than `after`, a page at a time.

    Each page starts after the last position of the one before, so a reader never
    skips an event: `Store.read_log` holds back positions that may still commit.
    """
    if page < 1:
        raise ValueError("page must be at least 1")
    position = after
    while True:
        events = await store.read_log(position, limit=page)
        if not events:
            return
        yield events
        last = events[-1].position
        if last is None or last <= position:
            raise RuntimeError(f"{store.name}: read_log returned no progress after {position}")
        position = last
