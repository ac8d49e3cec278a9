"""OpenTelemetry: enqueue makes a producer span, each run a consumer span the handler
runs inside, linked to it.

Only `opentelemetry-api` is needed at run time (the `otel` extra); without it every
function here degrades to a no-op. The application installs an SDK and exporter.

* At enqueue: `traced_enqueue_context()` puts the active span's W3C `traceparent` (and
  its trace id) into `jobledger.core.context`; `Engine.enqueue` then opens and ends a
  producer span `job.enqueue <target>` under the active span (or that traceparent) and
  stores the producer span's traceparent on the job (JobEnqueued's metadata).
* At run: `traced_run` (below) opens the consumer span `job.run <target>` —
  child of the producer span, with a link to it — and makes it the active span while
  the handler runs, so spans the handler opens nest under it. `TracingObserver` ends
  it when the outcome is decided (`run_finished`), with the job's code, target,
  attempts and result. A run that had no live span (a record from elsewhere) gets its
  span recorded afterwards from its start time and duration.
* `traced_run` is also where the observers hear that a handler starts and ends
  (`run_started` / `run_ended`, in the handler's task): the event-loop watchdog learns
  from it which job's handler holds the loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from jobledger.core import context
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job
from jobledger.observability.observe import Observer, Observers, RunRecord

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
    #: an empty context: a run without an enqueue-time span starts a trace of its own
    #: instead of nesting under whatever span happens to be active in the worker
    _ROOT_CONTEXT: Any = Context()
except ImportError:  # pragma: no cover - the otel extra is not installed
    otel_context = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]
    _PROPAGATOR = None
    _ROOT_CONTEXT = None

# results of a run that mark its span as an error
ERROR_RESULTS = {"failed", "dead", "deferred", "dropped", "lost"}
TRACER_NAME = "jobledger"
#: open run spans kept for their outcome at most; one whose outcome never came (the
#: store failed to record it) is ended as `unrecorded` after this long or past the cap
STALE_RUN_S = 600.0
MAX_OPEN_RUNS = 10_000


def current_traceparent() -> str | None:
    """The W3C traceparent of the active OpenTelemetry span, if it is valid."""
    if _PROPAGATOR is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


@contextlib.contextmanager
def traced_enqueue_context(actor: Actor | None = None) -> Iterator[context.RequestContext]:
    """Open a jobledger request context carrying the active span's traceparent.

        with tracer.start_as_current_span("checkout"), traced_enqueue_context(actor):
            async with engine.transaction() as tx:
                await engine.enqueue("mail:receipt", {...}, tx=tx)

    Without an active span the current jobledger context is kept as it is.
    """
    traceparent = current_traceparent()
    current = context.current()
    if traceparent is None:
        if actor is None or current.actor == actor:
            yield current
            return
        with context.request_context(
            trace_id=current.trace_id, traceparent=current.traceparent, actor=actor
        ) as ctx:
            yield ctx
        return
    with context.request_context(traceparent=traceparent, actor=actor or current.actor) as ctx:
        yield ctx


def parent_context(traceparent: str | None) -> Any:
    """An OpenTelemetry Context whose span is the remote `traceparent` (None if absent)."""
    if _PROPAGATOR is None or not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


def job_attributes(job: Job) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "jobledger.job.id": job.id,
        "jobledger.job.code": job.code,
        "jobledger.job.target": job.target,
        "jobledger.job.lane": job.lane.value,
        "jobledger.job.dedupe_key": job.dedupe_key,
    }
    if job.key is not None:
        attributes["jobledger.job.key"] = job.key
    return attributes


class TracingObserver(Observer):
    """Producer spans at enqueue, consumer spans per run (see the module's text).

    A live run span (`open_run`) waits in `_open` for its outcome (`run_finished`),
    keyed by job id; a record without one gets a span from its start and duration.
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        self.enabled = trace is not None
        self._open: dict[str, tuple[Any, float]] = {}  # job id -> (span, monotonic start)
        if trace is not None:
            provider = tracer_provider or trace.get_tracer_provider()
            self.tracer = provider.get_tracer(TRACER_NAME)

    # --- enqueue -------------------------------------------------------------------------
    def producer(self, target: str, job_id: str, traceparent: str | None) -> str | None:
        """Record the producer span of one enqueue and return its traceparent for the
        job; its parent is the active span, else the context's `traceparent`."""
        active = trace.get_current_span().get_span_context().is_valid
        span = self.tracer.start_span(
            f"job.enqueue {target}",
            context=None if active else parent_context(traceparent),
            kind=SpanKind.PRODUCER,
            attributes={"jobledger.job.id": job_id, "jobledger.job.target": target},
        )
        span.end()
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent") or traceparent  # a no-op provider makes none

    # --- runs ----------------------------------------------------------------------------
    def open_run(self, job: Job) -> Any:
        """Start the consumer span of a run (the caller makes it current); it ends at
        `run_finished` for this job."""
        now = time.monotonic()
        self._end_stale(job.id, now)
        parent = parent_context(job.traceparent)
        links = []
        if parent is not None:
            producer = trace.get_current_span(parent).get_span_context()
            if producer.is_valid:
                links.append(Link(producer))
        span = self.tracer.start_span(
            f"job.run {job.target}",
            context=parent if parent is not None else _ROOT_CONTEXT,
            kind=SpanKind.CONSUMER,
            attributes=job_attributes(job),
            links=links,
        )
        self._open[job.id] = (span, now)
        return span

    def _end_stale(self, job_id: str, now: float) -> None:
        stale = [job_id] if job_id in self._open else []
        for key, (_, started) in self._open.items():
            if now - started < STALE_RUN_S and len(self._open) - len(stale) < MAX_OPEN_RUNS:
                break
            stale.append(key)
        for key in stale:
            found = self._open.pop(key, None)
            if found is not None:
                found[0].set_attribute("jobledger.job.result", "unrecorded")
                found[0].end()

    def run_finished(self, record: RunRecord) -> None:
        if not self.enabled:
            return
        live = self._open.pop(record.job.id, None)
        if live is not None:
            span = live[0]
            span.set_attribute("jobledger.job.attempts", record.attempts)
            span.set_attribute("jobledger.job.result", record.result)
            if record.result in ERROR_RESULTS:
                span.set_status(Status(StatusCode.ERROR, record.error or record.result))
            span.end()
            return
        self._record_afterwards(record)

    def _record_afterwards(self, record: RunRecord) -> None:
        job = record.job
        duration_ns = int(record.duration_ms * 1_000_000)
        if record.started_at is not None:
            start_ns = int(record.started_at.timestamp() * 1_000_000_000)
        else:
            start_ns = time.time_ns() - duration_ns
        attributes = job_attributes(job)
        attributes["jobledger.job.attempts"] = record.attempts
        attributes["jobledger.job.result"] = record.result
        span = self.tracer.start_span(
            f"job.run {job.target}",
            context=parent_context(job.traceparent),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            start_time=start_ns,
        )
        if record.result in ERROR_RESULTS:
            span.set_status(Status(StatusCode.ERROR, record.error or record.result))
        span.end(end_time=start_ns + duration_ns)


# --- where the engine opens its live spans --------------------------------------------------
#
# `traced_run` around a handler (the lanes and the lossy runner), `enqueue_traceparent`
# for each job enqueued. Both find the `TracingObserver` among the engine's observers;
# without one (or without opentelemetry-api) they cost a loop over the observers and
# change nothing.


def tracing_of(observers: Observers) -> TracingObserver | None:
    """The engine's enabled TracingObserver, if it has one."""
    for observer in observers.observers:
        if isinstance(observer, TracingObserver) and observer.enabled:
            return observer
    return None


class TracedRun:
    """Run a block (the handler) with the job's run span as the active span; the span
    stays open until the observer hears the decided outcome. A class, not a generator:
    without tracing it costs the observers' loop and two calls per run (the lanes'
    hot path)."""

    __slots__ = ("_context", "_job", "_observers", "_otel", "_tracing", "span")

    def __init__(self, observers: Observers, job: Job) -> None:
        self._tracing = tracing_of(observers)
        self._observers = observers
        self._job = job
        self.span: Any = None

    def failed(self, exc: BaseException) -> None:
        """Record the handler's exception on the span."""
        if self.span is not None:
            self.span.record_exception(exc)

    def __enter__(self) -> TracedRun:
        self._observers.run_started(self._job)
        if self._tracing is None:
            return self
        self.span = self._tracing.open_run(self._job)
        self._otel = otel_context.attach(trace.set_span_in_context(self.span))
        # what the handler sends on (the Kafka target's traceparent header, an enqueue
        # without an active span) continues from the run span, not from the producer
        current = context.current()
        self._context = context.request_context(
            trace_id=current.trace_id,
            traceparent=current_traceparent() or current.traceparent,
            actor=current.actor,
        )
        self._context.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.span is not None:
                try:
                    self._context.__exit__(None, None, None)
                finally:
                    otel_context.detach(self._otel)
        finally:
            self._observers.run_ended(self._job)


#: `with traced_run(engine.observers, job) as run:` reads as what it does
traced_run = TracedRun


def enqueue_traceparent(
    tracing: TracingObserver | None, target: str, job_id: str, traceparent: str | None
) -> str | None:
    """The traceparent a new job carries: its producer span's when tracing is on."""
    if tracing is None:
        return traceparent
    return tracing.producer(target, job_id, traceparent)
