"""OpenTelemetry: the enqueuer's trace continues into each run of the job.

Only `opentelemetry-api` is needed at run time (the `otel` extra); without it every
function here degrades to a no-op. The application installs an SDK and exporter.

* At enqueue: `traced_enqueue_context()` puts the active span's W3C `traceparent` (and
  its trace id) into `jobledger.core.context`, which `Engine.enqueue` stores on the job.
* At run: `TracingObserver` records a span `job.run <target>` per run, child of the
  enqueue-time span context, with the job's code, target, attempts and result.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from jobledger.core import context
from jobledger.domain.events import Actor
from jobledger.observability.observe import Observer, RunRecord

try:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
except ImportError:  # pragma: no cover - the otel extra is not installed
    trace = None  # type: ignore[assignment]
    _PROPAGATOR = None

# results of a run that mark its span as an error
ERROR_RESULTS = {"failed", "dead", "deferred", "dropped", "lost"}
TRACER_NAME = "jobledger"


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


class TracingObserver(Observer):
    """One span per run, parented on the job's enqueue-time traceparent.

    The span is recorded when the outcome is known, with the run's real start time
    (`RunRecord.started_at`) and duration, so its result attribute is the decided one.
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        self.enabled = trace is not None
        if trace is not None:
            provider = tracer_provider or trace.get_tracer_provider()
            self.tracer = provider.get_tracer(TRACER_NAME)

    def run_finished(self, record: RunRecord) -> None:
        if not self.enabled:
            return
        job = record.job
        duration_ns = int(record.duration_ms * 1_000_000)
        if record.started_at is not None:
            start_ns = int(record.started_at.timestamp() * 1_000_000_000)
        else:
            start_ns = time.time_ns() - duration_ns
        attributes: dict[str, Any] = {
            "jobledger.job.id": job.id,
            "jobledger.job.code": job.code,
            "jobledger.job.target": job.target,
            "jobledger.job.lane": job.lane.value,
            "jobledger.job.attempts": record.attempts,
            "jobledger.job.result": record.result,
            "jobledger.job.dedupe_key": job.dedupe_key,
        }
        if job.key is not None:
            attributes["jobledger.job.key"] = job.key
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
