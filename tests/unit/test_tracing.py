"""Tracing: the enqueue-time span is the parent of each run's span (SDK in-memory exporter)."""

from __future__ import annotations

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


async def test_end_to_end_through_enqueue_and_the_runtime(
    provider: TracerProvider, exporter: InMemorySpanExporter, clock: FakeClock
) -> None:
    store = MemoryStore(8)
    await store.open()
    engine = Engine(store, clock=clock, settings=dataclasses.replace(Settings(), partitions=8))
    handler = Recorder()
    engine.targets.register("report:daily", "long", handler)
    engine.observers.add(TracingObserver(provider))
    runtime = Runtime(engine, pod_id="pod-trace")
    await runtime.start()
    try:
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("http POST /orders") as parent, traced_enqueue_context():
            async with engine.transaction() as tx:
                await engine.enqueue("report:daily", {"day": 1}, tx=tx)
        await until(lambda: len(run_spans(exporter)) == 1)
    finally:
        await runtime.stop()
        await store.close()
    (job,) = handler.calls
    expected = parent.get_span_context()
    assert job.traceparent is not None and f"{expected.span_id:016x}" in job.traceparent
    (span,) = run_spans(exporter)
    assert span.parent is not None and span.parent.span_id == expected.span_id
    assert span.context.trace_id == expected.trace_id
    assert span.attributes is not None and span.attributes["jobledger.job.result"] == "ok"
