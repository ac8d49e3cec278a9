"""Tracing: the enqueue-time span is the parent of each run's span (SDK in-memory exporter)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job, Lane, NewJob, Stamp
from jobledger.engine import Engine
from jobledger.observability.observe import RunRecord
from jobledger.observability.tracing import (
    TracingObserver,
    current_traceparent,
    traced_enqueue_context,
)
from jobledger.reactors.runtime import Runtime
from jobledger.storage.memory import MemoryStore
from tests.contract.lanes_kit import Recorder, until

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def job_with(traceparent: str | None) -> Job:
    change = job_commands.enqueued(
        job_id="0" * 32,
        spec=NewJob("kafka:orders", {"n": 1}, key="order-7"),
        code="order_update",
        lane=Lane.FAST,
        partition=3,
        dedupe_key="order_update:order-7:1",
        stamp=Stamp(T0, None, "ab" * 16),
        traceparent=traceparent,
    )
    row: Job = change.row
    return row


def run_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("job.run")]


def test_traced_enqueue_context_carries_the_active_span(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("test")
    assert current_traceparent() is None
    with tracer.start_as_current_span("checkout") as span:
        ctx = span.get_span_context()
        with traced_enqueue_context(Actor(id="u1", via="http")) as jl:
            assert (
                jl.traceparent == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
            )
            assert jl.trace_id == f"{ctx.trace_id:032x}"
            assert context.current().actor == Actor(id="u1", via="http")
    assert context.current().traceparent is None


def test_without_a_span_the_context_is_left_alone() -> None:
    with context.request_context(trace_id="cd" * 16) as outer, traced_enqueue_context() as inner:
        assert inner == outer


def test_run_span_is_a_child_of_the_enqueue_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("enqueue") as parent:
        traceparent = current_traceparent()
    job = job_with(traceparent)
    started = datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC)
    TracingObserver(provider).run_finished(RunRecord(job, "failed", 250.0, 1, "nope", started))
    (span,) = run_spans(exporter)
    assert span.name == "job.run kafka:orders"
    assert span.kind == SpanKind.CONSUMER
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.attributes is not None
    attrs = dict(span.attributes)
    assert attrs["jobledger.job.code"] == "order_update"
    assert attrs["jobledger.job.target"] == "kafka:orders"
    assert attrs["jobledger.job.attempts"] == 1
    assert attrs["jobledger.job.result"] == "failed"
    assert span.status.status_code == StatusCode.ERROR
    assert span.start_time == int(started.timestamp() * 1e9)
    assert span.end_time is not None and span.end_time - span.start_time == 250_000_000


def test_a_job_without_traceparent_gets_a_root_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    TracingObserver(provider).run_finished(RunRecord(job_with(None), "ok", 1.0, 0, None, T0))
    (span,) = run_spans(exporter)
    assert span.parent is None and span.status.status_code == StatusCode.UNSET


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


async def run_one(
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    clock: FakeClock,
    handler: Recorder,
    *,
    lane: str = "long",
    parent_span: bool = True,
) -> Job:
    """Enqueue one job (under an HTTP span unless `parent_span` is False) and let the
    real runtime run it until its run span is exported."""
    store = MemoryStore(8)
    await store.open()
    engine = Engine(store, clock=clock, settings=dataclasses.replace(Settings(), partitions=8))
    engine.targets.register("report:daily", lane, handler, delivery_mode="at_least_once")
    engine.observers.add(TracingObserver(provider))
    runtime = Runtime(engine, pod_id="pod-trace")
    await runtime.start()
    try:
        tracer = provider.get_tracer("test")
        with contextlib.ExitStack() as stack:
            if parent_span:
                stack.enter_context(tracer.start_as_current_span("http POST /orders"))
                stack.enter_context(traced_enqueue_context())
            async with engine.transaction() as tx:
                enqueued = await engine.enqueue("report:daily", {"day": 1}, tx=tx)
        await until(lambda: len(run_spans(exporter)) == 1)
        job = handler.calls[0]
        assert job.id == enqueued.job_id
        return job
    finally:
        await runtime.stop()
        await store.close()


async def test_enqueue_makes_a_producer_span_and_the_handler_runs_inside_its_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter, clock: FakeClock
) -> None:
    tracer = provider.get_tracer("handler")

    sent_on: list[str | None] = []  # what a Kafka send in the handler would carry

    class Render(Recorder):
        async def __call__(self, job: Job) -> None:
            await super().__call__(job)
            sent_on.append(context.current().traceparent)
            with tracer.start_as_current_span("render pdf"), tracer.start_as_current_span("upload"):
                pass

    job = await run_one(provider, exporter, clock, Render())
    spans = by_name(exporter)
    http, producer = spans["http POST /orders"], spans["job.enqueue report:daily"]
    run, inner = spans["job.run report:daily"], spans["render pdf"]
    assert producer.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    assert producer.parent is not None and producer.parent.span_id == http.context.span_id
    # the job carries the producer span's context (JobEnqueued's traceparent)
    assert job.traceparent == (
        f"00-{producer.context.trace_id:032x}-{producer.context.span_id:016x}"
        f"-{producer.context.trace_flags:02x}"
    )
    assert run.parent is not None and run.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in run.links] == [producer.context.span_id]
    assert sent_on == [
        f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-{run.context.trace_flags:02x}"
    ]
    # spans the handler opens nest under its run span, in the enqueuer's trace
    assert inner.parent is not None and inner.parent.span_id == run.context.span_id
    assert spans["upload"].parent is not None
    assert spans["upload"].parent.span_id == inner.context.span_id
    assert {s.context.trace_id for s in spans.values()} == {http.context.trace_id}
    assert run.attributes is not None
    assert run.attributes["jobledger.job.result"] == "ok"
    assert run.attributes["jobledger.job.id"] == job.id
    assert run.start_time is not None and inner.start_time is not None
    assert run.start_time <= inner.start_time and inner.end_time <= run.end_time  # type: ignore[operator]


async def test_a_failing_handler_records_its_exception_on_the_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter, clock: FakeClock
) -> None:
    handler = Recorder()
    handler.always = RuntimeError("partner answered 503")
    await run_one(provider, exporter, clock, handler, lane="fast", parent_span=False)
    spans = by_name(exporter)
    run, producer = spans["job.run report:daily"], spans["job.enqueue report:daily"]
    assert producer.parent is None  # no active span at enqueue: the producer is the root
    assert run.parent is not None and run.parent.span_id == producer.context.span_id
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None and run.attributes["jobledger.job.result"] == "failed"
    (event,) = [e for e in run.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "partner answered 503"


def test_a_run_whose_outcome_never_came_is_ended_as_unrecorded(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    observer = TracingObserver(provider)
    job = job_with(None)
    observer.open_run(job)  # its outcome was never recorded (the store failed)
    observer.open_run(job)  # the next run of the job ends the forgotten span
    (first,) = run_spans(exporter)
    assert first.attributes is not None
    assert first.attributes["jobledger.job.result"] == "unrecorded"
    observer.run_finished(RunRecord(job, "ok", 1.0, 1, None, T0))
    assert [s.attributes["jobledger.job.result"] for s in run_spans(exporter)] == [  # type: ignore[index]
        "unrecorded",
        "ok",
    ]
