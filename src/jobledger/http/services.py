"""What the HTTP layer needs from the engine, gathered by the composition root."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobledger.admin.jobs import JobAdmin
from jobledger.core.clock import Clock
from jobledger.domain.events import Actor
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.port import Store


class ScheduleAdmin(Protocol):
    """The scheduler's admin commands (`jobledger.reactors.scheduler.Scheduler`).

    Each raises NotFound for an unknown code; `set_cron_override` raises InvalidCron.
    """

    async def enable(self, code: str, actor: Actor | None) -> Schedule: ...
    async def disable(self, code: str, actor: Actor | None) -> Schedule: ...
    async def set_cron_override(self, code: str, cron: str, actor: Actor | None) -> Schedule: ...
    async def clear_cron_override(self, code: str, actor: Actor | None) -> Schedule: ...


@dataclass(slots=True)
class Services:
    store: Store
    clock: Clock
    jobs: JobAdmin
    schedules: ScheduleAdmin | None = None
    #: the targets paused on this process's worker and since when (`PauseMap.paused`);
    #: it answers None when no worker runs here
    paused: Callable[[], Mapping[str, datetime] | None] | None = None
    #: a pod is live while its heartbeat is newer than this (settings.worker_live_s)
    worker_live_s: float = 30.0
    #: the attempts a job of a code gets before it goes DEAD (`TargetRegistry.max_attempts`)
    max_attempts: Callable[[str], int] | None = None
