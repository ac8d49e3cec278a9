"""What the engine tells the outside world: run lines, alerts, metrics, traces.

The lanes, the scheduler and enqueue call an `Observers` fan-out; logging, the alert
hook, Prometheus metrics, OpenTelemetry and the event-loop watchdog each implement
`Observer` (any subset of its methods: the base class does nothing). An observer that
raises is logged and ignored: telemetry never changes an outcome. A call reaches only
the observers that implement its method, so a hook nobody listens to costs one lookup.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    #: a failed run's exception (the run line's `exc_info`) and failure record
    #: (`domain.failures.Failure.to_json`): None for a run that did not fail
    exc: BaseException | None = None
    failure: Mapping[str, Any] | None = None


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
    # a handler's run, around the handler only (both lanes and the lossy runners):
    # called on the event loop, in the task that runs the handler
    def run_started(self, job: Job) -> None: ...
    def run_ended(self, job: Job) -> None: ...
    # a store call that raised, where a lane or the heartbeat caught it and goes on;
    # called inside the `except` block: `error` None means the exception being handled
    def store_error(self, operation: str, error: BaseException | None = None) -> None: ...
    # the event-loop probe: how late a periodic wake-up was (s), and a stall past the
    # threshold with the handler that held the loop (target and job id, or None); the
    # second is called from the watchdog's thread
    def loop_lag(self, seconds: float) -> None: ...
    def loop_blocked(self, target: str | None, job_id: str | None, seconds: float) -> None: ...


class Observers(Observer):
    """Fans every call out to the registered observers that implement it."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.observers: list[Observer] = list(observers)
        self._calls: dict[str, list[tuple[Observer, Callable[..., None]]]] = {}
        self._seen: list[Observer] = []

    def add(self, observer: Observer) -> None:
        self.observers.append(observer)

    def _listeners(self, name: str) -> list[tuple[Observer, Callable[..., None]]]:
        if self._seen != self.observers:  # `observers` is a public list: re-read on change
            self._calls.clear()
            self._seen = list(self.observers)
        calls = self._calls.get(name)
        if calls is None:
            default = getattr(Observer, name)
            calls = self._calls[name] = [
                (o, getattr(o, name))
                for o in self._seen
                if getattr(type(o), name, default) is not default
            ]
        return calls

    def _each(self, name: str, *args: object) -> None:
        for observer, method in self._listeners(name):
            try:
                method(*args)
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

    def run_started(self, job: Job) -> None:
        self._each("run_started", job)

    def run_ended(self, job: Job) -> None:
        self._each("run_ended", job)

    def store_error(self, operation: str, error: BaseException | None = None) -> None:
        """Report a store call that failed; inside the `except` block that caught it,
        `error` defaults to the exception being handled."""
        caught = error if error is not None else sys.exc_info()[1]
        if caught is not None:
            self._each("store_error", operation, caught)

    def loop_lag(self, seconds: float) -> None:
        self._each("loop_lag", seconds)

    def loop_blocked(self, target: str | None, job_id: str | None, seconds: float) -> None:
        self._each("loop_blocked", target, job_id, seconds)
