"""Prometheus metrics: counters by target, lane latency, gauges, a registry per engine."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import httpx
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import Job, Lane
from jobledger.engine import Engine
from jobledger.observability.logs import install_observers
from jobledger.observability.metrics import (
    CONTENT_TYPE,
    MetricsObserver,
    asgi_app,
    render,
)
from jobledger.observability.observe import RunRecord
from jobledger.storage.memory import MemoryStore
from tests.builders import T0, a_job


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def test_counters_by_target_and_result() -> None:
    m = MetricsObserver()
    m.enqueued("kafka:orders", 3)
    job = a_job()
    m.run_finished(RunRecord(job, "ok", 12.0, 0, None, T0))
    m.run_finished(RunRecord(job, "failed", 5.0, 1, "500", T0))
    m.run_finished(RunRecord(job, "deferred", 5.0, 0, "down", T0))
    m.job_dead(job, "max_attempts", "500")
    m.lossy_dropped("audit:lossy", "queue_full")
    r, t = m.registry, {"target": "kafka:orders", "lane": "fast"}
    assert sample(r, "jobledger_jobs_enqueued_total", {"target": "kafka:orders"}) == 3
    assert sample(r, "jobledger_jobs_delivered_total", t) == 1
    assert sample(r, "jobledger_jobs_failed_total", t) == 1
    assert sample(r, "jobledger_jobs_deferred_total", t) == 1
    assert sample(r, "jobledger_jobs_dead_total", t) == 1
    assert sample(r, "jobledger_job_runs_total", {**t, "result": "deferred"}) == 1
    assert (
        sample(
            r, "jobledger_lossy_dropped_total", {"target": "audit:lossy", "reason": "queue_full"}
        )
        == 1
    )


def test_lane_latency_histograms() -> None:
    m = MetricsObserver()
    job = a_job(lane=Lane.LONG)  # due at T0 (commit)
    m.run_finished(RunRecord(job, "ok", 1500.0, 0, None, T0 + timedelta(seconds=2)))
    retried = dataclasses.replace(job, next_run_at=T0 + timedelta(minutes=1))
    m.run_finished(RunRecord(retried, "ok", 10.0, 1, None, T0 + timedelta(minutes=1)))
    r = m.registry
    assert sample(r, "jobledger_job_start_delay_seconds_count", {"lane": "long"}) == 2
    assert sample(r, "jobledger_job_start_delay_seconds_sum", {"lane": "long"}) == 2.0
    assert sample(r, "jobledger_job_start_delay_seconds_bucket", {"lane": "long", "le": "1.0"}) == 1
    duration = {"lane": "long", "target": "kafka:orders"}
    assert sample(r, "jobledger_job_run_duration_seconds_sum", duration) == 1.51


def test_gauges() -> None:
    m = MetricsObserver()
    m.partitions_owned("pod-a", 22)
    m.target_paused("kafka:a", T0)
    m.target_paused("kafka:b", T0)
    m.target_resumed("kafka:a", 30)
    m.projection_lag("stats", 17)
    m.schedule_missed("nightly", 3, "pods_down")
    r = m.registry
    assert sample(r, "jobledger_partitions_owned", {"pod": "pod-a"}) == 22
    assert sample(r, "jobledger_targets_paused") == 1
    assert sample(r, "jobledger_target_paused", {"target": "kafka:a"}) == 0
    assert sample(r, "jobledger_target_paused", {"target": "kafka:b"}) == 1
    assert sample(r, "jobledger_projection_lag_events", {"projection": "stats"}) == 17
    assert (
        sample(
            r, "jobledger_schedule_missed_slots_total", {"code": "nightly", "reason": "pods_down"}
        )
        == 3
    )


def test_each_engine_has_its_own_registry_and_never_the_global_one() -> None:
    a, b = MetricsObserver(), MetricsObserver()
    a.enqueued("t", 1)
    assert sample(a.registry, "jobledger_jobs_enqueued_total", {"target": "t"}) == 1
    assert sample(b.registry, "jobledger_jobs_enqueued_total", {"target": "t"}) == 0
    assert REGISTRY.get_sample_value("jobledger_jobs_enqueued_total", {"target": "t"}) is None


def test_render_is_the_text_exposition() -> None:
    m = MetricsObserver()
    m.enqueued("kafka:orders", 2)
    text = render(m.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["jobledger_jobs_enqueued"].samples[0].value == 2
    assert CONTENT_TYPE.startswith("text/plain")


async def test_enqueue_through_the_engine_counts_after_commit(clock: FakeClock) -> None:
    store = MemoryStore(8)
    await store.open()
    engine = Engine(store, clock=clock, settings=Settings(partitions=8))

    async def handler(job: Job) -> None:
        return None

    engine.targets.register("kafka:orders", "fast", handler)
    telemetry = install_observers(engine)
    registry = telemetry.registry
    async with engine.transaction() as tx:
        await engine.enqueue("kafka:orders", 1, tx=tx, dedupe_key="x")
        await engine.enqueue("kafka:orders", 1, tx=tx, dedupe_key="x")  # dedupe: not counted
        assert sample(registry, "jobledger_jobs_enqueued_total", {"target": "kafka:orders"}) == 0
    assert sample(registry, "jobledger_jobs_enqueued_total", {"target": "kafka:orders"}) == 1
    try:
        async with engine.transaction() as tx:
            await engine.enqueue("kafka:orders", 2, tx=tx)
            raise LookupError
    except LookupError:
        pass
    assert sample(registry, "jobledger_jobs_enqueued_total", {"target": "kafka:orders"}) == 1
    await store.close()


async def test_asgi_app_serves_the_registry() -> None:
    m = MetricsObserver()
    m.enqueued("kafka:orders", 5)
    transport = httpx.ASGITransport(app=asgi_app(m.registry))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/")
    assert response.status_code == 200
    assert 'jobledger_jobs_enqueued_total{target="kafka:orders"} 5.0' in response.text


def test_store_errors_and_the_event_loop() -> None:
    m = MetricsObserver()
    try:
        raise ConnectionError("server closed the connection")
    except ConnectionError:
        m.store_error("heartbeat")  # inside the except block: the error being handled
    m.store_error("long_reserve", TimeoutError())
    m.loop_lag(0.002)
    m.loop_lag(1.5)
    m.loop_blocked("report:build", "9" * 32, 0.6)
    m.loop_blocked(None, None, 0.7)
    stalled = [3.5]
    m.watch_loop(lambda: stalled[0])
    r = m.registry
    kinds = {"operation": "heartbeat", "kind": "ConnectionError"}
    assert sample(r, "jobledger_store_errors_total", kinds) == 1
    timeout = {"operation": "long_reserve", "kind": "TimeoutError"}
    assert sample(r, "jobledger_store_errors_total", timeout) == 1
    assert sample(r, "jobledger_event_loop_lag_seconds_count") == 2
    assert sample(r, "jobledger_event_loop_lag_seconds_bucket", {"le": "0.5"}) == 1
    assert sample(r, "jobledger_event_loop_blocked_total", {"target": "report:build"}) == 1
    assert sample(r, "jobledger_event_loop_blocked_total", {"target": ""}) == 1
    assert sample(r, "jobledger_event_loop_stalled_seconds") == 3.5


async def test_asgi_app_without_registry_serves_the_installed_one(clock: FakeClock) -> None:
    app = asgi_app()  # built before any engine, like the HTTP layer's /metrics route
    engine = Engine(MemoryStore(8), clock=clock, settings=Settings(partitions=8))
    telemetry = install_observers(engine)
    assert telemetry.metrics is not None
    telemetry.metrics.enqueued("late:target", 1)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/")
    assert 'jobledger_jobs_enqueued_total{target="late:target"} 1.0' in response.text


def test_the_grafana_dashboard_uses_only_metrics_that_exist() -> None:
    """docs/grafana-dashboard.json is built on the names this module registers: a
    renamed metric fails here, not on an operator's empty panel."""
    import json
    import re
    from pathlib import Path

    dashboard = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(bucket|total|count|sum)$", "", name)
        for expr in exprs
        for name in re.findall(r"\bjobledger_\w+", expr)
    }
    registered = {family.name for family in MetricsObserver().registry.collect()}
    assert used == registered, (used - registered, registered - used)
