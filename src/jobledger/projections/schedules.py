"""The schedules read model, folded from schedule streams.

The fold itself is the schedule domain's `apply_schedule(row, event)`
(`jobledger.domain.schedules.changes`); it is looked up at run time so that replay of job
streams works in a build without schedules, and says so instead of guessing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from jobledger.domain.events import Event
from jobledger.domain.schedules.row import Schedule
from jobledger.projections.jobs import where_in_log

SCHEDULE_PREFIX = "schedule:"
SCHEDULE_MODULE = "jobledger.domain.schedules.changes"

ScheduleApply = Callable[[Schedule | None, Event], Schedule | None]


def schedule_apply() -> ScheduleApply | None:
    """`jobledger.domain.schedules.changes.apply_schedule`, or None when this build has none."""
    try:
        module = importlib.import_module(SCHEDULE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name == SCHEDULE_MODULE:
            return None
        raise
    fold: ScheduleApply | None = getattr(module, "apply_schedule", None)
    return fold


class SchedulesFold:
    """Feed schedule events in log order; `rows` holds the schedules by code."""

    def __init__(self, fold: ScheduleApply | None = None) -> None:
        self.fold = fold if fold is not None else schedule_apply()
        self.rows: dict[str, Schedule] = {}
        self.problems: list[str] = []
        self.unfolded = 0  # schedule events seen while no fold was available

    @property
    def available(self) -> bool:
        return self.fold is not None

    @staticmethod
    def handles(event: Event) -> bool:
        return event.stream.startswith(SCHEDULE_PREFIX)

    def feed(self, event: Event) -> None:
        if self.fold is None:
            self.unfolded += 1
            return
        code = event.stream[len(SCHEDULE_PREFIX) :]
        where = where_in_log(event)
        try:
            row = self.fold(self.rows.get(code), event)
        except (ValueError, KeyError) as exc:
            self.problems.append(f"{where}: cannot fold: {exc}")
            return
        if row is None:
            self.rows.pop(code, None)
        else:
            self.rows[code] = row
