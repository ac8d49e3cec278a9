"""Where the engine opens its live spans: `traced_run` around a handler (the lanes and
the lossy runner), `enqueue_traceparent` for each job enqueued. Both find the
`TracingObserver` among the engine's observers; without one (or without
opentelemetry-api) they cost a loop over the observers and change nothing.

    with traced_run(engine.observers, job) as run:
        try:
            await target.handler(job)          # spans opened here nest under job.run
        except Exception as exc:
            run.failed(exc)                    # recorded on the span as an exception
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


class RunSpan:
    """The handler's side of its run span."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def failed(self, exc: BaseException) -> None:
        if self.span is not None:
            self.span.record_exception(exc)


_NO_SPAN = RunSpan(None)


@contextlib.contextmanager
def traced_run(observers: Observers, job: Job) -> Iterator[RunSpan]:
    """Run a block (the handler) with the job's run span as the active span; the span
    stays open until the observer hears the decided outcome."""
    tracing = tracing_of(observers)
    if tracing is None:
        yield _NO_SPAN
        return
    span = tracing.open_run(job)
    active = trace.set_span_in_context(span)
    token = otel_context.attach(active)
    # what the handler sends on (the Kafka target's traceparent header, an enqueue
    # without an active span) continues from the run span, not from the producer
    current = context.current()
    try:
        with context.request_context(
            trace_id=current.trace_id,
            traceparent=current_traceparent() or current.traceparent,
            actor=current.actor,
        ):
            yield RunSpan(span)
    finally:
        otel_context.detach(token)


def enqueue_traceparent(
    tracing: TracingObserver | None, target: str, job_id: str, traceparent: str | None
) -> str | None:
    """The traceparent a new job carries: its producer span's when tracing is on."""
    if tracing is None:
        return traceparent
    return tracing.producer(target, job_id, traceparent)
