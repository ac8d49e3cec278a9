"""The auditor's tools over the log: verify the hash chains, export events.

`verify_log` checks every stream's chain with `domain.events.verify_chain` while
reading the log a page at a time: one map of each stream's last event is kept across
pages so a chain is checked across page boundaries (and a stream seen before is not
taken for one that starts above v1), and a problem is reported once. `export_log`
writes events as JSON Lines (`Event.to_json`) in log order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

from jobledger.domain.events import Event, verify_chain
from jobledger.domain.timeutil import at_ms
from jobledger.projections.log import DEFAULT_PAGE, pages
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


async def verify_log(store: Store, *, page: int = DEFAULT_PAGE) -> VerifyReport:
    report = VerifyReport()
    last: dict[str, Event] = {}  # the newest event of each stream, carried across pages
    reported: set[str] = set()
    async for events in pages(store, page=page):
        for problem in verify_chain(events, last):
            if problem not in reported:
                reported.add(problem)
                report.problems.append(problem)
        report.events += len(events)
        report.position = events[-1].position or report.position
    report.streams = len(last)
    return report


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
