"""Prometheus metrics, one `CollectorRegistry` per engine (never the global one).

Served by a worker's metrics server (`jobledger.observability.metrics_server`, the
`metrics_port` setting) and by the admin server's `/metrics` (`asgi_app()`);
`render(registry)` returns the exposition bytes (content type `CONTENT_TYPE`).
docs/operations.md says what each metric means and what to watch; the Grafana
dashboard in docs/grafana-dashboard.json is built on exactly these names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    make_asgi_app,
)

from jobledger.domain.jobs import Job, Lane
from jobledger.observability.observe import Observer, RunRecord

CONTENT_TYPE = CONTENT_TYPE_LATEST

# seconds, from a few ms (fast lane, idle engine) to an hour (backlog, long handlers)
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600,
)  # fmt: skip

# seconds an event loop woke late: a healthy loop stays under a few ms
LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

FAILED_RESULTS = {"failed"}


class MetricsObserver(Observer):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.enqueued_total = Counter(
            "jobledger_jobs_enqueued", "Jobs enqueued (committed)", ["target"], registry=r
        )
        self.delivered_total = Counter(
            "jobledger_jobs_delivered", "Runs that succeeded", ["target", "lane"], registry=r
        )
        self.failed_total = Counter(
            "jobledger_jobs_failed", "Answered failures (a retry was scheduled)",
            ["target", "lane"], registry=r,
        )  # fmt: skip
        self.deferred_total = Counter(
            "jobledger_jobs_deferred", "Runs deferred: the target was unreachable, no attempt spent",
            ["target", "lane"], registry=r,
        )  # fmt: skip
        self.dead_total = Counter(
            "jobledger_jobs_dead", "Jobs that went DEAD", ["target", "lane"], registry=r
        )
        self.runs_total = Counter(
            "jobledger_job_runs", "Runs by result", ["target", "lane", "result"], registry=r
        )
        self.start_delay = Histogram(
            "jobledger_job_start_delay_seconds",
            "From the job becoming due (commit, or its retry time) to the run's start",
            ["lane"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.run_duration = Histogram(
            "jobledger_job_run_duration_seconds",
            "Handler run time",
            ["lane", "target"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.partitions = Gauge(
            "jobledger_partitions_owned", "Fast-lane partitions owned by a pod", ["pod"], registry=r
        )
        self.paused = Gauge(
            "jobledger_target_paused", "1 while the target is paused on this pod", ["target"],
            registry=r,
        )  # fmt: skip
        self.paused_count = Gauge(
            "jobledger_targets_paused", "Targets paused on this pod", registry=r
        )
        self.projection_lag_events = Gauge(
            "jobledger_projection_lag_events", "Events a projection is behind the log",
            ["projection"], registry=r,
        )  # fmt: skip
        self.schedule_missed_total = Counter(
            "jobledger_schedule_missed_slots", "Schedule slots missed or skipped",
            ["code", "reason"], registry=r,
        )  # fmt: skip
        self.lossy_dropped_total = Counter(
            "jobledger_lossy_dropped", "Lossy items dropped", ["target", "reason"], registry=r
        )
        self.store_errors_total = Counter(
            "jobledger_store_errors",
            "Store calls that raised where a lane or the heartbeat caught them and went on",
            ["operation", "kind"],
            registry=r,
        )
        self.loop_lag_seconds = Histogram(
            "jobledger_event_loop_lag_seconds",
            "How much later than asked the event loop ran its periodic probe",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.loop_stalled_seconds = Gauge(
            "jobledger_event_loop_stalled_seconds",
            "Seconds since the event loop last ran its probe, at scrape time (0 when unwatched)",
            registry=r,
        )
        self.loop_blocked_total = Counter(
            "jobledger_event_loop_blocked",
            "Event-loop stalls past loop_block_warn_s, by the target whose handler held the"
            ' loop (target="": not a handler)',
            ["target"],
            registry=r,
        )
        self._paused_targets: set[str] = set()
        self._run_series: dict[tuple[str, Lane, str], tuple[Any, Any, Any, Any]] = {}

    def enqueued(self, target: str, count: int) -> None:
        if count > 0:
            self.enqueued_total.labels(target).inc(count)

    def run_finished(self, record: RunRecord) -> None:
        job = record.job
        key = (job.target, job.lane, record.result)
        series = self._run_series.get(key)
        if series is None:
            series = self._run_series[key] = self._series_of(*key)
        runs, outcome, duration, delay = series
        runs.inc()
        if outcome is not None:
            outcome.inc()
        duration.observe(record.duration_ms / 1000)
        if record.started_at is not None:
            delay.observe(start_delay_s(job, record.started_at))

    def _series_of(self, target: str, lane: Lane, result: str) -> tuple[Any, Any, Any, Any]:
        """The children one run of (target, lane, result) moves, looked up once: a
        `labels()` call validates and locks, and a run moves four of them."""
        outcome = None
        if result == "ok":
            outcome = self.delivered_total.labels(target, lane.value)
        elif result in FAILED_RESULTS:
            outcome = self.failed_total.labels(target, lane.value)
        elif result == "deferred":
            outcome = self.deferred_total.labels(target, lane.value)
        return (
            self.runs_total.labels(target, lane.value, result),
            outcome,
            self.run_duration.labels(lane.value, target),
            self.start_delay.labels(lane.value),
        )

    def job_dead(self, job: Job, reason: str, error: str | None) -> None:
        self.dead_total.labels(job.target, job.lane.value).inc()

    def target_paused(self, target: str, since: datetime) -> None:
        self._paused_targets.add(target)
        self.paused.labels(target).set(1)
        self.paused_count.set(len(self._paused_targets))

    def target_resumed(self, target: str, paused_s: float) -> None:
        self._paused_targets.discard(target)
        self.paused.labels(target).set(0)
        self.paused_count.set(len(self._paused_targets))

    def partitions_owned(self, pod: str, count: int) -> None:
        self.partitions.labels(pod).set(count)

    def schedule_missed(self, code: str, slots: int, reason: str) -> None:
        self.schedule_missed_total.labels(code, reason).inc(max(slots, 1))

    def projection_lag(self, name: str, events_behind: int) -> None:
        self.projection_lag_events.labels(name).set(events_behind)

    def lossy_dropped(self, target: str, reason: str) -> None:
        self.lossy_dropped_total.labels(target, reason).inc()

    def store_error(self, operation: str, error: BaseException | None = None) -> None:
        caught = error if error is not None else sys.exc_info()[1]
        kind = type(caught).__name__ if caught is not None else "unknown"
        self.store_errors_total.labels(operation, kind).inc()

    def loop_lag(self, seconds: float) -> None:
        self.loop_lag_seconds.observe(seconds)

    def loop_blocked(self, target: str | None, job_id: str | None, seconds: float) -> None:
        self.loop_blocked_total.labels(target or "").inc()

    def watch_loop(self, stalled_s: Callable[[], float]) -> None:
        """Read `jobledger_event_loop_stalled_seconds` from `stalled_s` at each scrape
        (the worker's metrics server answers from its own thread, so a scrape during a
        stall shows it)."""
        self.loop_stalled_seconds.set_function(stalled_s)


def start_delay_s(job: Job, started_at: datetime) -> float:
    """Commit side → start: `next_run_at` is the commit time for a first run (or the
    requested run_at), the retry time after a failure; never below 0."""
    return max((started_at - job.next_run_at).total_seconds(), 0.0)


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of `registry` (serve with `CONTENT_TYPE`)."""
    return generate_latest(registry)


_default_registry: CollectorRegistry | None = None


def set_default_registry(registry: CollectorRegistry | None) -> None:
    """The registry `asgi_app()` serves when given none (set by `install_observers`)."""
    global _default_registry
    _default_registry = registry


def asgi_app(registry: CollectorRegistry | None = None) -> Any:
    """An ASGI app for /metrics. Without `registry` it serves, at request time, the one
    `install_observers` last installed (so the route can be built before the engine);
    404 when none is installed. Never prometheus_client's global registry."""
    apps: dict[int, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        chosen = registry if registry is not None else _default_registry
        if chosen is None:
            body = b"no metrics registry installed\n"
            headers = [(b"content-type", b"text/plain; charset=utf-8")]
            await send({"type": "http.response.start", "status": 404, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        served = apps.get(id(chosen))
        if served is None:
            served = apps[id(chosen)] = make_asgi_app(registry=chosen)
        await served(scope, receive, send)

    return app
