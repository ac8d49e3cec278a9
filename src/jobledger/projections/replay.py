"""Replay: fold the whole log again and compare it with the live read models.

The jobs and schedules tables are written inline, in the transaction of the events
that change them. Replay proves they still say what the log says: it reads every
event in position order, folds job streams with `domain.jobs.apply` and schedule
streams with `domain.schedules.apply_schedule` (the same functions the commands use),
then reports every row that is missing, extra, or different field by field.

`replay(store, apply=True)` swaps the live read models for the rebuilt ones
(`Store.replace_read_models`). Run it with the workers stopped: a change committed
between the last read of the log and the swap would be overwritten. Replay narrows
that window by folding the log's tail once more just before swapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.domain.schedule_row import Schedule
from jobledger.projections.jobs import JOB_PREFIX, JobsFold
from jobledger.projections.log import DEFAULT_PAGE, OnPage, collector_paused, pages
from jobledger.projections.schedules import ScheduleApply, SchedulesFold
from jobledger.storage.port import JobFilter, Store

MISSING = "missing"  # the log has the row, the live read model does not
EXTRA = "extra"  # the live read model has a row the log does not explain
FIELD = "field"  # both have the row, a field differs


@dataclass(frozen=True, slots=True)
class Difference:
    model: str  # "jobs" | "schedules"
    key: str  # job id or schedule code
    kind: str  # MISSING | EXTRA | FIELD
    field: str | None = None
    live: Any = None
    rebuilt: Any = None

    def describe(self) -> str:
        if self.kind == MISSING:
            return f"{self.model} {self.key}: missing from the live read model"
        if self.kind == EXTRA:
            return f"{self.model} {self.key}: in the live read model, not in the log"
        return (
            f"{self.model} {self.key}: {self.field} is {_short(self.live)} live,"
            f" {_short(self.rebuilt)} from the log"
        )


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Rebuild:
    """The read models folded from the log so far; feed it events in log order."""

    def __init__(self, schedule_fold: ScheduleApply | None = None) -> None:
        self.jobs = JobsFold()
        self.schedules = SchedulesFold(schedule_fold)
        self.events = 0
        self.position = 0
        self.other_streams = 0  # events of streams neither fold knows

    def feed(self, events: Sequence[Event]) -> None:
        jobs_feed, schedules = self.jobs.feed, self.schedules
        position = self.position
        for event in events:
            if event.stream.startswith(JOB_PREFIX):  # JobsFold.handles, inlined
                jobs_feed(event)
            elif schedules.handles(event):
                schedules.feed(event)
            else:
                self.other_streams += 1
            if event.position is not None and event.position > position:
                position = event.position
        self.events += len(events)
        self.position = position

    async def read(
        self, store: Store, *, page: int = DEFAULT_PAGE, on_page: OnPage | None = None
    ) -> None:
        """Fold every event after the position reached so far (`on_page(n)` after each
        page of n events)."""
        with collector_paused():
            async for events in pages(store, after=self.position, page=page):
                self.feed(events)
                if on_page is not None:
                    on_page(len(events))

    @property
    def problems(self) -> list[str]:
        return self.jobs.problems + self.schedules.problems


async def rebuild(
    store: Store,
    *,
    page: int = DEFAULT_PAGE,
    schedule_fold: ScheduleApply | None = None,
    on_page: OnPage | None = None,
) -> Rebuild:
    result = Rebuild(schedule_fold)
    await result.read(store, page=page, on_page=on_page)
    return result


def _row_differences(model: str, key: str, live: Any, rebuilt: Any) -> list[Difference]:
    """Field-by-field differences of two rows of the same dataclass."""
    if type(live) is not type(rebuilt) or not dataclasses.is_dataclass(live):
        return [Difference(model, key, FIELD, "row", live, rebuilt)]
    out = []
    for f in dataclasses.fields(live):
        a, b = getattr(live, f.name), getattr(rebuilt, f.name)
        if a != b:
            out.append(Difference(model, key, FIELD, f.name, a, b))
    return out


def compare_rows(model: str, live: dict[str, Any], rebuilt: dict[str, Any]) -> list[Difference]:
    """Every difference between two read models keyed alike, in key order."""
    out: list[Difference] = []
    for key in sorted(live.keys() | rebuilt.keys()):
        out += _differences(model, key, live.get(key), rebuilt.get(key))
    return out


def _differences(model: str, key: str, live: Any, rebuilt: Any) -> list[Difference]:
    """The differences of one key (None: no row on that side)."""
    if live is None:
        return [Difference(model, key, MISSING, rebuilt=rebuilt)]
    if rebuilt is None:
        return [Difference(model, key, EXTRA, live=live)]
    return _row_differences(model, key, live, rebuilt) if live != rebuilt else []


async def compare_jobs(store: Store, rebuilt: dict[str, Job], *, page: int) -> list[Difference]:
    """`compare_rows("jobs", every live job, rebuilt)`, the live jobs read `page` at a time
    by id (`Store.list_jobs`' keyset paging): replay holds the rebuilt rows and one page
    of live ones, not a second copy of the read model."""
    out: list[Difference] = []
    seen: set[str] = set()
    after = ""
    while live := (
        await store.list_jobs(JobFilter(), offset=0, limit=page, after=after, count_limit=0)
    )[0]:
        for job in live:
            seen.add(job.id)
            out += _differences("jobs", job.id, job, rebuilt.get(job.id))
        after = live[-1].id
    out += [_differences("jobs", key, None, rebuilt[key])[0] for key in rebuilt.keys() - seen]
    out.sort(key=lambda d: d.key)  # stable: a row's fields keep their order
    return out


@dataclass(slots=True)
class ReplayReport:
    events: int
    position: int
    jobs_rebuilt: int
    schedules_rebuilt: int | None  # None: this build has no schedule fold
    differences: list[Difference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # events the folds rejected
    applied: bool = False

    @property
    def ok(self) -> bool:
        return not self.differences and not self.problems

    def lines(self) -> list[str]:
        schedules = (
            "schedules not checked (no schedule fold in this build)"
            if self.schedules_rebuilt is None
            else f"{self.schedules_rebuilt} schedules"
        )
        out = [
            f"replayed {self.events} events up to position {self.position}:"
            f" {self.jobs_rebuilt} open jobs, {schedules}"
        ]
        out += [f"log problem: {p}" for p in self.problems]
        out += [d.describe() for d in self.differences]
        if self.applied:
            out.append("read models replaced by the rebuilt ones")
        out.append(
            "read models match the log"
            if self.ok
            else f"{len(self.differences)} differences, {len(self.problems)} log problems"
        )
        return out


async def compare(store: Store, rebuilt: Rebuild, *, page: int = DEFAULT_PAGE) -> list[Difference]:
    differences = await compare_jobs(store, rebuilt.jobs.rows, page=page)
    if rebuilt.schedules.available:
        live_schedules = {s.code: s for s in await store.list_schedules()}
        differences += compare_rows("schedules", live_schedules, rebuilt.schedules.rows)
    return differences


async def replay(
    store: Store,
    *,
    apply: bool = False,
    page: int = DEFAULT_PAGE,
    schedule_fold: ScheduleApply | None = None,
    on_page: OnPage | None = None,
) -> ReplayReport:
    """Rebuild the read models from the log and compare; with `apply`, swap them in.

    The swap is refused while the log has events the folds reject: a rebuild that
    skipped events is not a better read model than the live one.
    """
    rebuilt = await rebuild(store, page=page, schedule_fold=schedule_fold, on_page=on_page)
    differences = await compare(store, rebuilt, page=page)
    applied = False
    if apply and differences and not rebuilt.problems:
        await rebuilt.read(store, page=page, on_page=on_page)  # what committed meanwhile
    if apply and differences and not rebuilt.problems:
        schedules: Sequence[Schedule] = (
            list(rebuilt.schedules.rows.values())
            if rebuilt.schedules.available
            else await store.list_schedules()
        )
        jobs: Sequence[Job] = list(rebuilt.jobs.rows.values())
        await store.replace_read_models(jobs, schedules)
        applied = True
        differences = await compare(store, rebuilt, page=page)
    return ReplayReport(
        events=rebuilt.events,
        position=rebuilt.position,
        jobs_rebuilt=len(rebuilt.jobs.rows),
        schedules_rebuilt=len(rebuilt.schedules.rows) if rebuilt.schedules.available else None,
        differences=differences,
        problems=rebuilt.problems,
        applied=applied,
    )
