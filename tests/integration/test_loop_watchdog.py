"""An `async def` handler that blocks the event loop (`time.sleep` inside it) is named
once per target in a warning with its job id, counted per stall, and seen in the
loop-lag histogram; on a real App over SQLite and PostgreSQL, no mocks."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from psycopg.conninfo import conninfo_to_dict

from jobledger.app import App
from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job
from jobledger.observability.loop_lag import LoopMonitor
from jobledger.observability.metrics import MetricsObserver
from tests.factories.postgres import fresh_schema

BLOCK_S = 0.8
WARN_S = 0.3


@asynccontextmanager
async def store_url(kind: str, tmp_path: Path) -> AsyncIterator[tuple[str, Settings]]:
    settings = Settings(loop_block_warn_s=WARN_S, partitions=8)
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}", settings
        return
    async with fresh_schema() as (dsn, schema):
        parts = conninfo_to_dict(dsn)
        url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
        yield url, Settings(loop_block_warn_s=WARN_S, partitions=8, postgres_schema=schema)


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    return registry.get_sample_value(name, labels or {}) or 0.0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_blocking_handler_is_reported_once_per_target(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "jobledger.loop")
    async with store_url(kind, tmp_path) as (url, settings):
        app = App(store=url, settings=settings)

        @app.target("report:blocking", lane="fast", delivery_mode="at_least_once")
        async def blocking(job: Job) -> None:
            time.sleep(BLOCK_S)  # the defect under test: a blocking call in an async def

        @app.target("mail:polite", lane="fast", delivery_mode="at_least_once")
        async def polite(job: Job) -> None:
            return None

        pod = app.bind()
        monitor = next(o for o in pod.engine.observers.observers if isinstance(o, LoopMonitor))
        metrics = next(o for o in pod.engine.observers.observers if isinstance(o, MetricsObserver))
        async with app:
            ids = []
            for n in range(2):  # two stalls, one after the other
                async with app.transaction() as tx:
                    done = await app.enqueue("report:blocking", {"n": n}, tx=tx)
                    await app.enqueue("mail:polite", {"n": n}, tx=tx)
                assert monitor.watching
                await app.wait_done(done.job_id, timeout_s=30)
                ids.append(done.job_id)
        registry = metrics.registry
        warnings = [r for r in caplog.records if "blocked the event loop" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        (warning,) = warnings
        assert "target=report:blocking" in warning.getMessage()
        assert f"job_id={ids[0]}" in warning.getMessage()
        assert warning.__dict__["target"] == "report:blocking"
        blocked = sample(
            registry, "jobledger_event_loop_blocked_total", {"target": "report:blocking"}
        )
        assert blocked == 2  # each stall counted; the warning written once
        assert (
            sample(registry, "jobledger_event_loop_blocked_total", {"target": "mail:polite"}) == 0
        )
        count = sample(registry, "jobledger_event_loop_lag_seconds_count")
        under = sample(registry, "jobledger_event_loop_lag_seconds_bucket", {"le": "0.5"})
        assert count - under >= 2  # the probe woke at least 0.5 s late after each stall
        assert not monitor.watching and monitor.stalled_s() == 0.0
