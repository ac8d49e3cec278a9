"""What the engine tells the outside world: run lines, alerts, metrics, traces.

The lanes, the scheduler and enqueue call an `Observers` fan-out; logging, the alert
hook, Prometheus metrics and OpenTelemetry each implement `Observer` (any subset of its
methods: the base class does nothing). An observer that raises is logged and ignored:
telemetry never changes an outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from jobledger.domain.jobs import Job

logger = logging.getLogger("jobledger.observability.observe")


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of one job: the reference's `job run code= target= …` line."""

    job: Job
    result: str  # ok | failed | deferred | dead | skipped | requeued | reclaimed | lost
    duration_ms: float
    attempts: int
    error: str | None = None
    started_at: datetime | None = None


class Observer:
    def enqueued(self, target: str, count: int) -> None: ...
    def run_finished(self, record: RunRecord) -> None: ...
    def job_dead(self, job: Job, reason: str, error: str | None) -> None: ...
    def target_paused(self, target: str, since: datetime) -> None: ...
    def target_resumed(self, target: str, paused_s: float) -> None: ...
    def partitions_owned(self, pod: str, count: int) -> None: ...
    def schedule_missed(self, code: str, slots: int, reason: str) -> None: ...
    def projection_lag(self, name: str, events_behind: int) -> None: ...
    def lossy_dropped(self, target: str, reason: str) -> None: ...


class Observers(Observer):
    """Fans every call out to the registered observers."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.observers: list[Observer] = list(observers)

    def add(self, observer: Observer) -> None:
        self.observers.append(observer)

    def _each(self, name: str, *args: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, name)(*args)
            except Exception:
                logger.exception("observer %s.%s failed", type(observer).__name__, name)

    def enqueued(self, target: str, count: int) -> None:
        self._each("enqueued", target, count)

    def run_finished(self, record: RunRecord) -> None:
        self._each("run_finished", record)

    def job_dead(self, job: Job, reason: str, error: str | None) -> None:
        self._each("job_dead", job, reason, error)

    def target_paused(self, target: str, since: datetime) -> None:
        self._each("target_paused", target, since)

    def target_resumed(self, target: str, paused_s: float) -> None:
        self._each("target_resumed", target, paused_s)

    def partitions_owned(self, pod: str, count: int) -> None:
        self._each("partitions_owned", pod, count)

    def schedule_missed(self, code: str, slots: int, reason: str) -> None:
        self._each("schedule_missed", code, slots, reason)

    def projection_lag(self, name: str, events_behind: int) -> None:
        self._each("projection_lag", name, events_behind)

    def lossy_dropped(self, target: str, reason: str) -> None:
        self._each("lossy_dropped", target, reason)
