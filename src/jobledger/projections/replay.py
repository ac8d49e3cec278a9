"""Replay: fold the whole log again and compare it with the live read models.

The jobs and schedules tables are written inline, in the transaction of the events
that change them. Replay proves they still say what the log says: it folds job streams
with `domain.jobs.apply_state` (the transitions of `apply`, the function the commands
use) and schedule streams with `domain.schedules.changes.apply_schedule`, then reports every
row that is missing, extra, or different field by field. `replay` reads the log stream
by stream and compares each job stream's row as soon as it is folded
(`replay_stream.py`): its memory does not grow with the log.

`replay(store, apply=True)` swaps the live read models for the rebuilt ones
(`ProjectionState.replace_read_models`): only then are all the rows rebuilt in memory at once
(`Rebuild`, the log in position order), and the swap is checked by another streamed
pass. Run it with the workers stopped: a change committed between the read of the log
and the swap would be overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.projections.differences import EXTRA as EXTRA
from jobledger.projections.differences import FIELD as FIELD
from jobledger.projections.differences import MISSING as MISSING
from jobledger.projections.differences import Difference as Difference
from jobledger.projections.differences import compare_rows as compare_rows
from jobledger.projections.jobs import JOB_PREFIX, JobsFold
from jobledger.projections.log import DEFAULT_PAGE, OnPage, collector_paused, pages
from jobledger.projections.replay_stream import StreamedReplay, replay_streams
from jobledger.projections.schedules import ScheduleApply, SchedulesFold
from jobledger.storage.port import Store


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


async def replay(
    store: Store,
    *,
    apply: bool = False,
    page: int = DEFAULT_PAGE,
    schedule_fold: ScheduleApply | None = None,
    on_page: OnPage | None = None,
) -> ReplayReport:
    """Fold the log stream by stream and compare; with `apply`, swap the rebuilt read
    models in (then every open row is rebuilt in memory: the swap takes them all).

    The swap is refused while the log has events the folds reject: a rebuild that
    skipped events is not a better read model than the live one.
    """
    passed = await replay_streams(store, page=page, schedule_fold=schedule_fold, on_page=on_page)
    if not (apply and passed.differences and not passed.problems):
        return _report(passed, applied=False)
    rebuilt = await rebuild(store, page=page, schedule_fold=schedule_fold, on_page=on_page)
    if rebuilt.problems:  # folded in position order the log is refused (an edited log): say so
        report = _report(passed, applied=False)
        report.problems = rebuilt.problems
        return report
    schedules: Sequence[Schedule] = (
        list(rebuilt.schedules.rows.values())
        if rebuilt.schedules.available
        else await store.admin.list_schedules()
    )
    jobs: Sequence[Job] = list(rebuilt.jobs.rows.values())
    await store.projections.replace_read_models(jobs, schedules)
    del rebuilt, jobs
    passed = await replay_streams(store, page=page, schedule_fold=schedule_fold, on_page=on_page)
    return _report(passed, applied=True)


def _report(passed: StreamedReplay, applied: bool) -> ReplayReport:
    return ReplayReport(
        events=passed.events,
        position=passed.position,
        jobs_rebuilt=passed.jobs_rebuilt,
        schedules_rebuilt=len(passed.schedules.rows) if passed.schedules.available else None,
        differences=passed.differences,
        problems=passed.problems,
        applied=applied,
    )
