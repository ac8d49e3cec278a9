"""The schedule row of the schedules read model.

The schedule state machine and its events live in `changes.py` beside this module; this
module only holds the row shape so the storage port can name it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class MissedSlotPolicy(enum.StrEnum):
    RUN_ONCE = "run_once"
    SKIP = "skip"


def schedule_stream(code: str) -> str:
    return f"schedule:{code}"


def schedule_target(code: str) -> str:
    return f"schedule:{code}"


@dataclass(frozen=True, slots=True)
class Schedule:
    code: str
    cron: str  # owned by code: rewritten at every boot
    timezone: str  # owned by code
    missed_slot_policy: MissedSlotPolicy  # owned by code
    runs_per_slot: int  # owned by code: total runs of one slot (alias `retry_count`)
    enabled: bool  # owned by admins
    cron_override: str | None  # owned by admins
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_skipped_at: datetime | None
    created_at: datetime
    updated_at: datetime
    stream_version: int
    last_hash: str
    #: when the latest slot run ended (ScheduleSlotRan / run-time ScheduleSlotSkipped);
    #: tells a late slot whether the previous slot was still running
    last_finished_at: datetime | None = None

    @property
    def stream(self) -> str:
        return schedule_stream(self.code)

    @property
    def effective_cron(self) -> str:
        return self.cron_override or self.cron
