"""The auditor's tools over the log: verify the hash chains, export events.

`verify_log` checks every stream's chain with `domain.chain.chain_problems` while
reading the log a page at a time (`LogReads.read_log_rows`: plain rows, no `Event` built
per event): a map of each stream's last link (version, hash) is kept across
pages so a chain is checked across page boundaries (and a stream seen before is not
taken for one that starts above v1), and a problem is reported once. The map is
bounded (`STREAMS_KEPT`): when it grows past that, the streams seen longest ago are
forgotten, and a forgotten stream that shows up again gets its predecessor read back
from the store (`LogReads.read_events_at`, one batch per page), so memory does not grow
with the log and the checks stay the same. `export_log` writes events as JSON Lines
(`Event.to_json`) in log order.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

from jobledger.domain.chain import Link, LogRow, chain_problems
from jobledger.domain.events import Event
from jobledger.domain.timeutil import at_ms
from jobledger.projections.log import DEFAULT_PAGE, OnPage, collector_paused, pages, row_pages
from jobledger.storage.port import Store


@dataclass(slots=True)
class VerifyReport:
    events: int = 0
    streams: int = 0
    position: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        out = [
            f"verified {self.events} events in {self.streams} streams up to position {self.position}"
        ]
        out += [f"problem: {p}" for p in self.problems]
        out.append("every hash chain holds" if self.ok else f"{len(self.problems)} problems")
        return out


#: streams whose last event verify keeps in memory (the rest is read back when needed)
STREAMS_KEPT = 50_000


async def verify_log(
    store: Store,
    *,
    page: int = DEFAULT_PAGE,
    streams_kept: int = STREAMS_KEPT,
    on_page: OnPage | None = None,
) -> VerifyReport:
    report = VerifyReport()
    last: dict[str, Link] = {}  # the newest link of recent streams, carried across pages
    reported: set[str] = set()
    with collector_paused():
        async for rows in row_pages(store, page=page):
            await _recall(store, rows, last)
            known = len(last)
            for problem in chain_problems(rows, last):
                if problem not in reported:
                    reported.add(problem)
                    report.problems.append(problem)
            report.streams += len(last) - known  # the streams that start in this page
            report.events += len(rows)
            report.position = rows[-1][0] or report.position
            if len(last) > streams_kept:
                _forget(last, len(last) - streams_kept // 2)
            if on_page is not None:
                on_page(len(rows))
    return report


async def _recall(store: Store, rows: Sequence[LogRow], last: dict[str, Link]) -> None:
    """Put back into `last` the predecessor of each stream of `rows` that is not there
    (new, or forgotten) and whose first event in `rows` is not its v1.

    The predecessor is what the map would have held: the stream's newest event at a
    smaller position. Usually that is version - 1 (one batched read); a log edited so
    that it is not is read stream by stream. Only events above v1 of streams not in
    `last` are looked at twice (most pages have none).
    """
    missing = {row[1] for row in rows if row[2] > 1 and row[1] not in last}
    if not missing:
        return
    first: dict[str, LogRow] = {}
    for row in rows:
        if row[1] in missing and row[1] not in first:
            first[row[1]] = row
    wanted = [(s, row[2] - 1) for s, row in first.items() if row[2] > 1]
    if not wanted:
        return
    found: dict[str, Link] = {}
    for event in await store.log.read_events_at(wanted):
        if (event.position or 0) < (first[event.stream][0] or 0):
            found[event.stream] = (event.version, event.hash)
    for stream, _ in wanted:
        if stream not in found:
            before = first[stream][0] or 0
            earlier = [e for e in await store.log.read_stream(stream) if (e.position or 0) < before]
            if earlier:
                newest = max(earlier, key=lambda e: e.position or 0)
                found[stream] = (newest.version, newest.hash)
    last.update(found)


def _forget(last: dict[str, Link], count: int) -> None:
    """Drop the `count` streams entered into `last` longest ago."""
    for stream in list(itertools.islice(last, count)):
        del last[stream]


async def events_between(
    store: Store,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    after_position: int = 0,
    page: int = DEFAULT_PAGE,
) -> AsyncIterator[Event]:
    """Events after `after_position` whose time is in [since, until), in log order.

    The time filter is on each event's own `at`; positions stay the order, so an
    incremental export resumes from the last position it wrote.
    """
    low = at_ms(since) if since else None
    high = at_ms(until) if until else None
    async for events in pages(store, after=after_position, page=page):
        for event in events:
            if (low is None or event.at >= low) and (high is None or event.at < high):
                yield event


@dataclass(slots=True)
class ExportReport:
    events: int = 0
    last_position: int | None = None


async def export_log(
    store: Store,
    out: TextIO,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    after_position: int = 0,
    page: int = DEFAULT_PAGE,
) -> ExportReport:
    """Write matching events to `out`, one JSON object a line."""
    report = ExportReport()
    async for event in events_between(
        store, since=since, until=until, after_position=after_position, page=page
    ):
        out.write(event.json_line())
        report.events += 1
        report.last_position = event.position
    return report
