"""The open-jobs listing at a cost that does not grow with the table.

A page is a keyset read on the id (ids are time-ordered, so newest first is an id sort,
served by the `(filter column, id)` indexes): `before=<id>` gives the rows older than a
row, `after=<id>` the rows newer than it. The total is counted up to `COUNT_CAP` matching
rows and no further; past that the answer says `total_capped` and shows `COUNT_CAP`
("1000+"), so no request pays for a `count(*)` over a large backlog. A count that
reached the cap is not read again for `CAPPED_KEPT_S` per store and filter in a process:
it costs `COUNT_CAP` rows, twenty times a page's, and clients polling a large backlog
paid it on every call for an answer ("1000+") that a second rarely changes. A count
under the cap is exact and read on every call, so a person who acts on a few jobs sees
their count move at once.

`page=` (the reference contract's offset paging) still works; it costs an OFFSET over
the index, so deep pages grow with their depth. The admin page and `next`/`prev` use
the cursors.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from jobledger.domain.jobs import Job
from jobledger.storage.port import JobFilter, Store

#: matching rows counted at most; beyond it a listing says "COUNT_CAP+"
COUNT_CAP = 1000
#: seconds a count that reached the cap is answered without reading it again
CAPPED_KEPT_S = 1.0

#: per store and filter: when (process monotonic time) a count last reached the cap
_CAPPED: weakref.WeakKeyDictionary[Store, dict[JobFilter, float]] = weakref.WeakKeyDictionary()


def _known_capped(store: Store, flt: JobFilter) -> bool:
    """Whether a count of `flt` reached the cap within the last `CAPPED_KEPT_S`."""
    seen = _CAPPED.get(store, {}).get(flt)
    return seen is not None and time.monotonic() - seen < CAPPED_KEPT_S


def _counted(store: Store, flt: JobFilter, counted: int) -> tuple[int, bool]:
    """(the count shown, whether capped) of `counted` rows read up to `COUNT_CAP + 1`,
    remembering when the cap was reached and forgetting it when it was not."""
    seen = _CAPPED.setdefault(store, {})
    if counted > COUNT_CAP:
        seen[flt] = time.monotonic()
        return COUNT_CAP, True
    seen.pop(flt, None)
    return counted, False


@dataclass(frozen=True, slots=True)
class Listing:
    """One page, newest first.

    `next`: pass it as `before` for the older rows (None: this is the oldest page);
    `prev`: pass it as `after` for the newer rows (None: this is the newest page).
    """

    rows: list[Job]
    total: int
    total_capped: bool
    next: str | None
    prev: str | None


def shown_count(count: int, capped: bool) -> str:
    """A count as a person reads it: "1000+" when capped."""
    return f"{count}+" if capped else str(count)


async def capped_count(store: Store, flt: JobFilter) -> tuple[int, bool]:
    """(matching rows up to COUNT_CAP, whether there are more)."""
    if _known_capped(store, flt):
        return COUNT_CAP, True
    _, counted = await store.admin.list_jobs(flt, offset=0, limit=0, count_limit=COUNT_CAP + 1)
    return _counted(store, flt, counted)


async def list_open(
    store: Store,
    flt: JobFilter,
    *,
    limit: int,
    before: str | None = None,
    after: str | None = None,
    offset: int = 0,
) -> Listing:
    """A page of open jobs matching `flt`, newest first: the newest rows older than
    `before`, or the oldest rows newer than `after` (both: the oldest rows between the
    two), after skipping `offset` rows. The total is read with the page (one snapshot on
    SQLite) unless the filter's count reached the cap within `CAPPED_KEPT_S`."""
    capped = _known_capped(store, flt)
    rows, counted = await store.admin.list_jobs(
        flt,
        offset=offset,
        limit=limit + 1,  # one more than shown says whether there is a further page
        before=before,
        after=after,
        count_limit=0 if capped else COUNT_CAP + 1,
    )
    total, over = (COUNT_CAP, True) if capped else _counted(store, flt, counted)
    more = len(rows) > limit
    rows = rows[:limit]
    if after is not None:  # the store returns the rows after a cursor oldest first
        rows.reverse()
        newer, older = more, bool(rows)
    else:
        newer, older = bool(rows) and (before is not None or offset > 0), more
    return Listing(
        rows,
        total,
        over,
        rows[-1].id if older and rows else None,
        rows[0].id if newer and rows else None,
    )
