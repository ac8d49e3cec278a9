"""Where the engine opens its live spans: `traced_run` around a handler (the lanes and
the lossy runner), `enqueue_traceparent` for each job enqueued. Both find the
`TracingObserver` among the engine's observers; without one (or without
opentelemetry-api) they cost a loop over the observers and change nothing.

`traced_run` is also where the observers hear that a handler starts and ends
(`run_started` / `run_ended`, in the handler's task): the event-loop watchdog learns
from it which job's handler holds the loop.

    with traced_run(engine.observers, job) as run:
        try:
            await target.handler(job)          # spans opened here nest under job.run
        except Exception as exc:
            run.failed(exc)                    # recorded on the span as an exception
"""

from __future__ import annotations

from typing import Any

from jobledger.core import context
from jobledger.domain.jobs import Job
from jobledger.observability.observe import Observers
from jobledger.observability.tracing import TracingObserver, current_traceparent

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # pragma: no cover - the otel extra is not installed
    otel_context = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]


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
