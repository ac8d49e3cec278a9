"""A failed run through the real lanes: its outcome event carries the failure record,
and its log line carries the exception (`exc_info`) with job id, target, attempt and
trace id, in the text and the JSON formats."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime

import pytest

import jobledger
from jobledger.config.settings import Settings
from jobledger.domain.events import EventType
from jobledger.observability.logs import configure_logging
from jobledger.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _lookup(payload: dict[str, str]) -> str:
    return payload["missing"]


def _app() -> jobledger.App:
    app = jobledger.App(store="memory://")

    @app.target("mail:welcome", lane="long", delivery_mode="at_least_once")
    async def send(job: jobledger.Job) -> None:
        _lookup({})

    return app


@pytest.fixture
def root_logging():  # type: ignore[no-untyped-def]
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_a_failed_run_is_recorded_and_logged_with_its_exception(
    fmt: str, root_logging: None
) -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format=fmt, log_level="INFO"), out)
    app = _app()
    async with app.testing(clock=FakeClock(T0)) as t:
        async with app.transaction() as tx:
            job = await app.enqueue("mail:welcome", {"user": 1}, tx=tx)
        ran = await t.run_until_idle()
        assert ran.failed == 1
        events = await t.store.log.read_stream(f"job:{job.job_id}")
    failed = events[-1]
    assert failed.type == EventType.JOB_FAILED
    failure = failed.data["failure"]
    assert failure["error_class"] == "builtins.KeyError"
    assert failure["message"] == "'missing'" and failure["attempt"] == 1
    assert failure["reason"] == "handler_error" and failure["duration_ms"] >= 0
    assert "in _lookup" in failure["traceback"]
    assert failure["traceback"].endswith("KeyError: 'missing'\n")

    lines = [line for line in out.getvalue().splitlines() if "job run" in line]
    (line,) = [line for line in lines if "result=failed" in line]
    text = out.getvalue()
    assert "in _lookup" in text and "KeyError: 'missing'" in text  # the exception
    if fmt == "json":
        record = json.loads(line)
        assert record["job_id"] == job.job_id and record["target"] == "mail:welcome"
        assert record["attempt"] == 1 and record["trace_id"] == events[0].trace_id
        assert record["error_class"] == "builtins.KeyError"
        assert record["failure_reason"] == "handler_error"
        assert "KeyError: 'missing'" in record["exc_info"]
    else:
        assert f"job_id={job.job_id}" in line and "target=mail:welcome" in line
        assert "attempt=1 reason=handler_error error_class=builtins.KeyError" in line
        assert f"trace_id={events[0].trace_id}" in line
        assert "  Traceback (most recent call last):" in text  # indented under its line
